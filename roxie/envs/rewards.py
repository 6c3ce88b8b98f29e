"""Smooth reward shaping in JAX, with the semantics of dm_control's suite.

The suite shapes almost every reward with one function, `tolerance`: 1 inside
a band, decaying outside it over a margin along a chosen sigmoid. This is that
function for JAX arrays (jit/vmap friendly), so task rewards compute the same
numbers as `dm_control.utils.rewards.tolerance`; tests compare the two.
"""

import math

import jax.numpy as jnp

_SIGMOIDS = ('gaussian', 'hyperbolic', 'long_tail', 'reciprocal', 'cosine',
             'linear', 'quadratic', 'tanh_squared')


def _unit_sigmoid(x, value_at_1: float, sigmoid: str):
  """A decay from 1 at x = 0 to `value_at_1` at |x| = 1 (and beyond)."""
  if sigmoid not in _SIGMOIDS:
    raise ValueError(f'Unknown sigmoid {sigmoid!r}; choose one of {_SIGMOIDS}.')
  zero_allowed = sigmoid in ('cosine', 'linear', 'quadratic')
  low_ok = value_at_1 >= 0 if zero_allowed else value_at_1 > 0
  if not (low_ok and value_at_1 < 1):
    raise ValueError(
        f'value_at_margin must be in {"[0, 1)" if zero_allowed else "(0, 1)"} '
        f'for the {sigmoid!r} sigmoid, got {value_at_1}.')

  if sigmoid == 'gaussian':
    s = math.sqrt(-2.0 * math.log(value_at_1))
    return jnp.exp(-0.5 * (x * s) ** 2)
  if sigmoid == 'hyperbolic':
    s = math.acosh(1.0 / value_at_1)
    return 1.0 / jnp.cosh(x * s)
  if sigmoid == 'long_tail':
    s = math.sqrt(1.0 / value_at_1 - 1.0)
    return 1.0 / ((x * s) ** 2 + 1.0)
  if sigmoid == 'reciprocal':
    s = 1.0 / value_at_1 - 1.0
    return 1.0 / (jnp.abs(x) * s + 1.0)
  if sigmoid == 'cosine':
    sx = x * (math.acos(2.0 * value_at_1 - 1.0) / math.pi)
    return jnp.where(jnp.abs(sx) < 1, 0.5 * (1.0 + jnp.cos(math.pi * sx)), 0.0)
  if sigmoid == 'linear':
    sx = x * (1.0 - value_at_1)
    return jnp.where(jnp.abs(sx) < 1, 1.0 - sx, 0.0)
  if sigmoid == 'quadratic':
    sx = x * math.sqrt(1.0 - value_at_1)
    return jnp.where(jnp.abs(sx) < 1, 1.0 - sx ** 2, 0.0)
  # tanh_squared
  s = math.atanh(math.sqrt(1.0 - value_at_1))
  return 1.0 - jnp.tanh(x * s) ** 2


def tolerance(x, bounds=(0.0, 0.0), margin: float = 0.0,
              sigmoid: str = 'gaussian', value_at_margin: float = 0.1):
  """1 where `bounds[0] <= x <= bounds[1]`, decaying to 0 outside.

  Args:
    x: array of any shape.
    bounds: (lower, upper), python floats or arrays broadcastable to `x`;
      may be infinite.
    margin: distance outside the bounds over which the value falls to
      `value_at_margin`. With margin 0 the result is a 0/1 indicator.
    sigmoid: the shape of the fall-off; one of
      'gaussian', 'hyperbolic', 'long_tail', 'reciprocal', 'cosine', 'linear',
      'quadratic', 'tanh_squared'.
    value_at_margin: the value at distance `margin` from the bounds.

  Returns:
    An array shaped like `x` with values in [0, 1].
  """
  lower, upper = bounds
  if isinstance(lower, (int, float)) and isinstance(upper, (int, float)):
    if lower > upper:
      raise ValueError(f'Lower bound {lower} exceeds upper bound {upper}.')
  if margin < 0:
    raise ValueError(f'margin must be non-negative, got {margin}.')
  x = jnp.asarray(x)
  inside = jnp.logical_and(lower <= x, x <= upper)
  if margin == 0:
    return jnp.where(inside, 1.0, 0.0).astype(x.dtype)
  distance = jnp.where(x < lower, lower - x, x - upper) / margin
  outside = _unit_sigmoid(distance, value_at_margin, sigmoid)
  return jnp.where(inside, 1.0, outside).astype(x.dtype)
