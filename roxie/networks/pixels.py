"""Pixel encoders and the fusion of dict observations into one feature vector.

Image observations are uint8 [..., H, W, C] stacks of frames (see
`roxie.types.EnvSpec.obs_shapes`); they become float32 in [0, 1] inside the
network, so replay and acting move bytes, not floats. The conv torso follows
the shape of the encoders of SAC-AE ("Improving Sample Efficiency in
Model-Free Reinforcement Learning from Images", Yarats et al., 2019,
https://arxiv.org/abs/1910.01741) and DrQ ("Image Augmentation Is All You
Need", Kostrikov et al., 2020, https://arxiv.org/abs/2004.13649): a few 3x3
convolutions, a linear projection, then LayerNorm and tanh. Its defaults are
smaller (fewer channels, more striding) so that a 64x64 encoder trains on a
2-core CPU.

Pooling. By default ('flatten') the last conv output is flattened into the
projection, so the projection's weights, and the encoder's parameter shapes,
depend on the image size. 'mean' (global average pooling over H and W) and
'spatial_softmax' (one expected image position per channel, Levine et al.,
"End-to-End Training of Deep Visuomotor Policies", 2016,
https://arxiv.org/abs/1504.00702) give the same parameter shapes for any
resolution, which is what a run's resolution schedule (low resolution early,
higher later; `roxie.run`) needs to keep training the same parameters.
"""

import dataclasses
from typing import (Any, Callable, Dict, Mapping, NamedTuple, Optional,
                    Sequence, Tuple)

import chex
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from roxie.networks import conv
from roxie.networks import torsos

Array = chex.Array
ObsShapes = Sequence[Tuple[str, Tuple[int, ...], str]]


def is_image(shape: Sequence[int], dtype: Any) -> bool:
  """Whether an observation entry of this per-env shape and dtype is an image.

  Images (the 'pixels' and 'depth' entries of a dict observation) are uint8
  [H, W, C]; every other entry is a float vector.
  """
  return len(tuple(shape)) == 3 and np.dtype(dtype) == np.uint8


def conv_output_size(size: int, kernel: int, stride: int) -> int:
  """Spatial size after a VALID convolution (0 if the input is too small)."""
  return max(0, (size - kernel) // stride + 1)


# How the last conv output [N, h, w, C] becomes one vector per image.
POOLINGS = ('flatten', 'mean', 'spatial_softmax')
# The poolings whose parameter shapes do not depend on the image size.
RESOLUTION_AGNOSTIC_POOLINGS = ('mean', 'spatial_softmax')


def check_pooling(pooling: str) -> str:
  """Returns `pooling` if it is one of `POOLINGS`; raises ValueError if not."""
  if pooling not in POOLINGS:
    raise ValueError(f'Unknown encoder pooling {pooling!r}; choose one of '
                     f'{", ".join(POOLINGS)}.')
  return pooling


def _coordinates(n: int) -> Array:
  """n pixel-centre coordinates spanning [-1, 1] (0 for a single pixel)."""
  if n == 1:
    return jnp.zeros((1,), jnp.float32)
  return jnp.linspace(-1., 1., n, dtype=jnp.float32)


def spatial_softmax(features: Array) -> Array:
  """Expected image position of each channel: [N, h, w, C] -> [N, 2C].

  Each channel's map goes through a softmax over its h * w positions (the
  spatial soft-argmax of Levine et al., 2016, temperature 1); the outputs
  are the expected x (across the width) of every channel, then the expected
  y (down the height), in coordinates spanning [-1, 1] from the first pixel
  centre to the last. The temperature is fixed (not learned), as in
  robomimic's default.
  """
  n, h, w, c = features.shape
  logits = jnp.reshape(jnp.moveaxis(features, -1, 1), (n, c, h * w))
  attention = jax.nn.softmax(logits, axis=-1)
  ys, xs = jnp.meshgrid(_coordinates(h), _coordinates(w), indexing='ij')
  x = jnp.einsum('ncp,p->nc', attention, jnp.reshape(xs, (h * w,)))
  y = jnp.einsum('ncp,p->nc', attention, jnp.reshape(ys, (h * w,)))
  return jnp.concatenate([x, y], axis=-1)


class PixelEncoder(hk.Module):
  """A conv torso: uint8 images [..., H, W, C] -> features [..., D].

  Inputs are scaled to [0, 1] (uint8 / 255; float inputs are taken as already
  scaled), then go through VALID 2-D convolutions with ReLU, are pooled into
  one vector (`pooling`) and projected to `feature_size`. With `layer_norm`
  the projection is followed by LayerNorm and tanh (the SAC-AE/DrQ feature
  head, which keeps the critic's inputs bounded); without a projection D is
  the pooled conv output.

  Pooling of the last conv output [h, w, C]:
    'flatten': all h * w * C values (the default; the projection's weights
      then depend on the image size);
    'mean': the average over h and w of each channel (C values);
    'spatial_softmax': each channel's expected x, then y, position under a
      softmax over its map (2C values; `spatial_softmax`).
  With 'mean' or 'spatial_softmax' the parameters have the same shapes for
  any image size, so one set of parameters encodes every resolution.

  Any number of leading batch axes is accepted, including none.
  """

  def __init__(self,
               *,
               channels: Sequence[int] = (16, 32, 32),
               kernel_sizes: Sequence[int] = (3, 3, 3),
               strides: Sequence[int] = (2, 2, 2),
               feature_size: Optional[int] = 50,
               layer_norm: bool = True,
               activation: Callable[[Array], Array] = jax.nn.relu,
               image_shape: Optional[Tuple[int, int, int]] = None,
               pooling: str = 'flatten',
               name: Optional[str] = None):
    """Builds the encoder.

    Args:
      channels: output channels of each convolution.
      kernel_sizes: square kernel size of each convolution.
      strides: stride of each convolution.
      feature_size: width of the linear projection after the convolutions;
        None for no projection (the pooled conv output is the feature).
      layer_norm: LayerNorm then tanh after the projection (needs
        `feature_size`).
      activation: the nonlinearity after each convolution.
      image_shape: if given, images must be [..., H, W, C] of this shape.
      pooling: 'flatten', 'mean' or 'spatial_softmax' (see the class
        docstring).
      name: module name.
    """
    super().__init__(name=name)
    if not (len(channels) == len(kernel_sizes) == len(strides)):
      raise ValueError(
          f'channels, kernel_sizes and strides need one entry per layer, got '
          f'{len(channels)}, {len(kernel_sizes)} and {len(strides)}.')
    if not channels:
      raise ValueError('A pixel encoder needs at least one convolution.')
    if layer_norm and feature_size is None:
      raise ValueError('layer_norm needs a feature_size (a projection).')
    self._channels = tuple(int(c) for c in channels)
    self._kernels = tuple(int(k) for k in kernel_sizes)
    self._strides = tuple(int(s) for s in strides)
    self._feature_size = feature_size
    self._layer_norm = layer_norm
    self._activation = activation
    self._image_shape = None if image_shape is None else tuple(image_shape)
    self._pooling = check_pooling(pooling)

  def output_hw(self, height: int, width: int) -> Tuple[int, int]:
    """Spatial size of the last convolution's output."""
    for k, s in zip(self._kernels, self._strides):
      height, width = conv_output_size(height, k, s), conv_output_size(
          width, k, s)
    return height, width

  def __call__(self, images: Array) -> Array:
    """Maps [..., H, W, C] images to [..., D] features."""
    shape = tuple(jnp.shape(images))
    if len(shape) < 3:
      raise ValueError(
          f'{self.module_name}: images must be [..., H, W, C], got shape '
          f'{shape}.')
    if self._image_shape is not None and shape[-3:] != self._image_shape:
      raise ValueError(
          f'{self.module_name}: expected images of shape [..., '
          f'{", ".join(map(str, self._image_shape))}], got {shape}.')
    h, w, c = shape[-3:]
    out_h, out_w = self.output_hw(h, w)
    if out_h < 1 or out_w < 1:
      raise ValueError(
          f'{self.module_name}: {h}x{w} images are too small for '
          f'convolutions with kernels {self._kernels} and strides '
          f'{self._strides}; use a larger resolution or fewer/smaller-stride '
          'layers.')
    lead = shape[:-3]
    x = jnp.reshape(images, (-1, h, w, c))
    if x.dtype == jnp.uint8:
      x = x.astype(jnp.float32) / 255.
    else:
      x = x.astype(jnp.float32)
    for i, (ch, k, s) in enumerate(zip(self._channels, self._kernels,
                                       self._strides)):
      # hk.Conv2D's parameters and outputs; a backward pass XLA:CPU runs
      # fast inside the training loop's scan (see roxie/networks/conv.py).
      x = conv.Conv2D(ch, kernel_shape=k, stride=s, name=f'conv_{i}')(x)
      x = self._activation(x)
    if self._pooling == 'mean':
      x = jnp.mean(x, axis=(1, 2))
    elif self._pooling == 'spatial_softmax':
      x = spatial_softmax(x)
    else:
      x = jnp.reshape(x, (x.shape[0], -1))
    if self._feature_size is not None:
      x = hk.Linear(self._feature_size, name='projection')(x)
      if self._layer_norm:
        x = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True,
                         name='layer_norm')(x)
        x = jnp.tanh(x)
    return jnp.reshape(x, lead + (x.shape[-1],))


class ObservationEncoder(hk.Module):
  """Fuses an observation into one feature vector [..., F].

  A flat float observation [..., O] passes through unchanged (F = O). A dict
  observation has its image entries (uint8 [..., H, W, C]: 'pixels',
  'depth') concatenated along channels and encoded by one `PixelEncoder`,
  and its vector entries ('state', 'sensors', ...) concatenated in key order
  after the image features: F = D + sum of the vector sizes.
  """

  def __init__(self,
               *,
               obs_shapes: Optional[ObsShapes] = None,
               channels: Sequence[int] = (16, 32, 32),
               kernel_sizes: Sequence[int] = (3, 3, 3),
               strides: Sequence[int] = (2, 2, 2),
               feature_size: Optional[int] = 50,
               layer_norm: bool = True,
               pooling: str = 'flatten',
               name: Optional[str] = None):
    """Builds the encoder.

    Args:
      obs_shapes: if given, the spec's ((key, per-env shape, dtype), ...):
        observations must have exactly these keys, shapes and dtypes
        (checked, with the offending key named).
      channels, kernel_sizes, strides, feature_size, layer_norm, pooling: the
        `PixelEncoder`'s.
      name: module name.
    """
    super().__init__(name=name)
    self._obs_shapes = (None if obs_shapes is None else tuple(
        (str(k), tuple(int(d) for d in s), str(t)) for k, s, t in obs_shapes))
    self._pixel_kwargs = dict(channels=channels, kernel_sizes=kernel_sizes,
                              strides=strides, feature_size=feature_size,
                              layer_norm=layer_norm,
                              pooling=check_pooling(pooling))

  def _check(self, obs: Mapping[str, Array]) -> None:
    where = self.module_name
    if self._obs_shapes is None:
      return
    want = {k: (s, t) for k, s, t in self._obs_shapes}
    if set(obs) != set(want):
      raise ValueError(
          f'{where}: expected observation keys {sorted(want)}, got '
          f'{sorted(obs)}.')
    lead = None
    for key in sorted(want):
      shape, dtype = want[key]
      x = obs[key]
      got = tuple(jnp.shape(x))
      if len(got) < len(shape) or got[len(got) - len(shape):] != shape:
        raise ValueError(
            f'{where}: observation {key!r} must be [..., '
            f'{", ".join(map(str, shape))}], got shape {got}.')
      if np.dtype(jnp.asarray(x).dtype) != np.dtype(dtype):
        raise ValueError(f'{where}: observation {key!r} must be {dtype}, got '
                         f'{jnp.asarray(x).dtype}.')
      this_lead = got[:len(got) - len(shape)]
      if lead is None:
        lead = this_lead
      elif this_lead != lead:
        raise ValueError(
            f'{where}: observation entries must share their batch axes, got '
            f'{lead} and {this_lead} ({key!r}).')

  def __call__(self, obs) -> Array:
    """Maps an observation (array or dict) to [..., F] float32 features."""
    if not isinstance(obs, Mapping):
      torsos.check_last_axis(obs, None, 'obs', self.module_name)
      return obs
    self._check(obs)
    images = [k for k in sorted(obs)
              if is_image(jnp.shape(obs[k])[-3:], jnp.asarray(obs[k]).dtype)
              and jnp.ndim(obs[k]) >= 3]
    vectors = [k for k in sorted(obs) if k not in images]
    parts = []
    if images:
      hw = {tuple(jnp.shape(obs[k])[-3:-1]) for k in images}
      if len(hw) > 1:
        raise ValueError(
            f'{self.module_name}: image entries {images} must share their '
            f'height and width to be encoded together, got {sorted(hw)}.')
      stacked = jnp.concatenate([obs[k] for k in images], axis=-1)
      parts.append(PixelEncoder(name='pixel_encoder', **self._pixel_kwargs)(
          stacked))
    for k in vectors:
      torsos.check_last_axis(obs[k], None, f'obs[{k!r}]', self.module_name)
      parts.append(jnp.asarray(obs[k], jnp.float32))
    if not parts:
      raise ValueError(f'{self.module_name}: an empty observation dict.')
    lead = {p.shape[:-1] for p in parts}
    if len(lead) > 1:
      raise ValueError(
          f'{self.module_name}: observation entries must share their batch '
          f'axes, got {sorted(lead)}.')
    return jnp.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]



class SharedEncoder(NamedTuple):
  """How a recipe's networks read observations, chosen once from the spec.

  From pixels, the DrQ/SAC-AE arrangement: the critic owns a conv encoder
  and trains it with its loss (its parameters live in the critic's, so
  target critics carry a target encoder), the actor reads the encoder's
  features through a stop-gradient, and sampled observations are randomly
  shifted before encoding (`make_shared_encoder`). For flat observations the
  identity (`identity_encoder`): no parameters, features = obs, no shift, no
  random keys. `observation_encoder` picks one, so a recipe written against
  this (through `encoded_critic`) never asks which it has.
  """
  init: Callable[[chex.PRNGKey, Any], hk.Params]  # (key, obs) -> params.
  apply: Callable[[hk.Params, Any], Array]  # (params, obs [N, ...]) -> [N, F].
  dummy_obs: Callable[[int], Any]  # n -> a zero observation batch [n, ...].
  augment: Callable[[chex.PRNGKey, Any], Any]  # Random shift of the images.
  # False for the identity: it has no parameters and draws no random keys,
  # and a critic reading through it keeps the critic's own parameters.
  trainable: bool = True
  # The width the heads check their input against: the flat observation's
  # size; None from pixels (the features' width is taken as given).
  obs_size: Optional[int] = None


def identity_encoder(obs_size: Optional[int]) -> SharedEncoder:
  """The `SharedEncoder` of flat [N, obs_size] observations: features = obs.

  Args:
    obs_size: the flat observation's size (the spec's `obs_size`).

  Returns:
    An encoder without parameters whose `augment` returns obs unchanged.
  """

  def dummy_obs(n: int):
    if obs_size is None:
      raise ValueError('identity_encoder: dummy_obs needs an obs_size.')
    return jnp.zeros((n, obs_size))

  return SharedEncoder(init=lambda key, obs: {},
                       apply=lambda params, obs: obs, dummy_obs=dummy_obs,
                       augment=lambda key, obs: obs, trainable=False,
                       obs_size=obs_size)


def make_shared_encoder(obs_shapes: Optional[ObsShapes], *,
                        channels: Sequence[int] = (16, 32, 32),
                        kernel_sizes: Optional[Sequence[int]] = None,
                        strides: Sequence[int] = (2, 2, 2),
                        feature_size: Optional[int] = 50,
                        layer_norm: bool = True,
                        augment_pad: int = 4,
                        pooling: str = 'flatten') -> Optional[SharedEncoder]:
  """A `SharedEncoder` for observations of `obs_shapes`; None if flat (None).

  Args:
    obs_shapes: the env spec's `obs_shapes`.
    channels, strides, feature_size, layer_norm, pooling: the
      `PixelEncoder`'s.
    kernel_sizes: default 3 for every layer.
    augment_pad: the random shift's largest offset in pixels (0: none).

  Returns:
    The encoder's functions, or None for flat observations (see
    `observation_encoder` for one that is never None).
  """
  if obs_shapes is None:
    return None
  from roxie.networks import augment as augment_lib  # pylint: disable=g-import-not-at-top
  if kernel_sizes is None:
    kernel_sizes = (3,) * len(channels)
  shapes = tuple((str(k), tuple(int(d) for d in s), str(t))
                 for k, s, t in obs_shapes)
  net = hk.without_apply_rng(hk.transform(lambda o: ObservationEncoder(
      obs_shapes=shapes, channels=channels, kernel_sizes=kernel_sizes,
      strides=strides, feature_size=feature_size, layer_norm=layer_norm,
      pooling=pooling)(o)))

  def dummy_obs(n: int):
    return {k: jnp.zeros((n,) + s, t) for k, s, t in shapes}

  def augment(key, obs):
    return augment_lib.random_shift_observation(key, obs, pad=augment_pad)

  return SharedEncoder(init=net.init, apply=net.apply, dummy_obs=dummy_obs,
                       augment=augment)


class EncodedCritic(NamedTuple):
  """A critic that reads observations through a `SharedEncoder`.

  Made by `encoded_critic` from a critic transform `critic(obs, action)`:
  `init` and `apply` keep its signature but take observations, which they
  encode with the parameters' 'encoder' entry (the Q-network's are under
  'q'). Through the identity encoder (flat observations) everything is the
  critic itself, with its own parameters, and the other functions are
  identities, so a recipe written against this behaves exactly as it would
  on state vectors without it.
  """
  encoder: SharedEncoder
  # (key, obs, action, *, encoder_key=None) -> params. With `encoder_key`
  # the Q-head is initialised from `key` and the encoder from `encoder_key`;
  # without, `key` is split between them (encoder first).
  init: Callable[..., hk.Params]
  apply: Callable[..., Any]  # (params, obs, action) -> the critic's output.
  # (critic params, obs) -> what the actor reads: the encoder's features
  # through a stop-gradient, or the flat observation.
  actor_input: Callable[[hk.Params, Any], Array]
  # (key, Transition) -> the Transition with obs and next_obs each shifted.
  augment: Callable[[chex.PRNGKey, Any], Any]
  # (new, target, tau, encoder_tau) -> the new target critic parameters.
  polyak: Callable[[hk.Params, hk.Params, float, float], hk.Params]
  # (critic params, obs) -> [N, F] features, with their gradient (what the
  # critic loss trains the encoder through).
  features: Callable[[hk.Params, Any], Array]
  # (critic params, features [..., F], action) -> the critic's output on
  # already-encoded features (any leading axes).
  head: Callable[..., Any]

  def split_keys(self, key: chex.PRNGKey, n: int, m: int = 1):
    """Splits `key` into `n` keys for the recipe and `m` for the encoder.

    The identity encoder draws none: its `m` keys are None and `key` is
    split into `n` only. One key in all is `key` itself, unsplit.

    Returns:
      (n keys, m encoder keys or m Nones), tuples.
    """
    total = n + (m if self.encoder.trainable else 0)
    keys = (key,) if total == 1 else tuple(jax.random.split(key, total))
    if not self.encoder.trainable:
      return keys[:n], (None,) * m
    return keys[:n], keys[n:]


def encoded_critic(critic: hk.Transformed,
                   encoder: Optional[SharedEncoder]) -> EncodedCritic:
  """Puts `encoder` in front of a critic transform (see `EncodedCritic`).

  The DrQ/SAC-AE arrangement for any actor-critic recipe: the encoder's
  parameters live in the critic's, so the critic loss trains it and the
  target critic has a target encoder; the actor reads `actor_input`
  (stop-gradient features); `augment` shifts sampled images.

  Args:
    critic: a haiku transform (without rng) of `critic(obs, action)`.
    encoder: from `observation_encoder` (or `make_shared_encoder`; None or
      `identity_encoder` for flat observations).

  Returns:
    An `EncodedCritic`.
  """
  import optax  # pylint: disable=g-import-not-at-top
  if encoder is None:
    encoder = identity_encoder(None)
  if not encoder.trainable:
    return EncodedCritic(
        encoder=encoder,
        init=lambda key, obs, action, *, encoder_key=None: critic.init(
            key, obs, action),
        apply=critic.apply,
        actor_input=lambda params, obs: obs,
        augment=lambda key, batch: batch,
        polyak=lambda new, old, tau, encoder_tau: optax.incremental_update(
            new, old, tau),
        features=lambda params, obs: obs,
        head=critic.apply)

  def init(key, obs, action, *, encoder_key=None):
    if encoder_key is None:
      encoder_key, key = jax.random.split(key)
    encoder_params = encoder.init(encoder_key, obs)
    return {'encoder': encoder_params,
            'q': critic.init(key, encoder.apply(encoder_params, obs), action)}

  def features(params, obs):
    return encoder.apply(params['encoder'], obs)

  def head(params, feats, action):
    return critic.apply(params['q'], feats, action)

  def apply(params, obs, action):
    return head(params, features(params, obs), action)

  def actor_input(params, obs):
    return jax.lax.stop_gradient(features(params, obs))

  def augment(key, batch):
    k_obs, k_next = jax.random.split(key)
    return batch._replace(obs=encoder.augment(k_obs, batch.obs),
                          next_obs=encoder.augment(k_next, batch.next_obs))

  def polyak(new, old, tau, encoder_tau):
    return {'encoder': optax.incremental_update(new['encoder'],
                                                old['encoder'], encoder_tau),
            'q': optax.incremental_update(new['q'], old['q'], tau)}

  return EncodedCritic(encoder=encoder, init=init, apply=apply,
                       actor_input=actor_input, augment=augment,
                       polyak=polyak, features=features, head=head)


@dataclasses.dataclass(frozen=True)
class PixelConfig:
  """How a recipe encodes pixels: its config's `pixels` field.

  A recipe config holds one (`pixels: PixelConfig`, e.g.
  `sac.Config(pixels=networks.PixelConfig(encoder_pooling='mean'))`); its
  fields keep their own names on the command line and in config.json
  (`--set encoder_pooling=mean`; see `roxie.config`). They only matter for
  dict observations with images; see
  `make_shared_encoder` and `encoded_critic`. The default conv is small for
  CPUs: 16-32-32 channels of 3x3, stride 2 each, 50 features.
  `encoder_pooling` is the `PixelEncoder`'s pooling: 'flatten' (the default),
  or 'mean' / 'spatial_softmax', whose parameters fit any resolution (needed
  by a run's resolution schedule).
  """
  encoder_channels: Tuple[int, ...] = (16, 32, 32)
  encoder_strides: Tuple[int, ...] = (2, 2, 2)
  encoder_feature_size: int = 50
  encoder_pooling: str = 'flatten'  # Or 'mean', 'spatial_softmax'.
  encoder_tau: float = 0.05  # Target encoder averaging (SAC-AE, DrQ).
  augment_pad: int = 4  # DrQ random shift in pixels; 0 turns it off.

  def __post_init__(self):
    check_pooling(self.encoder_pooling)  # A bad --set fails at once.


def pixel_config(config: Any) -> PixelConfig:
  """The `PixelConfig` of a recipe config (its `pixels` field).

  `config` may be a `PixelConfig` itself; a config without a `pixels` field
  (a user recipe's that never reads pixels) gets the defaults.
  """
  if isinstance(config, PixelConfig):
    return config
  found = getattr(config, 'pixels', None)
  return PixelConfig() if found is None else found


def encoder_from_config(config: Any, spec: Any) -> Optional[SharedEncoder]:
  """The `SharedEncoder` a recipe config's pixels ask for; None if flat.

  Args:
    config: a recipe config with a `pixels` field, or a `PixelConfig`.
    spec: the env spec.
  """
  p = pixel_config(config)
  return make_shared_encoder(
      spec.obs_shapes, channels=p.encoder_channels, strides=p.encoder_strides,
      feature_size=p.encoder_feature_size, augment_pad=p.augment_pad,
      pooling=p.encoder_pooling)


def policy_params_with_encoder(params: Mapping[str, Any],
                               critic_params: Any) -> Dict[str, Any]:
  """A recipe's `policy_params`, plus the critic's encoder from pixels."""
  out = dict(params)
  if isinstance(critic_params, Mapping) and 'encoder' in critic_params:
    out['encoder'] = critic_params['encoder']
  return out


def observation_encoder(config: Any, spec: Any) -> SharedEncoder:
  """The encoder a recipe reads `spec`'s observations through, chosen once.

  The conv encoder the config's `PixelConfig` asks for on dict observations, the
  identity (`identity_encoder(spec.obs_size)`) on flat ones.
  """
  encoder = encoder_from_config(config, spec)
  return identity_encoder(spec.obs_size) if encoder is None else encoder


def policy_input(encoder: Optional[SharedEncoder], params: Mapping[str, Any],
                 obs: Any) -> Any:
  """What an exported policy's actor reads: encoded pixels, or obs itself."""
  if encoder is None or not encoder.trainable:
    return obs
  return encoder.apply(params['encoder'], obs)
