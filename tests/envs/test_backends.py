"""The two physics backends behind roxie.envs.make: semantics and parity.

Tiny tasks (PendulumSwingup, CartpoleSwingup), few envs, tens of steps
(and, in the slow tier, contact-rich CheetahRun and FingerSpin). The
native backend is checked exactly against dm_control's suite (same state in,
same observations and rewards out, step after step); MJX (float32) is checked
against the native backend (float64) within a tolerance; auto-reset,
truncation, clipping and errors are checked on both, always inside
`jax.jit` and `lax.scan`.
"""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import roxie.envs as envs
from roxie.envs import common

B = 4
BACKENDS = ('cpu', 'mjx')


@functools.lru_cache(maxsize=None)
def _env(task, backend, episode_length=None, num_envs=B):
  return envs.make(task, backend=backend, num_envs=num_envs,
                   episode_length=episode_length)


@functools.lru_cache(maxsize=None)
def _rollout_fn(env):
  """jit(key, actions [T, B, A]) -> (first obs, TimeSteps [T, ...], ts)."""
  def rollout(key, actions):
    state = env.reset(key)
    def body(state, action):
      state, ts = env.step(state, action)
      return state, (ts, state.t, state.task_state)
    _, out = jax.lax.scan(body, state, actions)
    return state.obs, out
  return jax.jit(rollout)


def _actions(seed, steps, env, scale=1.0):
  rng = np.random.default_rng(seed)
  return jnp.asarray(rng.uniform(-scale, scale,
                                 (steps, env.num_envs, env.spec.action_size)),
                     jnp.float32)


# -- errors -----------------------------------------------------------------


def test_unknown_task_lists_available():
  with pytest.raises(KeyError, match='Available tasks:.*PendulumSwingup'):
    envs.make('PendulumSwingUpp', num_envs=2)


def test_unknown_backend_names_choices():
  with pytest.raises(ValueError, match="'cpu', 'mjx'"):
    envs.make('PendulumSwingup', backend='gpu', num_envs=2)


def test_list_tasks():
  assert 'PendulumSwingup' in envs.list_tasks()
  assert list(envs.list_tasks()) == sorted(envs.list_tasks())


@pytest.mark.parametrize('backend', BACKENDS)
def test_bad_action_shape_raises_at_trace_time(backend):
  env = _env('PendulumSwingup', backend)
  state = jax.eval_shape(env.reset, jax.random.key(0))
  bad = jax.ShapeDtypeStruct((B, 2), jnp.float32)
  with pytest.raises(ValueError, match=r'expected an action of shape \(4, 1\).*'
                     r'got \(4, 2\)'):
    jax.eval_shape(env.step, state, bad)


def test_mjx_warp_unavailable_is_clear():
  from mujoco.mjx import warp as mjxw  # pylint: disable=g-import-not-at-top
  if mjxw.WARP_INSTALLED:
    pytest.skip('Warp is installed here.')
  with pytest.raises(ValueError, match='Warp'):
    envs.make('PendulumSwingup', backend='mjx', num_envs=2, impl='warp')


# -- the native backend against dm_control's suite ---------------------------


@pytest.mark.parametrize('task,domain,dmc_task', [
    ('PendulumSwingup', 'pendulum', 'swingup'),
    ('CartpoleSwingup', 'cartpole', 'swingup'),  # RK4 integrator
    ('CheetahRun', 'cheetah', 'run'),  # Contacts, a velocity sensor.
    pytest.param('HumanoidWalk', 'humanoid', 'walk',  # 5 substeps, ctrl used.
                 marks=pytest.mark.slow),  # ~40 s of compiling on 2 cores.
])
def test_native_matches_dm_control(task, domain, dmc_task):
  """Same initial state and actions: the suite's observations and rewards."""
  from dm_control import suite  # pylint: disable=g-import-not-at-top
  steps = 25
  env = _env(task, 'cpu')
  actions = _actions(1, steps, env)
  first_obs, (ts, _, _) = _rollout_fn(env)(jax.random.key(3), actions)
  # The initial physics state of each env, recovered from its trajectory
  # start: replay from the host state saved right after reset.
  state = jax.jit(env.reset)(jax.random.key(3))
  rows = env.get_host_state()
  nq, nv = env.model.nq, env.model.nv
  for i in range(B):
    dmc = suite.load(domain, dmc_task)
    dmc.reset()
    physics = dmc.physics
    with physics.reset_context():
      physics.data.qpos[:] = rows[i, 1:1 + nq]  # [time, qpos, qvel, ...]
      physics.data.qvel[:] = rows[i, 1 + nq:1 + nq + nv]
    dmc_obs = np.concatenate(
        [np.ravel(v) for v in dmc.task.get_observation(physics).values()])
    np.testing.assert_allclose(first_obs[i], dmc_obs, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(state.obs[i], dmc_obs, rtol=1e-6, atol=1e-6)
    offset, scale = common._control_map(env.model)  # pylint: disable=protected-access
    for k in range(steps):
      out = dmc.step(offset + scale * np.asarray(actions[k, i], np.float64))
      obs = np.concatenate([np.ravel(v) for v in out.observation.values()])
      np.testing.assert_allclose(ts.final_obs[k, i], obs, rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(ts.reward[k, i], out.reward, rtol=1e-5,
                                 atol=1e-5)


# -- MJX against native ------------------------------------------------------


@pytest.mark.parametrize('task', [
    pytest.param('PendulumSwingup', marks=pytest.mark.slow),  # ~26 s.
    'CartpoleSwingup'])
def test_mjx_matches_native(task):
  """Same key and actions, 40 steps with an auto-reset at step 25.

  MJX runs in float32, the native backend in float64; the trajectories agree
  to ~1e-4 after 40 steps (pendulum and cartpole are smooth), so 2e-3 is a
  wide margin that still catches any semantic difference (a substep off, a
  stale view, a wrong reset), which shows up at the 1e-2..1 level.
  """
  steps, length = 40, 25
  key = jax.random.key(7)
  cpu = _env(task, 'cpu', length)
  mjx = _env(task, 'mjx', length)
  actions = _actions(2, steps, cpu)
  o_cpu, (ts_cpu, t_cpu, _) = _rollout_fn(cpu)(key, actions)
  o_mjx, (ts_mjx, t_mjx, _) = _rollout_fn(mjx)(key, actions)
  np.testing.assert_allclose(o_cpu, o_mjx, atol=1e-5)
  np.testing.assert_array_equal(t_cpu, t_mjx)
  np.testing.assert_array_equal(ts_cpu.truncated, ts_mjx.truncated)
  assert ts_cpu.truncated[length - 1].all() and ts_cpu.truncated.sum() == B
  for name in ('obs', 'final_obs', 'reward'):
    np.testing.assert_allclose(getattr(ts_cpu, name), getattr(ts_mjx, name),
                               atol=2e-3, rtol=2e-3, err_msg=name)
  assert not ts_cpu.terminated.any() and not ts_mjx.terminated.any()


@pytest.mark.slow
@pytest.mark.parametrize('task', ['CheetahRun', 'FingerSpin'])
def test_mjx_matches_native_with_contacts(task):
  """Contact-rich, several actuators: 12 steps, an auto-reset at step 8.

  Contacts make float32 and float64 trajectories drift apart faster than
  the smooth pendulum and cartpole; measured on CheetahRun (6 actuators,
  observations up to ~60) the largest difference over these 12 steps was
  6e-4 and rewards agreed to 1e-6. A wrong substep, a stale derived field
  or contact parameters that differ show up at the 1e-1..10 level.
  """
  steps, length = 12, 8
  key = jax.random.key(7)
  cpu = _env(task, 'cpu', length)
  mjx = _env(task, 'mjx', length)
  assert cpu.spec.action_size >= 2
  actions = _actions(2, steps, cpu, scale=0.5)
  o_cpu, (ts_cpu, t_cpu, _) = _rollout_fn(cpu)(key, actions)
  o_mjx, (ts_mjx, t_mjx, _) = _rollout_fn(mjx)(key, actions)
  np.testing.assert_allclose(o_cpu, o_mjx, atol=1e-5)
  np.testing.assert_array_equal(t_cpu, t_mjx)
  np.testing.assert_array_equal(ts_cpu.truncated, ts_mjx.truncated)
  assert ts_cpu.truncated[length - 1].all()
  for name in ('obs', 'final_obs', 'reward'):
    np.testing.assert_allclose(getattr(ts_cpu, name), getattr(ts_mjx, name),
                               atol=5e-3, rtol=5e-3, err_msg=name)


# -- auto-reset ----------------------------------------------------------------


@pytest.mark.parametrize('backend', BACKENDS)
def test_truncation_autoreset(backend):
  length, steps = 5, 8
  key = jax.random.key(11)
  env = _env('PendulumSwingup', backend, length)
  ref = _env('PendulumSwingup', backend, 1000)  # Same physics, no reset.
  actions = _actions(4, steps, env)
  _, (ts, t, _) = _rollout_fn(env)(key, actions)
  _, (ts_ref, _, _) = _rollout_fn(ref)(key, actions)
  k = length - 1  # The step that reaches the time limit.
  np.testing.assert_array_equal(np.asarray(t)[:, 0], [1, 2, 3, 4, 0, 1, 2, 3])
  assert ts.truncated[k].all() and ts.truncated.sum() == B
  assert not ts.terminated.any()
  # Up to and including the truncating step, final_obs is the true next
  # observation: exactly what an env without the time limit reaches.
  np.testing.assert_array_equal(ts.final_obs[:k + 1], ts_ref.final_obs[:k + 1])
  np.testing.assert_array_equal(ts.reward[:k + 1], ts_ref.reward[:k + 1])
  np.testing.assert_array_equal(ts.obs[:k], ts.final_obs[:k])
  # obs is the first observation of a new episode: the reset distribution's
  # sample (PendulumSwingup: hinge at rest, at a new random angle).
  first = np.asarray(ts.obs[k])
  assert np.all(first[:, 2] == 0.0)  # velocity
  np.testing.assert_allclose(np.hypot(first[:, 0], first[:, 1]), 1, atol=1e-6)
  assert np.all(np.abs(first - ts.final_obs[k]) > 1e-3)
  # The new episode then runs on from that observation.
  assert np.all(ts.final_obs[k + 1] != ts_ref.final_obs[k + 1])


@pytest.mark.parametrize('backend', BACKENDS)
def test_reset_obs_is_the_init_distribution(backend):
  """A truncation reset lands exactly on the sampled init state's obs."""
  env = _env('PendulumSwingup', backend, 1)  # Every step truncates.
  state = jax.jit(env.reset)(jax.random.key(5))
  state2, ts = jax.jit(env.step)(state, jnp.zeros((B, 1)))
  # Recompute the reset the step made: the same key split, the same sample.
  _, trunc_key, _ = jax.random.split(state.key, 3)
  init = env._sample(trunc_key)  # pylint: disable=protected-access
  angle = init.qpos[:, 0]
  np.testing.assert_allclose(ts.obs[:, 0], jnp.cos(angle), atol=1e-6)
  np.testing.assert_allclose(ts.obs[:, 1], jnp.sin(angle), atol=1e-6)
  assert ts.truncated.all() and (state2.t == 0).all()


# -- actions ---------------------------------------------------------------


@pytest.mark.parametrize('backend', BACKENDS)
def test_clipping_is_counted_and_applied(backend):
  env = _env('PendulumSwingup', backend)
  step = jax.jit(env.step)
  state = jax.jit(env.reset)(jax.random.key(0))
  raw = jnp.array([[2.0], [-3.0], [0.5], [jnp.nan]])
  clipped = jnp.array([[1.0], [-1.0], [0.5], [0.0]])
  _, ts = step(state, raw)
  np.testing.assert_array_equal(ts.info['clipped'], [1, 1, 0, 1])
  assert ts.info['clipped'].dtype == jnp.int32
  state = jax.jit(env.reset)(jax.random.key(0))
  _, ts2 = step(state, clipped)
  np.testing.assert_array_equal(ts.obs, ts2.obs)
  np.testing.assert_array_equal(ts2.info['clipped'], [0, 0, 0, 0])


# -- terminations (a task of the test's own) ---------------------------------


def _terminating_pendulum():
  """PendulumSwingup, ending (terminally) once the hinge speed exceeds 1."""
  base = envs.get_task('PendulumSwingup')
  def terminate(view, task_state, consts):
    del task_state
    return jnp.abs(view['qvel'][consts['hinge_qvel']]) > 1.0
  return dataclasses.replace(base, name='PendulumTerminating',
                             terminate=terminate)


@functools.lru_cache(maxsize=None)
def _terminating_env(backend):
  return envs.make(_terminating_pendulum(), backend=backend, num_envs=B)


@pytest.mark.parametrize('backend', BACKENDS)
def test_termination_resets_with_second_call(backend):
  env = _terminating_env(backend)
  steps = 30
  # Full torque one way for all envs: each crosses the speed limit at its
  # own step, depending on its start angle.
  actions = jnp.ones((steps, B, 1))
  _, (ts, t, _) = _rollout_fn(env)(jax.random.key(2), actions)
  term = np.asarray(ts.terminated)
  assert term.any(axis=0).all(), 'every env should terminate in 30 steps'
  assert not np.asarray(ts.truncated).any()
  for i in range(B):
    k = int(np.argmax(term[:, i]))
    assert abs(ts.final_obs[k, i, 2]) > 1.0  # The terminal obs, not a reset.
    assert ts.obs[k, i, 2] == 0.0  # A reset obs: the pendulum at rest.
    assert t[k, i] == 0 and (k == 0 or t[k - 1, i] == k)
    assert not ts.info['diverged'][k, i]
    np.testing.assert_array_equal(ts.obs[:k, i], ts.final_obs[:k, i])


def test_termination_matches_across_backends():
  cpu, mjx = _terminating_env('cpu'), _terminating_env('mjx')
  actions = jnp.ones((30, B, 1))
  _, (ts_c, _, _) = _rollout_fn(cpu)(jax.random.key(2), actions)
  _, (ts_m, _, _) = _rollout_fn(mjx)(jax.random.key(2), actions)
  np.testing.assert_array_equal(ts_c.terminated, ts_m.terminated)
  np.testing.assert_allclose(ts_c.obs, ts_m.obs, atol=2e-3)


def test_native_thread_count_follows_the_batch_cost():
  # A batch whose step is cheap on one thread stays on one thread; a costly
  # one gets every core; an explicit nthread always wins.
  from roxie.envs import native  # pylint: disable=g-import-not-at-top
  limit = native.PARALLEL_MIN_STEP_US
  assert native.default_nthread(1, step_us=limit - 1, cpus=8) == 1
  assert native.default_nthread(16, step_us=(limit - 1) / 16, cpus=8) == 1
  assert native.default_nthread(16, step_us=limit / 16, cpus=8) == 8
  assert native.default_nthread(1, step_us=limit, cpus=1) == 1
  assert native.default_nthread(3, step_us=limit, cpus=8) == 3  # <= envs.


def test_native_thread_count_is_picked_from_the_measured_step(monkeypatch):
  from roxie.envs import native  # pylint: disable=g-import-not-at-top
  cores = os.cpu_count()
  seen = []

  def fake(model, n_substeps, **unused):
    seen.append(n_substeps)
    return cost[0]

  monkeypatch.setattr(native, 'physics_step_us', fake)
  cost = [1.0]  # 16 envs x 1 us: far below the limit.
  small = envs.make('PendulumSwingup', backend='cpu', num_envs=16)
  assert small.physics.batch.nthread == 1
  # The population's batch (4 x 16 envs) is costed as a whole.
  cost = [native.PARALLEL_MIN_STEP_US / 32]
  half = envs.make('PendulumSwingup', backend='cpu', num_envs=16)
  assert half.physics.batch.nthread == 1
  assert half.physics.population(4).inner.batch.nthread == min(cores, 64)
  cost = [native.PARALLEL_MIN_STEP_US]
  costly = envs.make('PendulumSwingup', backend='cpu', num_envs=cores)
  assert costly.physics.batch.nthread == cores
  forced = envs.make('PendulumSwingup', backend='cpu', num_envs=16,
                     nthread=2)
  assert forced.physics.batch.nthread == 2
  assert forced.physics.population(4).inner.batch.nthread == 2
  assert seen and all(n == 1 for n in seen)  # Pendulum: one substep.


def test_physics_step_cost_is_measured_on_a_scratch_state():
  from roxie.envs import native  # pylint: disable=g-import-not-at-top
  env = envs.make('CheetahRun', backend='cpu', num_envs=2)
  before = env.physics.get_host_state()
  us = native.physics_step_us(env.physics.model, env.physics.n_substeps,
                              settle=5, steps=3)
  assert 0 < us < 1e6
  np.testing.assert_array_equal(env.physics.get_host_state(), before)
