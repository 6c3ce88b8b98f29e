"""Tests for roxie.networks.distributions against NumPy references."""

import math

import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import networks


def _np_normal_logpdf(x, mean, std):
  return (-0.5 * ((x - mean) / std)**2 - np.log(std)
          - 0.5 * math.log(2 * math.pi))


def test_tanh_log_det_jacobian_matches_direct_form():
  u = np.linspace(-6., 6., 101)
  expected = np.log(1. - np.tanh(u)**2)  # float64: accurate in this range.
  got = networks.tanh_log_det_jacobian(jnp.asarray(u, jnp.float32))
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('u', [-1e4, -60., -20., 20., 60., 1e4])
def test_tanh_log_det_jacobian_finite_where_tanh_saturates(u):
  got = networks.tanh_log_det_jacobian(jnp.float32(u))
  assert np.isfinite(got)
  # For large |u|, log(1 - tanh^2) -> 2 log 2 - 2|u|.
  np.testing.assert_allclose(got, 2. * math.log(2.) - 2. * abs(u), rtol=1e-6)


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    seed=st.integers(0, 2**16),
    action_size=st.integers(1, 4),
    mean_scale=st.floats(0., 2.),
    log_std_shift=st.floats(-2., 1.))
def test_tanh_gaussian_log_prob_matches_change_of_variables(
    seed, action_size, mean_scale, log_std_shift):
  rng = np.random.default_rng(seed)
  mean = mean_scale * rng.standard_normal((3, action_size))
  log_std = log_std_shift + 0.3 * rng.standard_normal((3, action_size))
  u = mean + np.exp(log_std) * rng.standard_normal((3, action_size))
  u = np.clip(u, -4., 4.)  # Keep 1 - a^2 well resolved for the reference.
  a = np.tanh(u)
  expected = np.sum(_np_normal_logpdf(u, mean, np.exp(log_std))
                    - np.log(1. - a**2), axis=-1)
  dist = networks.TanhGaussian(jnp.asarray(mean, jnp.float32),
                               jnp.asarray(log_std, jnp.float32))
  np.testing.assert_allclose(
      dist.log_prob_pre_tanh(jnp.asarray(u, jnp.float32)), expected,
      rtol=1e-4, atol=1e-3)
  # From the action itself, via atanh (float32 atanh loses a little near 1).
  np.testing.assert_allclose(
      dist.log_prob(jnp.asarray(a, jnp.float32)), expected, rtol=1e-3,
      atol=2e-2)


def test_tanh_gaussian_sample_and_log_prob_agree():
  dist = networks.TanhGaussian(jnp.array([[0.3, -1.]]), jnp.array([[-0.5, 0.]]))
  key = jax.random.PRNGKey(0)
  action, log_prob = dist.sample_and_log_prob(key)
  u = dist.sample_pre_tanh(key)
  np.testing.assert_allclose(action, jnp.tanh(u))
  np.testing.assert_allclose(dist.sample(key), action)
  np.testing.assert_allclose(log_prob, dist.log_prob_pre_tanh(u), rtol=1e-6)
  np.testing.assert_allclose(log_prob, dist.log_prob(action), rtol=1e-4)
  assert action.shape == (1, 2) and log_prob.shape == (1,)


def test_tanh_gaussian_stays_finite_at_the_boundary():
  # A mean far out saturates tanh: actions round to exactly +-1 in float32.
  dist = networks.TanhGaussian(jnp.array([[30., -30.]]),
                               jnp.array([[-3., -3.]]))
  action, log_prob = dist.sample_and_log_prob(jax.random.PRNGKey(1))
  np.testing.assert_array_equal(np.abs(action), 1.)
  assert np.all(np.isfinite(log_prob))
  assert np.all(np.isfinite(dist.log_prob(jnp.array([[1., -1.]]))))
  grads = jax.grad(lambda m: dist._replace(mean=m).sample_and_log_prob(
      jax.random.PRNGKey(1))[1].sum())(dist.mean)
  assert np.all(np.isfinite(grads))


def test_tanh_gaussian_mode():
  dist = networks.TanhGaussian(jnp.array([0.5, -2.]), jnp.zeros(2))
  np.testing.assert_allclose(dist.mode(), np.tanh([0.5, -2.]), rtol=1e-6)


def test_tanh_gaussian_density_integrates_to_one():
  dist = networks.TanhGaussian(jnp.array([0.4]), jnp.array([-0.3]))
  a = np.linspace(-1., 1., 200001)[1:-1]
  actions = jnp.asarray(a[:, None], jnp.float32)
  density = np.exp(jax.vmap(dist.log_prob)(actions))
  np.testing.assert_allclose(np.trapezoid(density, a), 1., atol=2e-3)


def test_diag_gaussian_against_numpy():
  rng = np.random.default_rng(0)
  mean = rng.standard_normal((4, 3))
  log_std = 0.5 * rng.standard_normal((4, 3))
  x = rng.standard_normal((4, 3))
  dist = networks.DiagGaussian(jnp.asarray(mean, jnp.float32),
                               jnp.asarray(log_std, jnp.float32))
  np.testing.assert_allclose(
      dist.log_prob(jnp.asarray(x, jnp.float32)),
      _np_normal_logpdf(x, mean, np.exp(log_std)).sum(-1), rtol=1e-5)
  np.testing.assert_allclose(
      dist.entropy(), np.sum(log_std + 0.5 * (1 + math.log(2 * math.pi)), -1),
      rtol=1e-5)
  np.testing.assert_allclose(dist.stddev, np.exp(log_std), rtol=1e-6)
  np.testing.assert_allclose(dist.mode(), mean, rtol=1e-6)

  other_mean = rng.standard_normal((4, 3))
  other_log_std = 0.5 * rng.standard_normal((4, 3))
  other = networks.DiagGaussian(jnp.asarray(other_mean, jnp.float32),
                                jnp.asarray(other_log_std, jnp.float32))
  var, other_var = np.exp(2 * log_std), np.exp(2 * other_log_std)
  expected_kl = 0.5 * np.sum(
      var / other_var + (mean - other_mean)**2 / other_var - 1.
      - np.log(var / other_var), -1)
  np.testing.assert_allclose(dist.kl_divergence(other), expected_kl, rtol=1e-4)
  np.testing.assert_allclose(dist.kl_divergence(dist), 0., atol=1e-6)


def test_diag_gaussian_samples_have_the_right_moments():
  dist = networks.DiagGaussian(jnp.full((20000, 2), 1.5),
                               jnp.broadcast_to(jnp.log(jnp.array([0.5, 2.])),
                                                (20000, 2)))
  x = dist.sample(jax.random.PRNGKey(0))
  np.testing.assert_allclose(x.mean(0), [1.5, 1.5], atol=0.05)
  np.testing.assert_allclose(x.std(0), [0.5, 2.], rtol=0.03)
