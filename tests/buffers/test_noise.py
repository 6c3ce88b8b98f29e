"""Tests for roxie.buffers.noise."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import buffers


def _run(noise, shape, steps, key):
  def body(state, key):
    eps, state = noise.sample(state, key)
    return state, eps
  return jax.lax.scan(body, noise.init(shape), jax.random.split(key, steps))


def test_ou_stationary_stddev_and_autocorrelation_match_theory():
  theta, sigma, dt = 1., 0.5, 0.1
  noise = buffers.ornstein_uhlenbeck_noise(theta=theta, sigma=sigma, dt=dt)
  state, xs = jax.jit(lambda k: _run(noise, (128, 2), 3000, k))(
      jax.random.PRNGKey(0))
  xs = np.asarray(xs[200:])  # Burn-in: the process starts at 0.
  expected = buffers.ou_stationary_stddev(theta=theta, sigma=sigma, dt=dt)
  np.testing.assert_allclose(expected,
                             sigma / np.sqrt(theta * (2 - theta * dt)))
  np.testing.assert_allclose(xs.std(), expected, rtol=0.03)
  np.testing.assert_allclose(xs.mean(), 0., atol=0.03)
  lag1 = np.mean(xs[1:] * xs[:-1]) / np.mean(xs * xs)
  np.testing.assert_allclose(lag1, 1. - theta * dt, atol=0.01)
  assert int(state.count) == 3000


def test_ou_reset_zeros_only_masked_envs():
  noise = buffers.ornstein_uhlenbeck_noise()
  _, state = noise.sample(noise.init((3, 2)), jax.random.PRNGKey(0))
  state = noise.reset(state, jnp.array([True, False, True]))
  np.testing.assert_array_equal(state.noise[0], 0.)
  np.testing.assert_array_equal(state.noise[2], 0.)
  assert np.all(state.noise[1] != 0.)


def test_ou_rejects_unstable_steps():
  with pytest.raises(ValueError, match='theta'):
    buffers.ornstein_uhlenbeck_noise(theta=30., dt=0.1)


def test_gaussian_noise_with_a_schedule():
  schedule = buffers.linear_schedule(0.4, 0.1, 10)
  noise = buffers.gaussian_noise(stddev=schedule)
  state, eps = jax.jit(lambda k: _run(noise, (4096, 2), 12, k))(
      jax.random.PRNGKey(1))
  stds = np.asarray(eps).reshape(12, -1).std(axis=1)
  expected = [0.4 - 0.03 * min(i, 10) for i in range(12)]
  np.testing.assert_allclose(stds, expected, rtol=0.05)
  assert int(state.count) == 12
  # No memory: reset is the identity.
  assert noise.reset(state, jnp.ones(4096, bool)) is state


def test_linear_schedule_endpoints():
  schedule = buffers.linear_schedule(1., 0.2, 100, transition_begin=10)
  values = [float(schedule(jnp.int32(i))) for i in (0, 10, 60, 110, 10_000)]
  np.testing.assert_allclose(values, [1., 1., 0.6, 0.2, 0.2], rtol=1e-6)
  constant = buffers.linear_schedule(0.3, 0., 0)
  np.testing.assert_allclose(constant(jnp.int32(50)), 0.3)
