"""Planar point mass (dm_control suite `point_mass`, task `easy`).

A small sphere on two slide joints, pushed through two tendons, must reach a
target at the arena's centre; the reward is smooth in the distance and
lightly penalises control. (The suite's `hard` variant, which randomises the
actuation directions, is not registered.)

Fields read from the view, and why:
- `qpos`: the observation's `position`, and the reward. The mass slides on
  world-aligned x and y joints from a body at the target's height, so its
  vector to the (static) target is the target's (x, y) minus the joint
  positions: exactly the suite's geom_xpos difference.
- `qvel`: the observation's `velocity`.
- `ctrl`: the control penalty.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id


def _consts(model):
  """Joint addresses and ranges, and the target relative to the mass."""
  geom = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n)
  body = name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'pointmass')
  mass, target = geom('pointmass'), geom('target')
  joints = [name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)
            for n in ('root_x', 'root_y')]
  for j, axis in zip(joints, ([1, 0, 0], [0, 1, 0])):
    if (model.jnt_type[j] != mujoco.mjtJoint.mjJNT_SLIDE
        or not model.jnt_limited[j]
        or not np.allclose(model.jnt_axis[j], axis)):
      raise ValueError('point_mass: unexpected joint layout.')
  if (model.body_parentid[body] != 0 or model.geom_bodyid[target] != 0
      or not np.allclose(model.body_quat[body], [1, 0, 0, 0])
      or not np.allclose(model.geom_pos[mass], 0)):
    raise ValueError('point_mass: unexpected body tree.')
  # Target minus mass, with the joints at zero.
  offset = model.geom_pos[target] - model.body_pos[body]
  return {
      'qpos': np.array([model.jnt_qposadr[j] for j in joints]),
      'low': np.asarray(model.jnt_range[joints, 0], np.float32),
      'high': np.asarray(model.jnt_range[joints, 1], np.float32),
      'target_offset': np.asarray(offset, np.float32),
      'target_size': float(model.geom_size[target, 0]),
      'qpos0': np.asarray(model.qpos0, np.float32),
      'nv': int(model.nv),
  }


def _init(key, c):
  """Both slides uniform within their limits; the mass at rest."""
  xy = jax.random.uniform(key, c['low'].shape, minval=c['low'],
                          maxval=c['high'])
  qpos = jnp.asarray(c['qpos0']).at[c['qpos']].set(xy)
  return qpos, jnp.zeros((c['nv'],)), jnp.zeros((0,), jnp.float32)


def _observe(view, task_state, c):
  del task_state, c
  return {'position': view['qpos'], 'velocity': view['qvel']}


def _reward(view, task_state, c):
  del task_state
  xy = view['qpos'][c['qpos']]
  to_target = c['target_offset'] - jnp.concatenate([xy, jnp.zeros((1,))])
  size = c['target_size']
  near_target = rewards.tolerance(jnp.linalg.norm(to_target),
                                  bounds=(0.0, size), margin=size)
  control = rewards.tolerance(view['ctrl'], margin=1.0, value_at_margin=0.0,
                              sigmoid='quadratic').mean()
  return near_target * (control + 4.0) / 5.0


TASKS = {
    # One physics step (0.02 s) per control, for 20 s.
    'PointMass': Task(
        name='PointMass', domain='point_mass', dmc_task='easy',
        load_model=lambda: dm_control_model('point_mass'),
        control_timestep=0.02, episode_length=1000,
        fields=('qpos', 'qvel', 'ctrl'), consts=_consts, init=_init,
        observe=_observe, reward=_reward),
}
