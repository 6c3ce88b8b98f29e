"""Planar two-link reacher (dm_control suite `reacher`).

The fingertip of a two-link arm must touch a target sphere placed at random
each episode. `ReacherEasy` and `ReacherHard` differ only in the target's
radius (5 cm vs 1.5 cm); the reward is 1 while the fingertip sphere overlaps
the target, else 0.

The suite moves the target by writing the model's `geom_pos` (and sets its
radius in `geom_size`). Model fields are not per-environment on a batched
backend, so here the target's (x, y) lives in `task_state` [2] and its radius
is a task constant; contacts are disabled in this model, so the target geom
never influences the dynamics and leaving it at the model origin is harmless
(only a rendering would show it in the wrong place).

Fields read from the view, and why:
- `qpos`, `qvel`: the joint angles and velocities, observed as they are.
- `geom_xpos`: the fingertip geom's world position, for the vector to the
  target.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id

_BIG_TARGET = 0.05
_SMALL_TARGET = 0.015
# The target's distance from the arm's base is uniform in this range.
_TARGET_RADIUS_RANGE = (0.05, 0.20)


def _consts(model):
  """Joint sampling ranges and the fingertip geom."""
  finger = name2id(model, mujoco.mjtObj.mjOBJ_GEOM, 'finger')
  # Limited hinges are sampled within their range, unlimited ones in
  # [-pi, pi], as the suite's joint randomiser does.
  low = np.full(model.njnt, -np.pi)
  high = np.full(model.njnt, np.pi)
  for j in range(model.njnt):
    if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
      raise ValueError('reacher: expected hinge joints only.')
    if model.jnt_limited[j]:
      low[j], high[j] = model.jnt_range[j]
  return {
      'finger': finger,
      'finger_radius': float(model.geom_size[finger, 0]),
      'joint_qpos': np.asarray(model.jnt_qposadr),
      'joint_low': low.astype(np.float32),
      'joint_high': high.astype(np.float32),
      'qpos0': np.asarray(model.qpos0, np.float32),
      'nv': int(model.nv),
  }


def _init(key, c):
  """Random joint angles (arm at rest) and a random target in an annulus."""
  k_joints, k_angle, k_radius = jax.random.split(key, 3)
  angles = jax.random.uniform(k_joints, c['joint_low'].shape,
                              minval=c['joint_low'], maxval=c['joint_high'])
  qpos = jnp.asarray(c['qpos0']).at[c['joint_qpos']].set(angles)
  angle = jax.random.uniform(k_angle, (), minval=0.0, maxval=2 * jnp.pi)
  radius = jax.random.uniform(k_radius, (), minval=_TARGET_RADIUS_RANGE[0],
                              maxval=_TARGET_RADIUS_RANGE[1])
  # The suite measures the angle from the y-axis: x = r sin, y = r cos.
  target = jnp.stack([radius * jnp.sin(angle), radius * jnp.cos(angle)])
  return qpos, jnp.zeros((c['nv'],)), target


def _to_target(view, task_state, c):
  """Planar vector from the fingertip to the target."""
  return task_state - view['geom_xpos'][c['finger'], :2]


def _observe(view, task_state, c):
  return {
      'position': view['qpos'],
      'to_target': _to_target(view, task_state, c),
      'velocity': view['qvel'],
  }


def _make_reward(target_size):
  """1 while the fingertip and target spheres overlap (centre distance)."""

  def reward(view, task_state, c):
    distance = jnp.linalg.norm(_to_target(view, task_state, c))
    return rewards.tolerance(distance,
                             (0.0, target_size + c['finger_radius']))

  return reward


def _task(name, dmc_task, target_size):
  return Task(
      name=name, domain='reacher', dmc_task=dmc_task,
      load_model=lambda: dm_control_model('reacher'),
      # One physics step (0.02 s) per control, for 20 s.
      control_timestep=0.02, episode_length=1000,
      fields=('qpos', 'qvel', 'geom_xpos'), consts=_consts, init=_init,
      observe=_observe, reward=_make_reward(target_size), task_state_size=2)


TASKS = {
    'ReacherEasy': _task('ReacherEasy', 'easy', _BIG_TARGET),
    'ReacherHard': _task('ReacherHard', 'hard', _SMALL_TARGET),
}
