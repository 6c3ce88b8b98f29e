"""roxie's locomotion tasks against dm_control's suite.

Covers cheetah, walker, hopper, humanoid, swimmer (6 links) and fish (swim).
For each task, random physics states (and per-episode targets) are written
into a dm_control suite environment's physics, followed by
`physics.forward()`; roxie's observation and reward, run under `jax.jit` and
`jax.vmap` on views built from float32 copies of dm_control's MjData, must
equal the suite's. Timing, model and observation sizes are compared with the
suite's environments, and the reset distribution with the suite's own resets
(ranges, and two-sample Kolmogorov-Smirnov tests per coordinate). For the
sensors the tasks read from `sensordata`, a view from `mjx.forward` must give
the observation and reward that MuJoCo's gives (the MJX backend relies on it).
"""

import functools
import math
import zlib

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx
import numpy as np
import pytest
from scipy import stats

from dm_control import suite

from roxie.envs.task import flatten_observation
from roxie.envs.tasks import TASKS, get_task
from roxie.envs.tasks import humanoid as roxie_humanoid

NAMES = {
    'CheetahRun': ('cheetah', 'run'),
    'WalkerStand': ('walker', 'stand'),
    'WalkerWalk': ('walker', 'walk'),
    'WalkerRun': ('walker', 'run'),
    'HopperStand': ('hopper', 'stand'),
    'HopperHop': ('hopper', 'hop'),
    'HumanoidStand': ('humanoid', 'stand'),
    'HumanoidWalk': ('humanoid', 'walk'),
    'HumanoidRun': ('humanoid', 'run'),
    'SwimmerSwimmer6': ('swimmer', 'swimmer6'),
    'FishSwim': ('fish', 'swim'),
}
OBS_SIZES = {
    'CheetahRun': 17, 'WalkerStand': 24, 'WalkerWalk': 24, 'WalkerRun': 24,
    'HopperStand': 15, 'HopperHop': 15, 'HumanoidStand': 67,
    'HumanoidWalk': 67, 'HumanoidRun': 67, 'SwimmerSwimmer6': 25,
    'FishSwim': 24,
}

N_STATES = 24      # random states per task for observation/reward
N_INIT = 1000      # roxie reset samples per task
N_DMC_INIT = 300   # dm_control reset samples per task
ATOL = RTOL = 1e-5

_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)
_SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)


def _env(name, seed=0):
  domain, task = NAMES[name]
  return suite.load(domain, task, task_kwargs={'random': seed})


def _target_geom(physics):
  return physics.model.name2id('target', 'geom')


def _random_state(rng, physics):
  """Writes a random qpos, qvel and ctrl into `physics` (not forwarded).

  Joints are drawn over their whole ranges (unlimited hinges over a full
  turn, free joints with uniform random orientations), unlimited slides and
  free positions over spans that cross the tasks' height and contact
  thresholds, and velocities at random scales so that speed terms go from 0
  to beyond their targets.
  """
  m, d = physics.model, physics.data
  qpos = m.qpos0.copy()
  for j in range(m.njnt):
    adr, kind = m.jnt_qposadr[j], int(m.jnt_type[j])
    if kind == _FREE:
      qpos[adr:adr + 3] = rng.uniform([-1, -1, 0.1], [1, 1, 1.8])
      quat = rng.normal(size=4)
      qpos[adr + 3:adr + 7] = quat / np.linalg.norm(quat)
    elif m.jnt_limited[j]:
      qpos[adr] = rng.uniform(*m.jnt_range[j])
    elif kind == _HINGE:
      qpos[adr] = rng.uniform(-np.pi, np.pi)
    else:
      qpos[adr] = rng.uniform(-0.5, 0.5)
  d.qpos[:] = qpos
  d.qvel[:] = rng.normal(size=m.nv) * rng.uniform(0.3, 8.0)
  low, high = m.actuator_ctrlrange.T
  d.ctrl[:] = rng.uniform(low, high)
  if m.nsite and 'touch_toe' in physics.named.data.site_xpos.axes.row.names:
    if rng.random() < 0.6:
      # The hopper: lower it until its lower foot end is within the foot's
      # radius (4 cm) of the floor, so that the touch sensors fire.
      physics.forward()
      low_z = physics.named.data.site_xpos[['touch_toe', 'touch_heel'],
                                           'z'].min()
      physics.named.data.qpos['rootz'] -= low_z - rng.uniform(0.0, 0.05)


def _random_task_state(rng, name, physics):
  """Draws the per-episode target and writes it where the suite keeps it."""
  if name == 'SwimmerSwimmer6':
    target = rng.uniform(-2, 2, size=2)
    physics.model.geom_pos[_target_geom(physics), :2] = target
    return target
  if name == 'FishSwim':
    target = rng.uniform([-0.4, -0.4, 0.1], [0.4, 0.4, 0.3])
    physics.model.geom_pos[_target_geom(physics)] = target
    return target
  return np.zeros(0)


def _task_state_of(name, physics):
  """roxie's task state for the suite's current episode."""
  pos = physics.model.geom_pos
  if name == 'SwimmerSwimmer6':
    return pos[_target_geom(physics), :2].copy()
  if name == 'FishSwim':
    return pos[_target_geom(physics)].copy()
  return np.zeros(0)


def _view(data, fields, like=None):
  """Float32 copies of fields of `data`, shaped as in the MjData `like`.

  MJX keeps rotation matrices as [n, 3, 3]; MjData, and so views, flat rows.
  """
  like = data if like is None else like
  return {f: np.asarray(getattr(data, f), np.float32).reshape(
      np.shape(getattr(like, f))) for f in fields}


def _batched_task_fns(task, consts):
  """jit(vmap) of (observation parts, flat observation, reward).

  The flat observation is concatenated inside the trace, where the parts
  keep the task's order (a dict that leaves `jax.jit` has sorted keys).
  """
  def fn(view, state):
    obs = task.observe(view, state, consts)
    return obs, flatten_observation(obs), task.reward(view, state, consts)
  return jax.jit(jax.vmap(fn))


def test_registry_has_every_task_under_its_name():
  for name, (domain, dmc_task) in NAMES.items():
    task = TASKS[name]
    assert (task.name, task.domain, task.dmc_task) == (name, domain, dmc_task)
    assert task.terminate is None


@pytest.mark.parametrize('name', list(NAMES))
def test_timing_model_and_sizes_agree_with_dm_control(name):
  task, env = get_task(name), _env(name)
  model, theirs = task.load_model(), env.physics.model
  assert task.control_timestep == pytest.approx(env.control_timestep())
  # The suite's time limit over its control timestep.
  step_limit = env._step_limit  # pylint: disable=protected-access
  assert task.episode_length == math.ceil(step_limit - 1e-9)
  assert task.n_substeps(model) == env._n_sub_steps  # pylint: disable=protected-access
  assert model.opt.timestep == theirs.opt.timestep
  for size in ('nq', 'nv', 'nu', 'nbody', 'ngeom', 'nsensordata'):
    assert getattr(model, size) == getattr(theirs, size), size
  np.testing.assert_array_equal(model.actuator_ctrlrange,
                                theirs.actuator_ctrlrange)
  spec = env.observation_spec()
  assert sum(int(np.prod(s.shape)) for s in spec.values()) == OBS_SIZES[name]
  for field in task.fields:
    assert hasattr(mujoco.MjData(model), field), field


@pytest.mark.parametrize('name', list(NAMES))
def test_observation_and_reward_match_dm_control(name):
  task, env = get_task(name), _env(name)
  physics = env.physics
  consts = task.consts(task.load_model())
  # A stable per-task seed (Python's str hash is salted).
  rng = np.random.default_rng(zlib.crc32(name.encode()))
  views, states, ref_obs, ref_reward = [], [], [], []
  for _ in range(N_STATES):
    _random_state(rng, physics)
    states.append(_random_task_state(rng, name, physics))
    physics.forward()
    views.append(_view(physics.data, task.fields))
    ref_obs.append(env.task.get_observation(physics))
    ref_reward.append(env.task.get_reward(physics))
  batch = {f: np.stack([v[f] for v in views]) for f in task.fields}
  obs, flat, reward = _batched_task_fns(task, consts)(
      batch, jnp.asarray(np.stack(states), jnp.float32))

  # The parts, in dm_control's order (as observe returns them, unjitted).
  first = {f: v[0] for f, v in batch.items()}
  assert list(task.observe(first, jnp.asarray(states[0], jnp.float32),
                           consts)) == list(ref_obs[0])
  for key in obs:
    ours = np.asarray(obs[key])
    assert ours.shape[1:] == np.shape(ref_obs[0][key]), key
    np.testing.assert_allclose(ours, np.stack([o[key] for o in ref_obs]),
                               rtol=RTOL, atol=ATOL, err_msg=key)
  assert reward.shape == (N_STATES,) and reward.dtype == jnp.float32
  np.testing.assert_allclose(reward, ref_reward, rtol=RTOL, atol=ATOL)
  assert flat.shape == (N_STATES, OBS_SIZES[name])
  np.testing.assert_allclose(
      flat, [np.concatenate([np.ravel(v) for v in o.values()])
             for o in ref_obs], rtol=RTOL, atol=ATOL)
  # The states exercise the reward, not just one flat part of it.
  assert np.ptp(ref_reward) > 0.05, ref_reward
  if task.domain == 'hopper':
    touching = (np.stack([o['touch'] for o in ref_obs]) > 0).any(axis=1)
    assert touching.sum() >= 3


@functools.lru_cache(maxsize=None)
def _batched_init(name):
  """jit(vmap(init)) of a task, compiled once per test session."""
  task = get_task(name)
  consts = task.consts(task.load_model())
  return jax.jit(jax.vmap(lambda k: task.init(k, consts)))


def _roxie_inits(task, n, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), n)
  qpos, qvel, state = _batched_init(task.name)(keys)
  return np.asarray(qpos), np.asarray(qvel), np.asarray(state)


def _dmc_inits(name, n):
  """The suite's reset qpos and task states.

  For the cheetah, the reset's 200 settling steps are skipped (roxie does not
  reproduce them; see roxie/envs/tasks/cheetah.py), so its drawn pose is
  compared.
  """
  env = _env(name, seed=1)
  if name == 'CheetahRun':
    env.physics.step = lambda nstep=1: None
  qpos, states = [], []
  for _ in range(n):
    env.reset()
    qpos.append(env.physics.data.qpos.copy())
    states.append(_task_state_of(name, env.physics))
  return np.stack(qpos), np.stack(states)


# One task per model suffices: the tasks of a domain share their reset.
_RESET_TASKS = ['CheetahRun', 'WalkerWalk', 'HopperHop', 'HumanoidWalk',
                'SwimmerSwimmer6', 'FishSwim']


@pytest.mark.parametrize('name', _RESET_TASKS)
def test_reset_distribution_matches_dm_control(name):
  task = get_task(name)
  qpos, qvel, state = _roxie_inits(task, N_INIT)
  model = task.load_model()
  assert qpos.shape == (N_INIT, model.nq) and qpos.dtype == np.float32
  assert qvel.shape == (N_INIT, model.nv) and qvel.dtype == np.float32
  assert state.shape == (N_INIT, task.task_state_size)
  assert state.dtype == np.float32
  np.testing.assert_array_equal(qvel, 0)

  theirs, their_state = _dmc_inits(name, N_DMC_INIT)
  ours = np.concatenate([qpos, state], axis=1)
  theirs = np.concatenate([theirs, their_state], axis=1)
  for i in range(ours.shape[1]):
    if np.ptp(theirs[:, i]) == 0:  # A coordinate the suite does not draw.
      np.testing.assert_allclose(ours[:, i], theirs[0, i], atol=1e-6)
      continue
    p = stats.ks_2samp(ours[:, i], theirs[:, i]).pvalue
    assert p > 1e-4, (i, p)


@pytest.mark.parametrize('name', _RESET_TASKS)
def test_reset_ranges(name):
  """Every drawn coordinate lies in the suite's range for it."""
  task = get_task(name)
  model = task.load_model()
  qpos, _, state = _roxie_inits(task, N_INIT, seed=1)
  for j in range(model.njnt):
    adr, kind = model.jnt_qposadr[j], int(model.jnt_type[j])
    if kind == _FREE:
      quat = qpos[:, adr + 3:adr + 7]
      np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1, atol=1e-5)
      np.testing.assert_allclose(qpos[:, adr:adr + 3],
                                 np.broadcast_to(model.qpos0[adr:adr + 3],
                                                 (N_INIT, 3)), atol=1e-6)
      if name == 'HumanoidWalk':  # The suite normalises 4 U[0, 1) draws.
        assert (quat >= 0).all()
      continue
    q = qpos[:, adr]
    if name == 'FishSwim':
      bound = 0.2
      assert (np.abs(q) <= bound).all() and np.ptp(q) > 1.6 * bound
    elif model.jnt_limited[j]:
      low, high = model.jnt_range[j]
      assert ((q >= low - 1e-6) & (q <= high + 1e-6)).all()
      assert np.ptp(q) > 0.9 * (high - low)
    elif kind == _HINGE and name != 'CheetahRun':
      assert (np.abs(q) <= np.pi + 1e-6).all() and np.ptp(q) > 0.9 * 2 * np.pi
    else:  # Not drawn: unlimited slides, and the cheetah's root.
      np.testing.assert_array_equal(q, model.qpos0[adr])
  if name == 'SwimmerSwimmer6':
    assert (np.abs(state) <= 2).all()
    close = (np.abs(state) <= 0.3).all(axis=1).mean()
    # P(close box) + P(far box) * P(far draw lands in the close square).
    assert abs(close - (0.2 + 0.8 * 0.15 ** 2)) < 0.05
  if name == 'FishSwim':
    assert ((state >= [-0.4, -0.4, 0.1]) & (state <= [0.4, 0.4, 0.3])).all()


def test_humanoid_resets_are_contact_free():
  task = get_task('HumanoidWalk')
  model = task.load_model()
  data = mujoco.MjData(model)
  qpos, _, _ = _roxie_inits(task, N_INIT, seed=2)
  for q in qpos[:200]:
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    assert data.ncon == 0


def test_humanoid_contact_detector_agrees_with_mujoco():
  """roxie's reset-time contact test against MuJoCo's `ncon > 0`."""
  task = get_task('HumanoidWalk')
  model = task.load_model()
  consts = task.consts(model)
  data = mujoco.MjData(model)
  rng = np.random.default_rng(0)
  keys = jax.random.split(jax.random.PRNGKey(3), 400)
  poses = np.array(jax.jit(jax.vmap(
      lambda k: roxie_humanoid.randomize_limited_and_rotational_joints(
          k, consts)))(keys))
  # Half at the suite's start height, half lower so the floor is touched.
  poses[200:, 2] = rng.uniform(0.2, 1.4, 200)
  # pylint: disable=protected-access
  ours = np.asarray(jax.jit(jax.vmap(
      lambda q: roxie_humanoid._penetrating(q, consts)))(poses))
  body_poses = jax.jit(lambda q: roxie_humanoid._body_poses(q, consts))
  # pylint: enable=protected-access
  theirs = []
  for i, q in enumerate(poses):
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    theirs.append(data.ncon > 0)
    if i % 40 == 0:  # The detector's forward kinematics, on a few poses.
      xpos, xmat = body_poses(q)
      np.testing.assert_allclose(xpos, data.xpos, atol=1e-5)
      np.testing.assert_allclose(np.reshape(xmat, (-1, 9)), data.xmat,
                                 atol=1e-5)
  theirs = np.array(theirs)
  assert 0.1 < theirs[:200].mean() < 0.5  # Both outcomes are exercised.
  np.testing.assert_array_equal(ours, theirs)


def _mjx_case(name, seed=0):
  """MuJoCo's and MJX's views of one random state, with a task state."""
  task, env = get_task(name), _env(name)
  physics = env.physics
  rng = np.random.default_rng(seed)
  for _ in range(100):
    _random_state(rng, physics)
    state = _random_task_state(rng, name, physics)
    physics.forward()
    # For the hopper, a state whose feet touch the floor.
    if task.domain != 'hopper' or (physics.named.data.sensordata[
        ['touch_toe', 'touch_heel']] > 0).any():
      break
  model = task.load_model()
  data = mujoco.MjData(model)
  data.qpos[:], data.qvel[:] = physics.data.qpos, physics.data.qvel
  data.ctrl[:] = physics.data.ctrl
  mujoco.mj_forward(model, data)
  # MJX's internals broadcast implicitly; the tests' strict setting is for
  # roxie's code.
  with jax.numpy_rank_promotion('allow'):
    mjx_data = jax.jit(mjx.forward)(mjx.put_model(model),
                                    mjx.put_data(model, data))
  return (task, task.consts(model), _view(data, task.fields),
          _view(mjx_data, task.fields, data), jnp.asarray(state, jnp.float32))


# The tasks that read `sensordata`. The hopper's (subtree linear velocity,
# touch) and the swimmer's (frame position and axes, velocimeter, gyro) cover
# every sensor type read; the others read only the subtree linear velocity,
# and an MJX compile costs ~20 s on two busy cores, so they are `slow`.
@pytest.mark.parametrize('name', [
    'HopperHop', 'SwimmerSwimmer6',
    pytest.param('CheetahRun', marks=pytest.mark.slow),
    pytest.param('WalkerWalk', marks=pytest.mark.slow),
    pytest.param('HumanoidWalk', marks=pytest.mark.slow)])
def test_mjx_sensors_give_mujocos_observation(name):
  """A view from `mjx.forward` gives MuJoCo's observation and reward.

  Both compute every sensor stage at the given state (the touch sensors too),
  so this compares MJX's sensor code with MuJoCo's, not step semantics.
  """
  task, consts, view, mjx_view, state = _mjx_case(name)
  fn = jax.jit(lambda v: (task.observe(v, state, consts),
                          task.reward(v, state, consts)))
  obs, reward = fn(view)
  mjx_obs, mjx_reward = fn(mjx_view)
  for key in obs:
    np.testing.assert_allclose(mjx_obs[key], obs[key], rtol=1e-4, atol=1e-4,
                               err_msg=key)
  np.testing.assert_allclose(mjx_reward, reward, rtol=1e-4, atol=1e-4)
  if task.domain == 'hopper':
    assert (obs['touch'] > 0).any()


@pytest.mark.parametrize('name', _RESET_TASKS)
def test_mjx_accepts_the_model(name):
  with jax.numpy_rank_promotion('allow'):
    mjx.put_model(get_task(name).load_model())


@pytest.mark.parametrize('name', ['SwimmerSwimmer6', 'FishSwim'])
def test_model_without_collisions_steps_as_the_suites(name):
  """Clearing collision bits (for MJX) leaves MuJoCo's dynamics unchanged."""
  task, env = get_task(name), _env(name)
  physics = env.physics
  model = task.load_model()
  data = mujoco.MjData(model)
  rng = np.random.default_rng(1)
  _random_state(rng, physics)
  data.qpos[:], data.qvel[:] = physics.data.qpos, physics.data.qvel
  data.ctrl[:] = physics.data.ctrl
  for _ in range(50):
    mujoco.mj_step(physics.model.ptr, physics.data.ptr)
    mujoco.mj_step(model, data)
  np.testing.assert_array_equal(data.qpos, physics.data.qpos)
  np.testing.assert_array_equal(data.qvel, physics.data.qvel)
