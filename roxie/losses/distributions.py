"""Closed forms for diagonal Gaussian policies: log-density, entropy, KL.

rlax routes these through distrax (and warns that its helpers are deprecated);
roxie's losses only need the three closed forms, written directly on [A]
vectors of means and standard deviations. Functions take one unbatched
example; batch with `jax.vmap`.
"""

import math

import chex
import jax.numpy as jnp

Array = chex.Array

_HALF_LOG_TWO_PI = 0.5 * math.log(2. * math.pi)


def gaussian_log_prob(x: Array, mean: Array, std: Array) -> Array:
  """Log-density of `x` under a diagonal Gaussian, summed over dimensions.

  Args:
    x: [A] float point.
    mean: [A] float means.
    std: [A] float standard deviations, > 0.

  Returns:
    [] float log N(x; mean, diag(std^2)).
  """
  chex.assert_rank([x, mean, std], 1)
  chex.assert_type([x, mean, std], float)
  chex.assert_equal_shape([x, mean, std])
  z = (x - mean) / std
  return jnp.sum(-0.5 * z ** 2 - jnp.log(std) - _HALF_LOG_TWO_PI)


def gaussian_entropy(std: Array) -> Array:
  """Differential entropy of a diagonal Gaussian (independent of its mean).

  H = sum_i log(std_i) + A/2 (1 + log 2 pi). For a tanh-squashed Gaussian
  this is the entropy before squashing, a common surrogate; the squashed
  entropy has no closed form.

  Args:
    std: [A] float standard deviations, > 0.

  Returns:
    [] float entropy in nats.
  """
  chex.assert_rank(std, 1)
  chex.assert_type(std, float)
  return jnp.sum(jnp.log(std) + 0.5 + _HALF_LOG_TWO_PI)


def gaussian_kl(mean_p: Array, std_p: Array, mean_q: Array,
                std_q: Array) -> Array:
  """Per-dimension KL(p || q) between two diagonal Gaussians.

  KL_i = log(std_q / std_p) + (std_p^2 + (mean_p - mean_q)^2) / (2 std_q^2)
         - 1/2; sum over the last axis for the KL of the joint distributions.

  Args:
    mean_p: [A] float means of p.
    std_p: [A] float standard deviations of p, > 0.
    mean_q: [A] float means of q.
    std_q: [A] float standard deviations of q, > 0.

  Returns:
    [A] float per-dimension KL divergences.
  """
  chex.assert_rank([mean_p, std_p, mean_q, std_q], 1)
  chex.assert_type([mean_p, std_p, mean_q, std_q], float)
  chex.assert_equal_shape([mean_p, std_p, mean_q, std_q])
  var_ratio = (std_p / std_q) ** 2
  mean_term = ((mean_p - mean_q) / std_q) ** 2
  return 0.5 * (var_ratio + mean_term - 1.) - jnp.log(std_p / std_q)
