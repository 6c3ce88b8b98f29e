"""Divergence handling, host-state checkpoints and stale-state detection.

Divergence is forced by writing a non-finite or huge velocity into the
physics (the native backend's host rows through set_host_state, or MJX's
Data). The diverged env must be terminated, reset and flagged, and nothing
non-finite may reach observations or rewards; other envs run on untouched.
"""

import functools

import jax
import jax.numpy as jnp
import mujoco
import mujoco.batch
import numpy as np
import pytest

import roxie.envs as envs

B = 4
TASK = 'PendulumSwingup'


@functools.lru_cache(maxsize=None)
def _env(backend, episode_length=None):
  return envs.make(TASK, backend=backend, num_envs=B,
                   episode_length=episode_length)


@functools.lru_cache(maxsize=None)
def _jitted(env):
  return jax.jit(env.reset), jax.jit(env.step)


def _qvel_slice(model):
  start = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_TIME) + model.nq
  return slice(start, start + model.nv)


def _check_diverged(state, next_state, ts, env_id):
  div = np.asarray(ts.info['diverged'])
  assert div[env_id] and div.sum() == 1
  assert ts.terminated[env_id] and not ts.truncated[env_id]
  assert next_state.t[env_id] == 0
  assert np.isfinite(np.asarray(ts.obs)).all()
  assert np.isfinite(np.asarray(ts.final_obs)).all()
  assert np.isfinite(np.asarray(ts.reward)).all()
  assert ts.reward[env_id] == 0.0
  # final_obs falls back to the last valid observation.
  np.testing.assert_array_equal(ts.final_obs[env_id], state.obs[env_id])
  assert ts.obs[env_id, 2] == 0.0  # A fresh pendulum episode: at rest.


@pytest.mark.parametrize('value', [np.inf, np.nan, 1e30])
def test_native_divergence_is_terminated_and_reset(value):
  env = _env('cpu')
  reset, step = _jitted(env)
  state = reset(jax.random.key(0))
  state, _ = step(state, jnp.zeros((B, 1)))
  jax.block_until_ready(state)
  rows = env.get_host_state()
  rows[1, _qvel_slice(env.model)] = value
  env.set_host_state(rows)
  next_state, ts = step(state, jnp.zeros((B, 1)))
  _check_diverged(state, next_state, ts, 1)
  # It runs on normally afterwards, the others never noticed.
  for _ in range(3):
    next_state, ts = step(next_state, jnp.full((B, 1), 0.3))
    assert not ts.info['diverged'].any()
    assert np.isfinite(np.asarray(ts.obs)).all()
  assert np.isfinite(env.get_host_state()).all()


def test_native_divergence_on_the_truncating_step():
  env = _env('cpu', 2)
  reset, step = _jitted(env)
  state = reset(jax.random.key(0))
  state, _ = step(state, jnp.zeros((B, 1)))
  jax.block_until_ready(state)
  rows = env.get_host_state()
  rows[2, _qvel_slice(env.model)] = np.inf
  env.set_host_state(rows)
  next_state, ts = step(state, jnp.zeros((B, 1)))  # t reaches 2 == limit.
  np.testing.assert_array_equal(ts.truncated, [True, True, False, True])
  _check_diverged(state, next_state, ts, 2)


def test_native_simulation_error_is_divergence(monkeypatch):
  """Sims that raise in MuJoCo are terminated and reset like diverged ones."""
  env = _env('cpu')
  reset, step = _jitted(env)
  state = reset(jax.random.key(0))
  batch = env.physics.batch
  real_step = batch.step
  def failing_step(*args, **kwargs):
    real_step(*args, **kwargs)
    raise mujoco.batch.SimulationError(np.array([3], np.int32), 'test error')
  monkeypatch.setattr(batch, 'step', failing_step)
  next_state, ts = step(state, jnp.zeros((B, 1)))
  _check_diverged(state, next_state, ts, 3)


def test_mjx_divergence_is_terminated_and_reset():
  env = _env('mjx')
  reset, step = _jitted(env)
  state = reset(jax.random.key(0))
  state, _ = step(state, jnp.zeros((B, 1)))
  for env_id, value in ((0, jnp.inf), (3, 1e30)):
    physics = state.physics
    bad = state._replace(physics=physics.replace(
        qvel=physics.qvel.at[env_id].set(value)))
    next_state, ts = step(bad, jnp.zeros((B, 1)))
    _check_diverged(bad, next_state, ts, env_id)
    assert np.isfinite(np.asarray(next_state.physics.qvel)).all()


# -- host state --------------------------------------------------------------


def test_native_host_state_round_trip_is_exact():
  env = _env('cpu', 7)  # A truncation inside the replayed stretch.
  reset, step = _jitted(env)
  rollout = jax.jit(lambda s, a: jax.lax.scan(env.step, s, a))
  actions = jnp.asarray(
      np.random.default_rng(0).uniform(-1, 1, (5, B, 1)), jnp.float32)
  state = reset(jax.random.key(1))
  state, _ = rollout(state, actions)
  saved_state = jax.device_get(state)
  saved_rows = env.get_host_state()
  _, first = rollout(state, actions)
  jax.block_until_ready(first)
  env.set_host_state(saved_rows)
  _, again = rollout(saved_state, actions)
  for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(again)):
    np.testing.assert_array_equal(a, b)


def test_native_rejects_a_stale_state():
  env = _env('cpu')
  reset, step = _jitted(env)
  state = reset(jax.random.key(0))
  newer, _ = step(state, jnp.zeros((B, 1)))
  jax.block_until_ready(newer)
  with pytest.raises(Exception, match='stale EnvState'):
    jax.block_until_ready(step(state, jnp.zeros((B, 1))))
  # The latest state still steps.
  newer, ts = step(newer, jnp.zeros((B, 1)))
  assert np.isfinite(np.asarray(ts.obs)).all()


def test_set_host_state_checks_shape():
  env = _env('cpu')
  with pytest.raises(ValueError, match='host state of shape'):
    env.set_host_state(np.zeros((B + 1, 3)))


def test_native_flags_bad_rows_without_warnings(monkeypatch):
  """A bad qpos/qvel that MuJoCo has not flagged is caught on the view."""
  env = _env('cpu')
  reset, step = _jitted(env)
  state = reset(jax.random.key(0))
  state, ts = step(state, jnp.zeros((B, 1)))
  assert not np.asarray(ts.info['diverged']).any()
  jax.block_until_ready(state)
  physics = env.physics
  # Written behind MuJoCo's back, and a step that leaves them as they are,
  # so no warning counter rises: only the value check can find them.
  start = mujoco.mj_stateSize(env.model, mujoco.mjtState.mjSTATE_TIME)
  physics.batch.state[1, start] = np.nan  # qpos
  physics.batch.state[2, _qvel_slice(env.model).start] = -2e10
  monkeypatch.setattr(physics.batch, 'step', lambda *args, **kwargs: None)
  next_state, ts = step(state, jnp.zeros((B, 1)))
  np.testing.assert_array_equal(ts.info['diverged'],
                                [False, True, True, False])
  assert np.isfinite(np.asarray(ts.obs)).all()
  assert (np.asarray(next_state.t) == [2, 0, 0, 2]).all()
  assert np.isfinite(env.get_host_state()).all()  # Both were reset.


def test_native_callback_mechanisms_agree():
  """The copying io_callback path (used in accelerator programs) is exact."""
  actions = jnp.asarray(
      np.random.default_rng(3).uniform(-1, 1, (9, B, 1)), jnp.float32)
  outs = []
  for callback in ('io', 'buffer'):
    env = envs.make(TASK, backend='cpu', num_envs=B, episode_length=4,
                    callback=callback)
    def rollout(key, actions, env=env):
      return jax.lax.scan(env.step, env.reset(key), actions)[1]
    outs.append(jax.jit(rollout)(jax.random.key(4), actions))
  assert outs[0].truncated.sum() == 2 * B
  for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1])):
    np.testing.assert_array_equal(a, b)


def test_unknown_callback():
  with pytest.raises(ValueError, match="'auto', 'buffer', 'io'"):
    envs.make(TASK, backend='cpu', num_envs=B, callback='ffi')
