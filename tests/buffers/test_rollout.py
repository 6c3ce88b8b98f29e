"""Tests for roxie.buffers.rollout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import buffers
from roxie import types

T, B, O, A = 7, 3, 2, 1


def _env_step(state, key):
  """A toy auto-resetting env: obs = (global step, episode step).

  Truncates after 3 steps, terminates at random; the true next observation of
  an ending step carries -1 in its second feature, the reset obs 0.
  """
  step, episode_step = state
  episode_step = episode_step + 1
  terminated = jax.random.uniform(key, (B,)) < 0.25
  truncated = episode_step >= 3
  ended = terminated | truncated
  reached = jnp.stack([jnp.full((B,), step + 1.), episode_step * 1.], -1)
  final = jnp.where(ended[:, None], reached.at[:, 1].set(-1.), reached)
  episode_step = jnp.where(ended, 0, episode_step)
  obs = jnp.stack([jnp.full((B,), step + 1.), episode_step * 1.], -1)
  timestep = types.TimeStep(
      obs=obs, reward=jnp.arange(B) + step * 1., terminated=terminated,
      truncated=truncated, final_obs=final,
      info={'clipped': jnp.zeros((B,), jnp.int32)})
  return (step + 1, episode_step), timestep


def _collect(key):
  """Collects T steps in a scan, both as stacked outputs and into storage."""
  obs0 = jnp.zeros((B, O))
  extras0 = {'log_prob': jnp.zeros((B,)), 'value': jnp.zeros((B,))}
  storage = buffers.rollout_init(length=T, num_envs=B, obs_size=O,
                                 action_size=A, extras=extras0)

  def body(carry, key):
    env_state, obs, storage = carry
    action = obs[:, :1] * 0.1
    extras = {'log_prob': -obs[:, 0], 'value': obs[:, 1]}
    env_state, timestep = _env_step(env_state, key)
    storage = buffers.rollout_add(storage, obs, action, timestep, extras)
    return (env_state, timestep.obs, storage), (obs, action, timestep, extras)

  init = ((jnp.int32(0), jnp.zeros((B,), jnp.int32)), obs0, storage)
  (_, _, storage), steps = jax.lax.scan(body, init, jax.random.split(key, T))
  return storage, steps


def test_scan_outputs_and_storage_agree():
  storage, steps = jax.jit(_collect)(jax.random.PRNGKey(0))
  from_steps = buffers.rollout_from_steps(*steps)
  assert bool(buffers.rollout_is_full(storage))
  from_storage = buffers.rollout_get(storage)
  jax.tree.map(np.testing.assert_array_equal, from_steps, from_storage)

  rollout = from_steps
  assert isinstance(rollout, types.Rollout)
  assert rollout.obs.shape == rollout.final_obs.shape == (T, B, O)
  assert rollout.action.shape == (T, B, A)
  assert rollout.reward.shape == rollout.terminated.shape == (T, B)
  assert rollout.extras['log_prob'].shape == (T, B)
  assert rollout.last_obs.shape == (B, O)
  np.testing.assert_array_equal(rollout.last_obs[:, 0], T)
  np.testing.assert_array_equal(rollout.extras['log_prob'],
                                -rollout.obs[..., 0])
  # final_obs differs from the next obs exactly where an episode ended.
  ended = np.asarray(rollout.terminated | rollout.truncated)
  next_obs = np.concatenate([rollout.obs[1:], rollout.last_obs[None]], 0)
  differs = np.any(np.asarray(rollout.final_obs) != next_obs, axis=-1)
  np.testing.assert_array_equal(differs, ended)
  assert ended.any() and np.asarray(rollout.truncated).any()


def test_storage_starts_a_new_chunk_after_a_full_one():
  storage, steps = jax.jit(_collect)(jax.random.PRNGKey(1))
  obs, action, timestep, extras = jax.tree.map(lambda x: x[0], steps)
  storage = buffers.rollout_add(storage, obs + 100., action, timestep, extras)
  assert int(storage.step) == 1 and not bool(buffers.rollout_is_full(storage))
  np.testing.assert_array_equal(storage.obs[0], obs + 100.)


def test_storage_checks_extras():
  extras = {'log_prob': jnp.zeros((B,))}
  with pytest.raises(ValueError, match='leading axis'):
    buffers.rollout_init(length=T, num_envs=B + 1, obs_size=O, action_size=A,
                         extras=extras)
  storage = buffers.rollout_init(length=T, num_envs=B, obs_size=O,
                                 action_size=A, extras=extras)
  _, timestep = _env_step((jnp.int32(0), jnp.zeros((B,), jnp.int32)),
                          jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match='keys'):
    buffers.rollout_add(storage, jnp.zeros((B, O)), jnp.zeros((B, A)),
                        timestep, {'value': jnp.zeros((B,))})
