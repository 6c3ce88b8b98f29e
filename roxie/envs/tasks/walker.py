"""Planar walker: stand, walk and run (dm_control suite `walker`).

A 2D biped of seven bodies. The reward multiplies a standing term (torso
height and uprightness) by, for walk and run, a forward-speed term on the
centre of mass.

Fields read: `qvel` (velocity observation), `xmat` (planar orientations of all
bodies, and the torso's z-z entry for uprightness), `xpos` (torso height) and
`sensordata` (the model's one sensor, `torso_subtreelinvel`, whose x component
is the centre-of-mass speed, read by walk and run only; MJX computes it as
MuJoCo does, which tests/envs/test_suite_locomotion.py checks).

This module also holds two helpers that the other locomotion domains share:
`randomizer_consts` / `randomize_limited_and_rotational_joints`, the suite's
joint randomisation in JAX, and `sensor_adr`.
"""

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id

_STAND_HEIGHT = 1.2
_WALK_SPEED = 1.0
_RUN_SPEED = 8.0

# Joint types as plain ints: `np.int32(3) in (mjtJoint.mjJNT_HINGE,)` is False
# (the enum's own == rejects NumPy ints), which silently skips branches.
_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_BALL = int(mujoco.mjtJoint.mjJNT_BALL)
_SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)
_HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)


def sensor_adr(model: mujoco.MjModel, name: str) -> int:
  """The first `sensordata` index of the sensor called `name`."""
  return int(model.sensor_adr[name2id(model, mujoco.mjtObj.mjOBJ_SENSOR,
                                      name)])


def randomizer_consts(model: mujoco.MjModel) -> dict:
  """Joint tables for `randomize_limited_and_rotational_joints`.

  Args:
    model: the task's model.

  Returns:
    A dict of NumPy arrays, keys prefixed 'rand_', to merge into a task's
    consts.

  Raises:
    NotImplementedError: the model has a ball joint (no suite task of this
      module's users has one, so that branch is left out rather than
      untested).
  """
  kind, limited = model.jnt_type, model.jnt_limited.astype(bool)
  if (kind == _BALL).any():
    raise NotImplementedError('Ball joints are not randomised here.')
  scalar = (kind == _HINGE) | (kind == _SLIDE)
  # Scalar joints drawn uniformly: limited ones over their range, unlimited
  # hinges over a full turn; unlimited slides keep qpos0.
  drawn = scalar & (limited | (kind == _HINGE))
  low = np.where(limited, model.jnt_range[:, 0], -np.pi)[drawn]
  high = np.where(limited, model.jnt_range[:, 1], np.pi)[drawn]
  free = model.jnt_qposadr[kind == _FREE]
  return {
      'rand_qpos0': model.qpos0.astype(np.float32),
      'rand_scalar_qpos': model.jnt_qposadr[drawn].copy(),
      'rand_low': low.astype(np.float32),
      'rand_high': high.astype(np.float32),
      # qpos indices of the free joints' quaternions, [nfree, 4].
      'rand_quat_qpos': (free[:, None] + np.arange(3, 7)[None]),
  }


def randomize_limited_and_rotational_joints(key, c):
  """Random joint positions with the suite's distribution.

  As `dm_control.suite.utils.randomizers`: a limited hinge or slide is uniform
  over its range; an unlimited hinge is uniform over [-pi, pi]; a free joint
  keeps its position and gets the normalised quaternion of four U[0, 1)
  draws (the suite's choice, kept for fidelity: it is not uniform over
  rotations); an unlimited slide keeps its `qpos0`. (All draws are made at
  once: one random call per joint makes the compile slow.)

  Args:
    key: a JAX PRNG key.
    c: consts holding `randomizer_consts(model)`.

  Returns:
    qpos [nq] float32.
  """
  scalar_key, quat_key = jax.random.split(key)
  qpos = jnp.asarray(c['rand_qpos0'])
  qpos = qpos.at[c['rand_scalar_qpos']].set(jax.random.uniform(
      scalar_key, c['rand_low'].shape, minval=c['rand_low'],
      maxval=c['rand_high']))
  if len(c['rand_quat_qpos']):
    quat = jax.random.uniform(quat_key, c['rand_quat_qpos'].shape)
    qpos = qpos.at[c['rand_quat_qpos']].set(
        quat / jnp.linalg.norm(quat, axis=-1, keepdims=True))
  return qpos


def _consts(model):
  c = randomizer_consts(model)
  c.update(
      torso=name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'torso'),
      com_vel=sensor_adr(model, 'torso_subtreelinvel'),
      nv=model.nv,
  )
  return c


def _init(key, c):
  qpos = randomize_limited_and_rotational_joints(key, c)
  return qpos, jnp.zeros(c['nv']), jnp.zeros((0,))


def _observe(view, task_state, c):
  del task_state
  return {
      # 'xx' and 'xz' of every body but the world.
      'orientations': view['xmat'][1:][:, np.array([0, 2])].ravel(),
      'height': view['xpos'][c['torso'], 2],
      'velocity': view['qvel'],
  }


def _reward(view, task_state, c, *, move_speed):
  del task_state
  standing = rewards.tolerance(view['xpos'][c['torso'], 2],
                               bounds=(_STAND_HEIGHT, float('inf')),
                               margin=_STAND_HEIGHT / 2)
  upright = (1.0 + view['xmat'][c['torso'], 8]) / 2.0
  stand = (3.0 * standing + upright) / 4.0
  if move_speed == 0:
    return stand
  move = rewards.tolerance(view['sensordata'][c['com_vel']],
                           bounds=(move_speed, float('inf')),
                           margin=move_speed / 2, value_at_margin=0.5,
                           sigmoid='linear')
  return stand * (5.0 * move + 1.0) / 6.0


def _task(name, dmc_task, move_speed):
  return Task(
      name=name, domain='walker', dmc_task=dmc_task,
      load_model=lambda: dm_control_model('walker'),
      control_timestep=0.025, episode_length=1000,
      # Standing does not read the centre-of-mass velocity sensor.
      fields=('qvel', 'xpos', 'xmat') + (('sensordata',) if move_speed else ()),
      consts=_consts, init=_init, observe=_observe,
      reward=functools.partial(_reward, move_speed=move_speed))


TASKS = {
    'WalkerStand': _task('WalkerStand', 'stand', 0.0),
    'WalkerWalk': _task('WalkerWalk', 'walk', _WALK_SPEED),
    'WalkerRun': _task('WalkerRun', 'run', _RUN_SPEED),
}
