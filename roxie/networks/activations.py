"""Activations that XLA's CPU backend computes faster than jax.nn's.

`elu` is the exponential linear unit (Clevert et al., 2015,
https://arxiv.org/abs/1511.07289), x for x > 0 and exp(x) - 1 otherwise, as
`jax.nn.elu` (alpha 1) computes it, written for the CPU:

- The negative branch is `exp(x) - 1`, not `expm1(x)`. XLA's CPU backend
  (jaxlib 0.10) computes expm1 at about twice exp's cost (on a [5120, 256]
  array, 1.0-1.15 ms against 0.5). The two differ by at most one float32
  ulp of 1 (1.2e-7, absolute) where x is just below 0.
- The derivative is given (`jax.custom_jvp`): 1 for x > 0, exp(x) otherwise,
  sharing the forward's exponential. Left to autodiff, the `where` form's
  backward pass after a LayerNorm fused badly, at ~4.5x the time of
  `jax.nn.elu`'s.

MPO's critic scores 20 sampled actions at each of 256 next states through
two LayerNorm + ELU layers on every update, the largest arrays its update
touches. With this ELU a LayerNorm + ELU on [5120, 256] takes 0.66-0.76x
the time forward and 0.70-0.83x with its backward pass, and MPO's whole
update 0.93-0.96x, on 2 CPU cores (`benchmarks/activation_cost.py`,
benchmarks/RESULTS.md). Values and gradients equal `jax.nn.elu`'s to
float32 rounding, second derivatives included
(tests/networks/test_activations.py).
"""

import chex
import jax
import jax.numpy as jnp

Array = chex.Array


@jax.custom_jvp
def elu(x: Array) -> Array:
  """ELU with alpha 1: x where x > 0, exp(x) - 1 elsewhere; any shape."""
  positive = x > 0
  return jnp.where(positive, x, jnp.exp(jnp.where(positive, 0., x)) - 1.)


@elu.defjvp
def _elu_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  positive = x > 0
  # exp of 0 where x > 0 keeps it finite on the branch `where` discards, and
  # differentiates to 0 there (a second derivative of 0 above the kink and
  # exp(x) at and below it, as jax.nn.elu's).
  e = jnp.exp(jnp.where(positive, 0., x))
  return (jnp.where(positive, x, e - 1.),
          t * jnp.where(positive, jnp.ones_like(e), e))
