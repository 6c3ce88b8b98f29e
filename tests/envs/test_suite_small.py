"""roxie's small suite tasks against dm_control's own.

Covers cartpole, acrobot, reacher, finger, ball_in_cup and point_mass. For
each task, random physics states (and per-episode targets) are written into a
dm_control suite environment's physics the way its task would write them;
roxie's observation and reward, run under `jax.jit` and `jax.vmap` on views
built from float32 copies of dm_control's MjData, must equal the suite's.
The reset distribution is compared with the suite's (ranges, and two-sample
Kolmogorov-Smirnov tests per coordinate), and timing, sizes and the registry
are checked.
"""

import dataclasses
import math
import zlib
from typing import Callable

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy import stats

from dm_control import suite

from roxie.envs.task import flatten_observation
from roxie.envs.tasks import TASKS
from roxie.envs.tasks import ball_in_cup as roxie_ball_in_cup
from roxie.envs.tasks import finger as roxie_finger

# Registry name -> (dm_control domain, task).
NAMES = {
    'CartpoleBalance': ('cartpole', 'balance'),
    'CartpoleBalanceSparse': ('cartpole', 'balance_sparse'),
    'CartpoleSwingup': ('cartpole', 'swingup'),
    'CartpoleSwingupSparse': ('cartpole', 'swingup_sparse'),
    'AcrobotSwingup': ('acrobot', 'swingup'),
    'AcrobotSwingupSparse': ('acrobot', 'swingup_sparse'),
    'ReacherEasy': ('reacher', 'easy'),
    'ReacherHard': ('reacher', 'hard'),
    'FingerSpin': ('finger', 'spin'),
    'FingerTurnEasy': ('finger', 'turn_easy'),
    'FingerTurnHard': ('finger', 'turn_hard'),
    'BallInCup': ('ball_in_cup', 'catch'),
    'PointMass': ('point_mass', 'easy'),
}

N_STATES = 40       # random states per task for observation/reward
N_RESET_STATES = 8  # dm_control reset states added to those
N_INIT = 1000       # roxie reset samples per task
N_DMC_INIT = 300    # dm_control reset samples per task
ATOL = RTOL = 1e-5


# ---------------------------------------------------------------------------
# Per-domain state samplers. Each writes a random state into dm_control's
# physics (qpos, qvel, ctrl, and the task's per-episode model fields) and
# returns roxie's task_state for it. About half the states are drawn near
# the goal so that sparse rewards are exercised both ways.


def _uniform_ctrl(rng, physics):
  low, high = physics.model.actuator_ctrlrange.T
  physics.data.ctrl[:] = rng.uniform(low, high)


def _sample_cartpole(rng, physics):
  near = rng.random() < 0.5
  d = physics.data
  d.qpos[0] = rng.normal(0, 0.2) if near else rng.uniform(-1.8, 1.8)
  d.qpos[1] = rng.normal(0, 0.08) if near else rng.uniform(-7, 7)
  d.qvel[:] = rng.normal(0, 3, 2)
  _uniform_ctrl(rng, physics)
  return np.zeros(0)


def _sample_acrobot(rng, physics):
  near = rng.random() < 0.5
  d = physics.data
  d.qpos[:] = rng.normal(0, 0.1, 2) if near else rng.uniform(-7, 7, 2)
  d.qvel[:] = rng.normal(0, 3, 2)
  _uniform_ctrl(rng, physics)
  return np.zeros(0)


def _sample_reacher(rng, physics):
  d, m = physics.data, physics.model
  d.qpos[0] = rng.uniform(-4, 4)
  d.qpos[1] = rng.uniform(*m.jnt_range[1])
  d.qvel[:] = rng.normal(0, 3, 2)
  _uniform_ctrl(rng, physics)
  if rng.random() < 0.5:
    physics.forward()
    target = physics.named.data.geom_xpos['finger', :2] + rng.normal(
        0, 0.04, 2)
  else:
    angle, radius = rng.uniform(0, 2 * np.pi), rng.uniform(0.05, 0.2)
    target = radius * np.array([np.sin(angle), np.cos(angle)])
  physics.named.model.geom_pos['target', :2] = target
  return target


def _sample_finger(rng, physics, turn):
  d, m = physics.data, physics.model
  # Half the states have the finger touching the spinner.
  want_contact = rng.random() < 0.5
  for _ in range(200):
    d.qpos[:] = [rng.uniform(*m.jnt_range[0]), rng.uniform(*m.jnt_range[1]),
                 rng.uniform(-4, 4)]
    physics.forward()
    if (d.ncon > 0) == want_contact:
      break
  d.qvel[:] = rng.normal(0, [3, 3, 20])
  _uniform_ctrl(rng, physics)
  if not turn:
    return np.zeros(0)
  # Targets on the tip's circle; half of them near the tip.
  angle = (-d.qpos[2] + rng.normal(0, 0.4) if rng.random() < 0.5
           else rng.uniform(-np.pi, np.pi))
  hinge = physics.named.data.xanchor['hinge', ['x', 'z']]
  target = hinge + 0.13 * np.array([np.sin(angle), np.cos(angle)])
  physics.named.model.site_pos['target', ['x', 'z']] = target
  return target


def _sample_ball_in_cup(rng, physics):
  d = physics.data
  cup = rng.normal(0, 0.1, 2)
  d.qpos[:2] = cup
  if rng.random() < 0.5:
    # Near the target box: cup offset (0, 0.6), target (0, -0.05) in the cup,
    # ball body at (0, 0.2).
    d.qpos[2:] = cup + [0, 0.35] + rng.uniform(-0.04, 0.04, 2)
  else:
    d.qpos[2:] = [rng.uniform(-0.3, 0.3), rng.uniform(0.1, 0.6)]
  d.qvel[:] = rng.normal(0, 1, 4)
  _uniform_ctrl(rng, physics)
  return np.zeros(0)


def _sample_point_mass(rng, physics):
  d = physics.data
  d.qpos[:] = (rng.normal(0, 0.02, 2) if rng.random() < 0.5
               else rng.uniform(-0.29, 0.29, 2))
  d.qvel[:] = rng.normal(0, 0.5, 2)
  _uniform_ctrl(rng, physics)
  return np.zeros(0)


def _no_task_state(physics):
  del physics
  return np.zeros(0)


def _reacher_target(physics):
  return physics.named.model.geom_pos['target', :2].copy()


def _finger_target(physics):
  return physics.named.model.site_pos['target', ['x', 'z']].copy()


@dataclasses.dataclass(frozen=True)
class Domain:
  sample: Callable  # (rng, physics) -> task_state, writes the state
  task_state: Callable = _no_task_state  # dm_control physics -> task_state


DOMAINS = {
    'cartpole': Domain(_sample_cartpole),
    'acrobot': Domain(_sample_acrobot),
    'reacher': Domain(_sample_reacher, _reacher_target),
    'finger': Domain(lambda r, p: _sample_finger(r, p, turn=False)),
    'finger_turn': Domain(lambda r, p: _sample_finger(r, p, turn=True),
                          _finger_target),
    'ball_in_cup': Domain(_sample_ball_in_cup),
    'point_mass': Domain(_sample_point_mass),
}


def _domain(name):
  domain, dmc_task = NAMES[name]
  return DOMAINS['finger_turn' if dmc_task.startswith('turn') else domain]


def _load(name, seed=0):
  domain, dmc_task = NAMES[name]
  return suite.load(domain, dmc_task, task_kwargs={'random': seed})


def _view(task, physics):
  return {f: np.array(getattr(physics.data, f), np.float32)
          for f in task.fields}


def _stack(dicts):
  return {k: np.stack([d[k] for d in dicts]) for k in dicts[0]}


# ---------------------------------------------------------------------------
# Registry, timing, sizes.


def test_registry_has_every_task_under_its_name():
  for name, (domain, dmc_task) in NAMES.items():
    assert name in TASKS, name
    task = TASKS[name]
    assert (task.name, task.domain, task.dmc_task) == (name, domain, dmc_task)


@pytest.mark.parametrize('name', sorted(NAMES))
def test_timing_model_and_sizes_agree_with_dm_control(name):
  task = TASKS[name]
  env = _load(name)
  env.reset()
  model = task.load_model()
  assert task.control_timestep == pytest.approx(env.control_timestep())
  assert task.n_substeps(model) == env._n_sub_steps  # pylint: disable=protected-access
  # The environment ends an episode once its step count reaches the limit.
  assert task.episode_length == math.ceil(env._step_limit - 1e-9)  # pylint: disable=protected-access
  # The dynamics-relevant model is the one the suite's task steps (e.g.
  # FingerSpin's lower hinge damping).
  dmc = env.physics.model
  assert model.opt.timestep == dmc.opt.timestep
  for field in ('dof_damping', 'dof_frictionloss', 'body_mass', 'jnt_range',
                'jnt_stiffness', 'actuator_gear', 'actuator_ctrlrange',
                'geom_friction', 'qpos0'):
    np.testing.assert_array_equal(getattr(model, field), getattr(dmc, field),
                                  err_msg=field)
  # Observation parts and sizes.
  c = task.consts(model)
  key = jax.random.key(0)
  qpos, qvel, task_state = task.init(key, c)
  assert qpos.shape == (model.nq,) and qvel.shape == (model.nv,)
  assert task_state.shape == (task.task_state_size,)
  physics = env.physics
  view = _view(task, physics)
  obs = task.observe(view, task_state, c)
  spec = env.observation_spec()
  assert list(obs) == list(spec)
  for k in spec:
    assert np.size(obs[k]) == int(np.prod(spec[k].shape)), k
  assert flatten_observation(obs).shape == (
      sum(int(np.prod(s.shape)) for s in spec.values()),)


# ---------------------------------------------------------------------------
# Observations and rewards.


@pytest.mark.parametrize('name', sorted(NAMES))
def test_observation_and_reward_match_dm_control(name):
  task = TASKS[name]
  env = _load(name, seed=1)
  dmc_task, physics = env.task, env.physics
  domain = _domain(name)
  rng = np.random.default_rng(zlib.crc32(name.encode()))
  views, states, ref_obs, ref_rew = [], [], [], []

  def record(task_state):
    views.append(_view(task, physics))
    states.append(np.asarray(task_state, np.float32))
    ref_obs.append(dmc_task.get_observation(physics))
    ref_rew.append(dmc_task.get_reward(physics))

  for _ in range(N_RESET_STATES):
    env.reset()
    record(domain.task_state(physics))
  env.reset()  # Per-episode model constants (target size, damping) are set.
  for _ in range(N_STATES):
    task_state = domain.sample(rng, physics)
    physics.forward()
    record(task_state)

  c = task.consts(task.load_model())
  view, task_state = _stack(views), np.stack(states)
  obs = jax.jit(jax.vmap(lambda v, s: task.observe(v, s, c)))(view, task_state)
  rew = jax.jit(jax.vmap(lambda v, s: task.reward(v, s, c)))(view, task_state)

  # (jit returns dicts with sorted keys; the order is checked unjitted in
  # test_timing_model_and_sizes_agree_with_dm_control, and on the flat
  # observation below.)
  assert sorted(obs) == sorted(ref_obs[0])
  for k in obs:
    ref = np.stack([np.asarray(o[k], np.float64) for o in ref_obs])
    np.testing.assert_allclose(obs[k], ref, rtol=RTOL, atol=ATOL, err_msg=k)
  # The flat observation, flattened inside jit, in dm_control's order.
  flat = jax.jit(jax.vmap(
      lambda v, s: flatten_observation(task.observe(v, s, c))))(
          view, task_state)
  ref_flat = np.stack([np.concatenate([np.ravel(v) for v in o.values()])
                       for o in ref_obs])
  np.testing.assert_allclose(flat, ref_flat, rtol=RTOL, atol=ATOL)
  assert rew.shape == (len(ref_rew),) and rew.dtype == jnp.float32
  np.testing.assert_allclose(rew, np.array(ref_rew), rtol=RTOL, atol=ATOL)
  # The samplers must exercise the reward (sparse ones both ways).
  ref_rew = np.array(ref_rew)
  assert ref_rew.max() > 0.5 and ref_rew.min() < 0.5, ref_rew


# ---------------------------------------------------------------------------
# Reset distributions.


def _roxie_inits(task, n=N_INIT, seed=0):
  c = task.consts(task.load_model())
  keys = jax.random.split(jax.random.key(seed), n)
  out = jax.jit(jax.vmap(lambda k: task.init(k, c)))(keys)
  return [np.asarray(x, np.float64) for x in out]


def _dmc_inits(name, n=N_DMC_INIT):
  env = _load(name, seed=2)
  domain = _domain(name)
  qpos, qvel, states = [], [], []
  for _ in range(n):
    env.reset()
    qpos.append(env.physics.data.qpos.copy())
    qvel.append(env.physics.data.qvel.copy())
    states.append(domain.task_state(env.physics))
  return [np.array(x, np.float64) for x in (qpos, qvel, states)]


@pytest.mark.parametrize('name', sorted(NAMES))
def test_reset_distribution_matches_dm_control(name):
  """Each coordinate's marginal agrees with the suite's (KS, fixed seeds)."""
  ours = _roxie_inits(TASKS[name])
  theirs = _dmc_inits(name)
  for part, a, b in zip(('qpos', 'qvel', 'task_state'), ours, theirs):
    assert a.shape[1:] == b.shape[1:], part
    for i in range(a.shape[1]):
      if np.ptp(b[:, i]) == 0:
        np.testing.assert_allclose(a[:, i], b[0, i], atol=1e-6,
                                   err_msg=f'{part}[{i}]')
        continue
      p = stats.ks_2samp(a[:, i], b[:, i]).pvalue
      assert p > 1e-4, f'{part}[{i}]: KS p-value {p:.2g}'


def _within(x, low, high):
  assert np.all(x >= low - 1e-6) and np.all(x <= high + 1e-6), (
      x.min(), x.max(), low, high)


def test_reset_ranges():
  """Reset samples lie in the suite's ranges, with its moments."""
  for name in ('CartpoleBalance', 'CartpoleBalanceSparse'):
    qpos, qvel, _ = _roxie_inits(TASKS[name])
    _within(qpos[:, 0], -0.1, 0.1)
    _within(qpos[:, 1], -0.034, 0.034)
    assert abs(qpos[:, 1].std() - 0.034 / math.sqrt(3)) < 2e-3
    assert abs(qvel.std() - 0.01) < 1e-3
  for name in ('CartpoleSwingup', 'CartpoleSwingupSparse'):
    qpos, qvel, _ = _roxie_inits(TASKS[name])
    assert abs(qpos[:, 1].mean() - np.pi) < 2e-3
    assert abs(qpos[:, 1].std() - 0.01) < 1e-3
    assert abs(qpos[:, 0].std() - 0.01) < 1e-3
    assert abs(qvel.std() - 0.01) < 1e-3
  for name in ('AcrobotSwingup', 'PointMass'):
    qpos, qvel, _ = _roxie_inits(TASKS[name])
    bound = np.pi if name.startswith('Acrobot') else 0.29
    _within(qpos, -bound, bound)
    assert qpos.std() > 0.5 * bound and np.all(qvel == 0)
  for name in ('ReacherEasy', 'ReacherHard'):
    qpos, qvel, target = _roxie_inits(TASKS[name])
    _within(qpos[:, 0], -np.pi, np.pi)
    _within(qpos[:, 1], -np.deg2rad(160), np.deg2rad(160))
    radius = np.linalg.norm(target, axis=1)
    _within(radius, 0.05, 0.2)
    assert abs(radius.mean() - 0.125) < 5e-3 and np.all(qvel == 0)
  for name in ('FingerSpin', 'FingerTurnEasy'):
    qpos, qvel, target = _roxie_inits(TASKS[name])
    limit = np.deg2rad(110)
    _within(qpos[:, :2], -limit, limit)
    _within(qpos[:, 2], -np.pi, np.pi)
    assert np.all(qvel == 0)
    if target.shape[1]:
      np.testing.assert_allclose(
          np.linalg.norm(target - [0.2, 0.4], axis=1), 0.13, atol=1e-6)
  qpos, qvel, _ = _roxie_inits(TASKS['BallInCup'])
  assert np.all(qpos[:, :2] == 0) and np.all(qvel == 0)
  _within(qpos[:, 2], -0.2, 0.2)
  _within(qpos[:, 3], 0.2, 0.5)


@pytest.mark.parametrize('name', ['FingerSpin', 'BallInCup'])
def test_reset_states_are_contact_free(name):
  """roxie's vectorised rejection leaves no contact, as the suite's loop."""
  task = TASKS[name]
  model = task.load_model()
  data = mujoco.MjData(model)
  qpos, _, _ = _roxie_inits(task, n=300, seed=3)
  for q in qpos:
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    assert data.ncon == 0, q


def test_contact_predicates_agree_with_mujoco():
  """The geometric contact tests used at reset agree with MuJoCo's ncon."""
  rng = np.random.default_rng(0)
  n = 1500
  # Finger: any joint angles.
  model = TASKS['FingerSpin'].load_model()
  c = roxie_finger._consts(model)  # pylint: disable=protected-access
  data = mujoco.MjData(model)
  qpos = np.stack([rng.uniform(*model.jnt_range[0], n),
                   rng.uniform(*model.jnt_range[1], n),
                   rng.uniform(-np.pi, np.pi, n)], axis=1)
  ours = np.asarray(jax.jit(jax.vmap(
      lambda q: roxie_finger._fingertip_touches_spinner(q, c)))(qpos))  # pylint: disable=protected-access
  theirs = []
  for q in qpos:
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    theirs.append(data.ncon > 0)
  assert 0.03 < ours.mean() < 0.3
  np.testing.assert_array_equal(ours, theirs)
  # Ball in cup: ball anywhere around the cup at rest.
  model = TASKS['BallInCup'].load_model()
  c = roxie_ball_in_cup._consts(model)  # pylint: disable=protected-access
  data = mujoco.MjData(model)
  ball = np.stack([rng.uniform(-0.2, 0.2, n), rng.uniform(0.2, 0.5, n)], 1)
  ours = np.asarray(jax.jit(jax.vmap(
      lambda q: roxie_ball_in_cup._penetrates_cup(q + c['ball_offset'], c)))(  # pylint: disable=protected-access
          ball))
  theirs = []
  for q in ball:
    data.qpos[:] = [0, 0, *q]
    mujoco.mj_forward(model, data)
    theirs.append(data.ncon > 0)
  assert 0.05 < ours.mean() < 0.4
  np.testing.assert_array_equal(ours, theirs)


# ---------------------------------------------------------------------------
# MJX: the finger's touch sensors, the only sensors these tasks read.


@pytest.mark.slow  # Compiling mjx.forward takes ~30 s on 2 cores.
def test_mjx_touch_sensors_match_mujoco():
  """MJX ('jax' impl) computes the finger's touch sensors as MuJoCo does."""
  from mujoco import mjx  # pylint: disable=g-import-not-at-top
  task = TASKS['FingerSpin']
  model = task.load_model()
  c = task.consts(model)
  data = mujoco.MjData(model)
  rng = np.random.default_rng(1)
  states, ref = [], []
  while len(states) < 6:
    data.qpos[:] = [rng.uniform(*model.jnt_range[0]),
                    rng.uniform(*model.jnt_range[1]), rng.uniform(-4, 4)]
    data.qvel[:] = rng.normal(0, 1, 3)
    data.ctrl[:] = rng.uniform(-1, 1, 2)
    mujoco.mj_forward(model, data)
    # Mostly contacting states, one free one.
    if (data.sensordata[c['touch']].sum() > 0) != (len(states) == 0):
      states.append((data.qpos.copy(), data.qvel.copy(), data.ctrl.copy()))
      ref.append(np.log1p(data.sensordata[c['touch']]))
  mx = mjx.put_model(model, impl='jax')

  @jax.jit
  @jax.vmap
  def touch(qpos, qvel, ctrl):
    d = mjx.make_data(mx, impl='jax').replace(qpos=qpos, qvel=qvel, ctrl=ctrl)
    d = mjx.forward(mx, d)
    return jnp.log1p(d.sensordata[c['touch']])

  # MJX itself relies on rank promotion, which conftest makes an error.
  with jax.numpy_rank_promotion('allow'):
    out = touch(*[np.stack(x).astype(np.float32) for x in zip(*states)])
  # Contact forces come from an iterative solver in float32: close, not
  # bitwise.
  np.testing.assert_allclose(out, np.stack(ref), rtol=1e-3, atol=1e-3)
