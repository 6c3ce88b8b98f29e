"""A 2-D VALID convolution whose gradients XLA:CPU runs as fast convolutions.

Why this exists: autodiff of `lax.conv_general_dilated` expresses the kernel
gradient as a convolution with batch and feature dimensions swapped, and the
input gradient with a flipped kernel in 'OI' order. At the top level of a
jitted function XLA:CPU rewrites both into the NHWC/HWIO form its fast
(Eigen) convolution needs; inside a `lax.scan`/`while_loop` body (where every
roxie training update runs: `make_compiled_loop` scans iterations) it leaves
them as they are and runs them through its generic, slow convolution loop.
Measured on the 2-core CPU (3 convs 9-16-32-32 channels, stride 2, batch
128, 64x64): one gradient took 55 ms at the top level and 568 ms inside a
`fori_loop`; with the explicit backward pass below, 98 ms inside the loop.

`conv2d_valid` computes the same numbers as autodiff (the same convolutions,
with the transposes written out), but states its backward pass in the
canonical layouts itself, so no rewrite is needed wherever it is traced.
`Conv2D` is a drop-in for `hk.Conv2D(..., padding='VALID')` with identical
parameters (names, shapes, initialisation), so checkpoints are unaffected.
Being a `jax.custom_vjp`, it supports reverse-mode differentiation (any
order) but not forward mode (`jax.jvp`, `jax.jacfwd`).
"""

import functools
from typing import Optional

import chex
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

Array = chex.Array
_DN = ('NHWC', 'HWIO', 'NHWC')


def _conv(x: Array, w: Array, stride: int) -> Array:
  return jax.lax.conv_general_dilated(x, w, (stride, stride), 'VALID',
                                      dimension_numbers=_DN)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def conv2d_valid(x: Array, w: Array, stride: int) -> Array:
  """VALID convolution, NHWC images x [N, H, W, Ci], HWIO kernel w.

  Args:
    x: [N, H, W, Ci] float inputs.
    w: [kh, kw, Ci, Co] kernel.
    stride: the same stride along both spatial axes.

  Returns:
    [N, Ho, Wo, Co] with Ho = (H - kh) // stride + 1 (likewise Wo).
  """
  return _conv(x, w, stride)


def _conv2d_valid_fwd(x, w, stride):
  return _conv(x, w, stride), (x, w)


def _conv2d_valid_bwd(stride, residuals, dy):
  x, w = residuals
  kh, kw = w.shape[:2]
  height, width = x.shape[1:3]
  # Rows/columns the strided windows never reach (they get zero gradient).
  rh, rw = (height - kh) % stride, (width - kw) % stride
  # Kernel gradient: a convolution over the batch, written with batch and
  # channels swapped by explicit transposes (x as [Ci, H, W, N], dy as an
  # [Ho, Wo, N, Co] kernel dilated by the stride; the rows and columns no
  # window reaches cropped by negative padding), put back in HWIO order.
  dw = jax.lax.conv_general_dilated(
      jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(dy, (1, 2, 0, 3)),
      (1, 1), ((0, -rh), (0, -rw)), rhs_dilation=(stride, stride),
      dimension_numbers=_DN)
  dw = jnp.transpose(dw, (1, 2, 0, 3))
  # Input gradient: dy dilated by the stride, fully padded, convolved with
  # the kernel rotated by 180 degrees and its channels swapped.
  w_rot = jnp.transpose(jnp.flip(w, (0, 1)), (0, 1, 3, 2))
  dx = jax.lax.conv_general_dilated(
      dy, w_rot, (1, 1), ((kh - 1, kh - 1 + rh), (kw - 1, kw - 1 + rw)),
      lhs_dilation=(stride, stride), dimension_numbers=_DN)
  return dx, dw


conv2d_valid.defvjp(_conv2d_valid_fwd, _conv2d_valid_bwd)


class Conv2D(hk.Module):
  """`hk.Conv2D(channels, kernel, stride, padding='VALID')`, `conv2d_valid`.

  Same parameters as haiku's ('w' [k, k, Ci, Co], truncated normal with
  stddev 1/sqrt(k*k*Ci); 'b' [Co], zeros) and the same outputs; only the
  backward pass is stated differently (see the module docstring). Inputs
  are [N, H, W, C].
  """

  def __init__(self, output_channels: int, kernel_shape: int, stride: int,
               name: Optional[str] = None):
    super().__init__(name=name)
    self._channels = int(output_channels)
    self._kernel = int(kernel_shape)
    self._stride = int(stride)

  def __call__(self, x: Array) -> Array:
    k = self._kernel
    w_shape = (k, k, x.shape[-1], self._channels)
    w_init = hk.initializers.TruncatedNormal(
        stddev=1. / np.sqrt(np.prod(w_shape[:-1])))
    w = hk.get_parameter('w', w_shape, x.dtype, init=w_init)
    b = hk.get_parameter('b', (self._channels,), x.dtype, init=jnp.zeros)
    out = conv2d_valid(x, w, self._stride)
    return out + jnp.broadcast_to(b, out.shape)
