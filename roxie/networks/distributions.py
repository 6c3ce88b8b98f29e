"""Small action distributions in pure `jax.numpy`, as NamedTuples.

The policy heads in `roxie.networks` return these. They are pytrees of arrays
(so they pass through `jax.jit`, `jax.vmap` and `lax.scan`) with a few pure
methods; there is no dependency on TensorFlow Probability or distrax.

Every distribution here is over a vector in the last axis: `log_prob` and
`entropy` sum over that axis and return the leading (batch) shape.
"""

import math
from typing import NamedTuple, Tuple

import chex
import jax
import jax.numpy as jnp

Array = chex.Array
PRNGKey = chex.PRNGKey

_LOG_2PI = math.log(2. * math.pi)
_LOG_2 = math.log(2.)


def tanh_log_det_jacobian(u: Array) -> Array:
  """Elementwise log |d tanh(u) / du| = log(1 - tanh(u)^2), computed stably.

  The direct form is -inf once tanh(u) rounds to +-1 (|u| > ~9 in float32).
  The identity 1 - tanh(u)^2 = 4 e^{-2u} / (1 + e^{-2u})^2 gives

    log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)),

  which is finite for every finite u (see appendix C of "Soft Actor-Critic",
  Haarnoja et al., 2018, https://arxiv.org/abs/1801.01290).

  Args:
    u: [...] pre-tanh values.

  Returns:
    [...] the log-Jacobian of tanh at u.
  """
  return 2. * (_LOG_2 - u - jax.nn.softplus(-2. * u))


def _gaussian_log_prob(mean: Array, log_std: Array, x: Array) -> Array:
  z = (x - mean) * jnp.exp(-log_std)
  return jnp.sum(-0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)


class DiagGaussian(NamedTuple):
  """A Gaussian with diagonal covariance over the last axis.

  Used by PPO and MPO. `mean` and `log_std` have the same shape [..., A]
  (heads broadcast a state-independent `log_std` before returning).
  """
  mean: Array  # [..., A]
  log_std: Array  # [..., A]

  @property
  def stddev(self) -> Array:
    """[..., A] standard deviations."""
    return jnp.exp(self.log_std)

  def sample(self, key: PRNGKey) -> Array:
    """Draws one [..., A] sample (reparameterised: differentiable in params)."""
    eps = jax.random.normal(key, self.mean.shape, self.mean.dtype)
    return self.mean + self.stddev * eps

  def log_prob(self, x: Array) -> Array:
    """[...] log-density of x [..., A], summed over the action axis."""
    chex.assert_equal_shape([x, self.mean])
    return _gaussian_log_prob(self.mean, self.log_std, x)

  def entropy(self) -> Array:
    """[...] differential entropy, summed over the action axis."""
    log_std = jnp.broadcast_to(self.log_std, self.mean.shape)
    return jnp.sum(log_std + 0.5 * (1. + _LOG_2PI), axis=-1)

  def mode(self) -> Array:
    """[..., A] the most likely action: the mean."""
    return self.mean

  def kl_divergence(self, other: 'DiagGaussian') -> Array:
    """[...] KL(self || other), summed over the action axis."""
    var_ratio = jnp.exp(2. * (self.log_std - other.log_std))
    mahalanobis = jnp.square((self.mean - other.mean) * jnp.exp(-other.log_std))
    return 0.5 * jnp.sum(var_ratio + mahalanobis - 1. - jnp.log(var_ratio),
                         axis=-1)


class TanhGaussian(NamedTuple):
  """A diagonal Gaussian over pre-tanh values u, squashed to a = tanh(u).

  The action lies in (-1, 1)^A. Its density follows from the change of
  variables, log p(a) = log N(u; mean, std) - sum log(1 - tanh(u)^2), with the
  log-Jacobian computed by `tanh_log_det_jacobian` so that it stays finite
  when tanh saturates. Used by SAC
  ("Soft Actor-Critic", Haarnoja et al., 2018,
  https://arxiv.org/abs/1801.01290).
  """
  mean: Array  # [..., A] mean of the pre-tanh Gaussian.
  log_std: Array  # [..., A] log standard deviation of the pre-tanh Gaussian.

  def sample_pre_tanh(self, key: PRNGKey) -> Array:
    """Draws [..., A] pre-tanh values u (reparameterised)."""
    eps = jax.random.normal(key, self.mean.shape, self.mean.dtype)
    return self.mean + jnp.exp(self.log_std) * eps

  def log_prob_pre_tanh(self, u: Array) -> Array:
    """[...] log-density of the action tanh(u), given its pre-tanh value u.

    This is the accurate path: it never inverts tanh.
    """
    chex.assert_equal_shape([u, self.mean])
    return (_gaussian_log_prob(self.mean, self.log_std, u)
            - jnp.sum(tanh_log_det_jacobian(u), axis=-1))

  def sample_and_log_prob(self, key: PRNGKey) -> Tuple[Array, Array]:
    """Draws an action and its log-density together.

    Args:
      key: a PRNG key.

    Returns:
      (action [..., A] in (-1, 1), log_prob [...]).
    """
    u = self.sample_pre_tanh(key)
    return jnp.tanh(u), self.log_prob_pre_tanh(u)

  def sample(self, key: PRNGKey) -> Array:
    """Draws one [..., A] action in (-1, 1)."""
    return jnp.tanh(self.sample_pre_tanh(key))

  def log_prob(self, action: Array, *, epsilon: float = 1e-6) -> Array:
    """[...] log-density of a given action [..., A], e.g. one from replay.

    The action is first clipped to [-1 + epsilon, 1 - epsilon] so that atanh
    stays finite for actions on (or rounded onto) the boundary. Prefer
    `sample_and_log_prob` for the policy's own samples.

    Args:
      action: [..., A] actions in [-1, 1].
      epsilon: distance from +-1 at which actions are clipped.

    Returns:
      [...] log-densities.
    """
    clipped = jnp.clip(action, -1. + epsilon, 1. - epsilon)
    return self.log_prob_pre_tanh(jnp.arctanh(clipped))

  def mode(self) -> Array:
    """[..., A] the deterministic action used for evaluation: tanh(mean)."""
    return jnp.tanh(self.mean)
