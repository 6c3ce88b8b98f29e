"""Torsos and building helpers shared by the actor and critic heads.

All modules here are haiku modules: build them inside a function passed to
`hk.transform` (or `hk.without_apply_rng(hk.transform(...))`).
"""

from typing import Callable, Optional, Sequence

import chex
import haiku as hk
import jax
import jax.numpy as jnp

Array = chex.Array


def check_last_axis(x: Array, size: Optional[int], what: str,
                    where: str) -> None:
  """Raises a ValueError unless x is at least rank 1 with the expected size.

  Args:
    x: the input array.
    size: the expected size of the last axis, or None to accept any size.
    what: the input's name for the message, e.g. 'action'.
    where: the module's name for the message.
  """
  shape = jnp.shape(x)
  if not shape:
    raise ValueError(f'{where}: {what} must have a feature axis, got a scalar.')
  if size is not None and shape[-1] != size:
    raise ValueError(
        f'{where}: expected {what} of size {size} in the last axis, got shape '
        f'{tuple(shape)}.')


def small_init(scale: float) -> hk.initializers.Initializer:
  """A near-zero uniform fan-in initialiser for output layers.

  Output layers start near zero so that initial actions sit near the centre
  of the action box (far from tanh saturation) and initial values near 0.

  Args:
    scale: variance scale; weights are uniform with variance scale / fan_in.

  Returns:
    A haiku initialiser.
  """
  return hk.initializers.VarianceScaling(scale, 'fan_in', 'uniform')


class MLP(hk.Module):
  """A multi-layer perceptron: Linear, optional LayerNorm, activation, ...

  LayerNorm (when enabled) normalises each hidden layer's pre-activation, as
  in "Efficient Online Reinforcement Learning with Offline Data", Ball et al.,
  2023 (https://arxiv.org/abs/2302.02948), which keeps critics stable at high
  update-to-data ratios.
  """

  def __init__(self,
               hidden_sizes: Sequence[int],
               *,
               activation: Callable[[Array], Array] = jax.nn.relu,
               layer_norm: bool = False,
               activate_final: bool = True,
               w_init: Optional[hk.initializers.Initializer] = None,
               name: Optional[str] = None):
    """Builds the MLP.

    Args:
      hidden_sizes: widths of the layers, in order.
      activation: elementwise nonlinearity after each layer.
      layer_norm: whether to apply LayerNorm (with scale and offset) after each
        linear layer, before the activation.
      activate_final: whether the last layer is normalised and activated too
        (True for a torso that a head follows).
      w_init: weight initialiser of the linear layers (haiku's default, a
        truncated normal with stddev 1 / sqrt(fan_in), if None).
      name: module name.
    """
    super().__init__(name=name)
    self._hidden_sizes = tuple(hidden_sizes)
    self._activation = activation
    self._layer_norm = layer_norm
    self._activate_final = activate_final
    self._w_init = w_init

  def __call__(self, x: Array) -> Array:
    """Maps [..., D] inputs to [..., hidden_sizes[-1]] features."""
    check_last_axis(x, None, 'input', self.module_name)
    num_layers = len(self._hidden_sizes)
    for i, size in enumerate(self._hidden_sizes):
      x = hk.Linear(size, w_init=self._w_init, name=f'linear_{i}')(x)
      if i < num_layers - 1 or self._activate_final:
        if self._layer_norm:
          x = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True,
                           name=f'layer_norm_{i}')(x)
        x = self._activation(x)
    return x


class ResidualMLP(hk.Module):
  """A residual, LayerNorm-ed torso (BroNet) for critics that scale.

  "Bigger, Regularized, Optimistic: scaling for compute and sample-efficient
  continuous control", Nauman et al., 2024 (https://arxiv.org/abs/2405.16158):

    x = act(LN(Linear(x)))                                  # the embedding
    x = x + LN(Linear(act(LN(Linear(x)))))                  # num_blocks times

  every layer `width` wide. The skips keep a deep torso's gradients whole and
  the normalisation bounds each block's contribution, which is what lets
  BRO grow the critic (and the update-to-data ratio) where a plain MLP
  degrades. With num_blocks = 0 it is one LayerNorm-ed layer.
  """

  def __init__(self,
               width: int,
               num_blocks: int,
               *,
               activation: Callable[[Array], Array] = jax.nn.relu,
               w_init: Optional[hk.initializers.Initializer] = None,
               name: Optional[str] = None):
    """Builds the torso.

    Args:
      width: the width of every layer (and of the output features).
      num_blocks: residual blocks after the embedding (>= 0).
      activation: elementwise nonlinearity.
      w_init: weight initialiser of the linear layers (haiku's default if
        None).
      name: module name.
    """
    super().__init__(name=name)
    if width < 1 or num_blocks < 0:
      raise ValueError(f'ResidualMLP needs width >= 1 and num_blocks >= 0, '
                       f'got {width} and {num_blocks}.')
    self._width = width
    self._num_blocks = num_blocks
    self._activation = activation
    self._w_init = w_init

  def __call__(self, x: Array) -> Array:
    """Maps [..., D] inputs to [..., width] features."""
    check_last_axis(x, None, 'input', self.module_name)

    # Built here (not in a method) so the parameters sit directly under
    # this module: residual_mlp/embed_linear, .../block_0_1_layer_norm.
    def dense_norm(h: Array, name: str) -> Array:
      h = hk.Linear(self._width, w_init=self._w_init,
                    name=f'{name}_linear')(h)
      return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True,
                          name=f'{name}_layer_norm')(h)

    x = self._activation(dense_norm(x, 'embed'))
    for i in range(self._num_blocks):
      y = self._activation(dense_norm(x, f'block_{i}_0'))
      x = x + dense_norm(y, f'block_{i}_1')
    return x


def critic_torso(hidden_sizes: Sequence[int],
                 *,
                 activation: Callable[[Array], Array],
                 layer_norm: bool,
                 residual_blocks: int = 0,
                 where: str = 'critic') -> hk.Module:
  """A critic's torso: the `MLP` of hidden_sizes, or a `ResidualMLP`.

  With residual_blocks = N > 0 the torso is `ResidualMLP(width, N)`, where
  hidden_sizes is the one width, `(width,)` (BRO's critic: (512,), N = 2).
  It is normalised by construction, so layer_norm must be True.
  """
  if residual_blocks < 0:
    raise ValueError(f'{where}: residual_blocks must be >= 0, got '
                     f'{residual_blocks}.')
  if not residual_blocks:
    return MLP(hidden_sizes, activation=activation, layer_norm=layer_norm,
               name='torso')
  if len(hidden_sizes) != 1:
    raise ValueError(
        f'{where}: a residual torso has one width; give hidden_sizes as '
        f'(width,), e.g. (512,), got {tuple(hidden_sizes)}.')
  if not layer_norm:
    raise ValueError(f'{where}: a residual torso is LayerNorm-ed by '
                     'construction; it needs layer_norm=True.')
  return ResidualMLP(hidden_sizes[0], residual_blocks, activation=activation,
                     name='torso')


def ensemble(member_fn: Callable[..., chex.ArrayTree],
             *,
             size: int,
             name: str = 'ensemble',
             stateful: bool = False) -> Callable[..., chex.ArrayTree]:
  """Turns a network function into an ensemble with independent parameters.

  Must be called inside a haiku transform (or a module's constructor). Every
  parameter of `member_fn` gets a new leading axis of length `size` (each
  member initialised from its own key), and the returned function evaluates
  all members on the same inputs with one `jax.vmap`, stacking outputs on a
  new leading axis. This is how `TwinQCritic` and `TwinCategoricalCritic`
  hold their two critics in one set of arrays, and how a larger ensemble
  (e.g. REDQ's ten) is built.

  Create the ensemble once and call the returned function as often as needed
  (e.g. on current and next observations): every call shares the same
  parameters, because the member keys are drawn here, once.

  With `stateful=True` the members may hold haiku state (e.g. the running
  statistics of `normalization.BatchRenorm`): each member's state is stacked
  like its parameters, the ensemble must be built inside
  `hk.transform_with_state`, and each call's new member states become the
  outer state (not while initialising, so the initial state is the members'
  initial state). Non-array arguments (e.g. an `is_training` flag) reach
  the members unchanged.

  Args:
    member_fn: a function of arrays that builds haiku modules and returns a
      pytree of arrays; it must not use randomness when applied.
    size: number of members.
    name: name prefix of the stacked parameters (and state).
    stateful: whether the members hold state.

  Returns:
    A function with member_fn's arguments whose outputs have a leading [size]
    axis.
  """
  if size < 1:
    raise ValueError(f'An ensemble needs at least one member, got {size}.')
  # Keys are only needed (and only available) while initialising.
  keys = hk.next_rng_keys(size) if hk.running_init() else None
  if stateful:
    return _StatefulEnsemble(member_fn, keys, name)
  member = hk.transform(member_fn)

  def init_members(member_keys, *args):
    # Inputs enter through a closure so that vmap maps only the keys.
    return jax.vmap(lambda key: member.init(key, *args))(member_keys)

  # Reuse is safe: a second call re-runs init with the same keys, so it
  # registers exactly the same parameters.
  init_all = hk.lift(init_members, name=name, allow_reuse=True)

  def apply_all(*args):
    params = init_all(keys, *args)
    # Array inputs are broadcast to [size, ...] and mapped with the
    # parameters, so every product is batched on the member axis from the
    # first layer on (a shared input left unmapped makes XLA transpose each
    # layer's activations between batch-major and member-major).
    arrays = [isinstance(a, jax.Array) for a in args]
    mapped = [jnp.broadcast_to(a, (size,) + a.shape) if is_array else a
              for a, is_array in zip(args, arrays)]

    def one(p, *margs):
      return member.apply(p, None, *margs)

    in_axes = (0,) + tuple(0 if is_array else None for is_array in arrays)
    return jax.vmap(one, in_axes=in_axes)(params, *mapped)

  return apply_all


class _StatefulEnsemble(hk.Module):
  """`ensemble` for members that hold haiku state (see its docstring).

  The lifted init and its state updater are made inside `__call__`, so both
  name the state by this module's scope, and each call gets its own updater
  (haiku allows one update per updater).
  """

  def __init__(self, member_fn, keys, name):
    super().__init__(name=name)
    self._member = hk.transform_with_state(member_fn)
    self._keys = keys

  def __call__(self, *args):
    member = self._member

    def init_members(member_keys):
      # Inputs enter through a closure so that vmap maps only the keys.
      return jax.vmap(lambda key: member.init(key, *args))(member_keys)

    init_all, updater = hk.transparent_lift_with_state(init_members,
                                                       allow_reuse=True)
    params, state = init_all(self._keys)
    out, new_state = jax.vmap(
        lambda p, s: member.apply(p, s, None, *args))(params, state)
    if hk.running_init():  # The initial state is the members' initial state.
      updater.ignore_update()
    else:
      updater.update(new_state)
    return out
