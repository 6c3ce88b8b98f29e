"""Tests for roxie.losses.distributions."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie.losses import distributions


def _np_log_prob(x, mean, std):
  return np.sum(-0.5 * ((x - mean) / std) ** 2 - np.log(std * math.sqrt(
      2 * math.pi)))


def test_log_prob_standard_normal_at_zero():
  out = distributions.gaussian_log_prob(jnp.zeros(2), jnp.zeros(2), jnp.ones(2))
  np.testing.assert_allclose(out, -math.log(2 * math.pi), rtol=1e-6)


def test_log_prob_matches_numpy_under_jit_and_vmap():
  rng = np.random.default_rng(0)
  x, mean = rng.normal(size=(2, 4, 3)).astype(np.float32)
  std = rng.uniform(.2, 2., size=(4, 3)).astype(np.float32)
  out = jax.jit(jax.vmap(distributions.gaussian_log_prob))(x, mean, std)
  for b in range(4):
    np.testing.assert_allclose(out[b], _np_log_prob(x[b], mean[b], std[b]),
                               rtol=1e-5)


def test_entropy_hand_case_and_monte_carlo():
  std = jnp.array([1., 2.])
  expected = 2 * 0.5 * (1 + math.log(2 * math.pi)) + math.log(2.)
  np.testing.assert_allclose(
      jax.jit(distributions.gaussian_entropy)(std), expected, rtol=1e-6)
  # Entropy is -E[log p(x)]; a Monte Carlo estimate must agree.
  x = jax.random.normal(jax.random.PRNGKey(0), (20000, 2)) * std[None]
  log_p = jax.vmap(distributions.gaussian_log_prob, in_axes=(0, None, None))(
      x, jnp.zeros(2), std)
  np.testing.assert_allclose(-log_p.mean(), expected, rtol=2e-2)


def test_kl_of_identical_gaussians_is_zero():
  mean, std = jnp.array([.3, -1.]), jnp.array([.5, 2.])
  np.testing.assert_allclose(
      distributions.gaussian_kl(mean, std, mean, std), 0., atol=1e-7)


def test_kl_hand_cases():
  # Mean shift only: d^2 / (2 s^2).
  np.testing.assert_allclose(
      distributions.gaussian_kl(jnp.array([1.]), jnp.array([2.]),
                                jnp.array([0.]), jnp.array([2.])),
      [1. / 8.], rtol=1e-6)
  # Scale only: log(s_q/s_p) + s_p^2/(2 s_q^2) - 1/2 with s_p=1, s_q=2.
  np.testing.assert_allclose(
      distributions.gaussian_kl(jnp.array([0.]), jnp.array([1.]),
                                jnp.array([0.]), jnp.array([2.])),
      [math.log(2.) + 1. / 8. - .5], rtol=1e-6)


def test_kl_matches_monte_carlo_and_is_asymmetric():
  mp, sp = jnp.array([0., 1.]), jnp.array([1., .5])
  mq, sq = jnp.array([.5, 0.]), jnp.array([2., 1.])
  kl = jax.jit(distributions.gaussian_kl)(mp, sp, mq, sq).sum()
  x = mp[None] + sp[None] * jax.random.normal(jax.random.PRNGKey(1),
                                             (20000, 2))
  lp = jax.vmap(distributions.gaussian_log_prob, in_axes=(0, None, None))
  mc = jnp.mean(lp(x, mp, sp) - lp(x, mq, sq))
  np.testing.assert_allclose(kl, mc, rtol=3e-2)
  assert abs(kl - distributions.gaussian_kl(mq, sq, mp, sp).sum()) > 0.1


def test_rank_checks():
  with pytest.raises(AssertionError, match='rank'):
    distributions.gaussian_log_prob(jnp.zeros((2, 3)), jnp.zeros(3),
                                    jnp.ones(3))
  with pytest.raises(AssertionError, match='rank'):
    distributions.gaussian_entropy(jnp.ones(()))
  with pytest.raises(AssertionError, match='shape'):
    distributions.gaussian_kl(jnp.zeros(2), jnp.ones(2), jnp.zeros(3),
                              jnp.ones(3))
