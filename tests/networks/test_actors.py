"""Tests for roxie.networks' actors."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import networks

OBS, ACT = 5, 3


def _transform(make):
  return hk.without_apply_rng(hk.transform(lambda obs: make()(obs)))


def _init_apply(make, obs):
  net = _transform(make)
  params = net.init(jax.random.PRNGKey(0), obs)
  return params, net.apply


def test_deterministic_actor_shapes_range_and_pre_tanh():
  make = lambda: networks.DeterministicActor(
      action_size=ACT, hidden_sizes=(8, 8), obs_size=OBS, layer_norm=True,
      output_init_scale=1.)
  obs = 3. * jax.random.normal(jax.random.PRNGKey(1), (4, OBS))
  params, apply = _init_apply(make, obs)
  out = apply(params, obs)
  assert out.action.shape == (4, ACT) and out.pre_tanh.shape == (4, ACT)
  np.testing.assert_allclose(out.action, np.tanh(out.pre_tanh), rtol=1e-6)
  assert np.all(np.abs(out.action) <= 1.)
  unbatched = apply(params, obs[0])
  assert unbatched.action.shape == (ACT,)
  np.testing.assert_allclose(unbatched.action, out.action[0], rtol=1e-5)


def test_output_layers_start_near_zero():
  obs = jax.random.normal(jax.random.PRNGKey(1), (16, OBS))
  make = lambda: networks.DeterministicActor(action_size=ACT,
                                             hidden_sizes=(32,))
  params, apply = _init_apply(make, obs)
  assert np.max(np.abs(apply(params, obs).action)) < 0.05


def test_actors_are_deterministic_and_jittable():
  obs = jax.random.normal(jax.random.PRNGKey(1), (2, OBS))
  make = lambda: networks.TanhGaussianActor(action_size=ACT, hidden_sizes=(8,))
  params, apply = _init_apply(make, obs)
  first = apply(params, obs)
  second = jax.jit(apply)(params, obs)
  np.testing.assert_allclose(first.mean, second.mean, rtol=1e-6)
  np.testing.assert_allclose(first.log_std, second.log_std, rtol=1e-6)
  params_again, _ = _init_apply(make, obs)
  jax.tree.map(np.testing.assert_array_equal, params, params_again)


def test_tanh_gaussian_actor_bounds_log_std():
  make = lambda: networks.TanhGaussianActor(
      action_size=ACT, hidden_sizes=(8,), log_std_bounds=(-4., 1.),
      output_init_scale=100.)
  obs = 1e3 * jax.random.normal(jax.random.PRNGKey(1), (64, OBS))
  params, apply = _init_apply(make, obs)
  dist = apply(params, obs)
  assert isinstance(dist, networks.TanhGaussian)
  assert dist.mean.shape == dist.log_std.shape == (64, ACT)
  assert np.all(dist.log_std >= -4.) and np.all(dist.log_std <= 1.)
  # Saturated in both directions by the huge inputs.
  assert np.min(dist.log_std) < -3.9 and np.max(dist.log_std) > 0.9
  action, log_prob = dist.sample_and_log_prob(jax.random.PRNGKey(2))
  assert action.shape == (64, ACT) and log_prob.shape == (64,)
  assert np.all(np.isfinite(log_prob))


def test_gaussian_actor_state_independent_std():
  make = lambda: networks.GaussianActor(action_size=ACT, hidden_sizes=(8,),
                                        init_log_std=-0.5)
  obs = jax.random.normal(jax.random.PRNGKey(1), (4, OBS))
  params, apply = _init_apply(make, obs)
  dist = apply(params, obs)
  assert isinstance(dist, networks.DiagGaussian)
  np.testing.assert_array_equal(dist.log_std, np.full((4, ACT), -0.5))
  assert params['gaussian_actor']['log_std'].shape == (ACT,)
  assert dist.entropy().shape == (4,)
  assert dist.log_prob(dist.sample(jax.random.PRNGKey(0))).shape == (4,)


def test_gaussian_actor_state_dependent_std():
  make = lambda: networks.GaussianActor(
      action_size=ACT, hidden_sizes=(8,), state_dependent_std=True,
      log_std_bounds=(-3., 0.5), output_init_scale=100.)
  obs = 1e3 * jax.random.normal(jax.random.PRNGKey(1), (32, OBS))
  params, apply = _init_apply(make, obs)
  dist = apply(params, obs)
  assert dist.mean.shape == dist.log_std.shape == (32, ACT)
  assert np.all(dist.log_std >= -3.) and np.all(dist.log_std <= 0.5)
  assert np.ptp(np.asarray(dist.log_std)) > 0.  # Varies with the state.


@pytest.mark.parametrize('make', [
    lambda: networks.DeterministicActor(action_size=ACT, obs_size=OBS),
    lambda: networks.TanhGaussianActor(action_size=ACT, obs_size=OBS),
    lambda: networks.GaussianActor(action_size=ACT, obs_size=OBS),
    lambda: networks.ValueNetwork(obs_size=OBS),
], ids=['deterministic', 'tanh_gaussian', 'gaussian', 'value'])
def test_wrong_obs_size_names_the_expected_size(make):
  net = _transform(make)
  with pytest.raises(ValueError, match=f'obs of size {OBS}'):
    net.init(jax.random.PRNGKey(0), jnp.zeros((2, OBS + 1)))
  with pytest.raises(ValueError, match='feature axis'):
    net.init(jax.random.PRNGKey(0), jnp.zeros(()))
