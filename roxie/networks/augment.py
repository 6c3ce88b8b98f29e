"""Random-shift image augmentation, as DrQ regularises pixel-based critics.

"Image Augmentation Is All You Need: Regularizing Deep Reinforcement Learning
from Pixels", Kostrikov et al., 2020 (https://arxiv.org/abs/2004.13649): pad
each image by replicating its border `pad` pixels on every side, then crop a
window of the original size at a random integer offset, independently per
sample. Pure JAX, static shapes: it runs under `jax.jit` and `jax.vmap`.
"""

from typing import Any, Mapping

import chex
import jax
import jax.numpy as jnp

from roxie.networks import pixels

Array = chex.Array


def _check_images(images: Array) -> None:
  if jnp.ndim(images) < 3:
    raise ValueError(
        f'random_shift: images must be [..., H, W, C], got shape '
        f'{tuple(jnp.shape(images))}.')


def shift_offsets(key: chex.PRNGKey, num: int, pad: int) -> Array:
  """[num, 2] int32 crop offsets (row, column), uniform in [0, 2 pad]."""
  return jax.random.randint(key, (num, 2), 0, 2 * pad + 1)


def shift_with_offsets(images: Array, offsets: Array, pad: int) -> Array:
  """Crops each replicate-padded image at its own (row, column) offset.

  Args:
    images: [..., H, W, C], any dtype; the leading axes are samples.
    offsets: [prod(leading axes), 2] integer offsets in [0, 2 pad]; offset
      (pad, pad) is the unshifted image.
    pad: border width in pixels.

  Returns:
    [..., H, W, C] in the input's dtype.
  """
  _check_images(images)
  if pad < 0:
    raise ValueError(f'random_shift: pad must be >= 0, got {pad}.')
  if pad == 0:
    return images
  shape = jnp.shape(images)
  h, w, c = shape[-3:]
  flat = jnp.reshape(images, (-1, h, w, c))
  padded = jnp.pad(flat, ((0, 0), (pad, pad), (pad, pad), (0, 0)),
                   mode='edge')
  offsets = jnp.asarray(offsets, jnp.int32)
  chex.assert_shape(offsets, (flat.shape[0], 2))

  def crop(image, offset):
    return jax.lax.dynamic_slice(image, (offset[0], offset[1], 0), (h, w, c))

  return jnp.reshape(jax.vmap(crop)(padded, offsets), shape)


def random_shift(key: chex.PRNGKey, images: Array, *, pad: int = 4) -> Array:
  """Shifts each image by a random integer offset in [-pad, pad]^2.

  Border pixels are replicated into the uncovered margin (as padding with
  'edge' and cropping back does), so the output has the input's shape and
  dtype and only contains values of the input.

  Args:
    key: PRNG key.
    images: [..., H, W, C] (uint8 or float); every leading index is a sample
      with its own offset.
    pad: the largest shift in pixels; 0 returns the images unchanged.

  Returns:
    The shifted images, [..., H, W, C], in the input's dtype.
  """
  _check_images(images)
  num = 1
  for d in jnp.shape(images)[:-3]:
    num *= d
  return shift_with_offsets(images, shift_offsets(key, num, pad), pad)


def random_shift_observation(key: chex.PRNGKey, obs: Any, *,
                             pad: int = 4) -> Any:
  """`random_shift` on the image entries of a dict observation.

  All image entries of one sample ('pixels' and 'depth') get the same
  offset, so they stay aligned; vector entries and flat (array) observations
  are returned unchanged.

  Args:
    key: PRNG key.
    obs: a dict of [N, ...] entries (images uint8 [N, H, W, C]), or an array.
    pad: the largest shift in pixels.

  Returns:
    The observation, its images shifted.
  """
  if not isinstance(obs, Mapping) or pad == 0:
    return obs
  images = [k for k in obs if jnp.ndim(obs[k]) >= 3 and pixels.is_image(
      jnp.shape(obs[k])[-3:], jnp.asarray(obs[k]).dtype)]
  if not images:
    return obs
  lead = jnp.shape(obs[images[0]])[:-3]
  num = 1
  for d in lead:
    num *= d
  offsets = shift_offsets(key, num, pad)
  out = dict(obs)
  for k in images:
    if jnp.shape(obs[k])[:-3] != lead:
      raise ValueError(
          f'random_shift_observation: image entries must share their batch '
          f'axes, got {lead} and {jnp.shape(obs[k])[:-3]} ({k!r}).')
    out[k] = shift_with_offsets(obs[k], offsets, pad)
  return out
