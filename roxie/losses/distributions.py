"""Closed forms for diagonal Gaussian policies: log-density, entropy, KL.

rlax routes these through distrax (and warns that its helpers are deprecated);
roxie's losses only need the three closed forms, written directly on [A]
vectors of means and standard deviations. Functions take one unbatched
example; batch with `jax.vmap`.
"""

import math

import chex
import jax.numpy as jnp

from roxie.losses import _checks

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
  _checks.check_rank('gaussian_log_prob', 1, x=x, mean=mean, std=std)
  _checks.check_dtype('gaussian_log_prob', float, x=x, mean=mean, std=std)
  _checks.check_same_shape('gaussian_log_prob', x=x, mean=mean, std=std)
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
  _checks.check_rank('gaussian_entropy', 1, std=std)
  _checks.check_dtype('gaussian_entropy', float, std=std)
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
  fn = 'gaussian_kl'
  _checks.check_rank(fn, 1, mean_p=mean_p, std_p=std_p, mean_q=mean_q,
                     std_q=std_q)
  _checks.check_dtype(fn, float, mean_p=mean_p, std_p=std_p, mean_q=mean_q,
                      std_q=std_q)
  _checks.check_same_shape(fn, mean_p=mean_p, std_p=std_p, mean_q=mean_q,
                           std_q=std_q)
  var_ratio = (std_p / std_q) ** 2
  mean_term = ((mean_p - mean_q) / std_q) ** 2
  return 0.5 * (var_ratio + mean_term - 1.) - jnp.log(std_p / std_q)
