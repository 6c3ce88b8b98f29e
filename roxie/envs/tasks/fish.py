"""Fish swimming to a target (dm_control suite `fish`, swim).

A 3D fish in a fluid, without gravity, rewarded for bringing its mouth into a
target sphere drawn at reset and, less, for keeping upright.

The target: the suite moves the model's `target` geom at every reset. Here the
model is shared and constant, so the target's world position is the task
state `[x, y, z]` ([3]); the geom is a child of the world, so that position
is what the suite reads back from `geom_xpos`. Constraints are disabled in
this model and the geom is massless, so its position has no effect on the
physics.

Fields read: `qpos` (fin and tail angles), `qvel` (all velocities), `xmat`
(the torso's z-z entry for uprightness) and `geom_xpos`/`geom_xmat` (the
mouth's position and frame, in which the target is observed). No sensor.
"""

import copy

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id

_JOINTS = ('tail1', 'tail_twist', 'tail2', 'finright_roll', 'finright_pitch',
           'finleft_roll', 'finleft_pitch')
# Joint angles at reset are uniform in [-_JOINT_BOUND, _JOINT_BOUND].
_JOINT_BOUND = 0.2
_TARGET_LOW = np.array([-0.4, -0.4, 0.1], np.float32)
_TARGET_HIGH = np.array([0.4, 0.4, 0.3], np.float32)


def _load_model():
  """The suite's model, with every geom's collision bits cleared.

  The dynamics are unchanged: constraints are disabled in this model, so
  contacts exert no force. But `mjx.put_model` rejects the model as shipped,
  since it has ellipsoid-box geom pairs, for which MJX has no collision
  function, whether or not contacts count; with no colliding pair it accepts
  it. tests/envs/test_suite_locomotion.py checks
  that MuJoCo steps this model exactly as the suite's.
  """
  model = copy.deepcopy(dm_control_model('fish'))
  model.geom_contype[:] = 0
  model.geom_conaffinity[:] = 0
  return model


def _consts(model):
  root = name2id(model, mujoco.mjtObj.mjOBJ_JOINT, 'root')
  mouth = name2id(model, mujoco.mjtObj.mjOBJ_GEOM, 'mouth')
  target = name2id(model, mujoco.mjtObj.mjOBJ_GEOM, 'target')
  return {
      'joints': np.array([
          model.jnt_qposadr[name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j)]
          for j in _JOINTS]),
      'root_quat': int(model.jnt_qposadr[root]) + 3,
      'torso': name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'torso'),
      'mouth': mouth,
      'radii': float(model.geom_size[mouth, 0] + model.geom_size[target, 0]),
      'qpos0': model.qpos0.astype(np.float32),
      'nv': model.nv,
  }


def _init(key, c):
  quat_key, joint_key, target_key = jax.random.split(key, 3)
  quat = jax.random.normal(quat_key, (4,))
  qpos = jnp.asarray(c['qpos0'])
  qpos = qpos.at[c['root_quat']:c['root_quat'] + 4].set(
      quat / jnp.linalg.norm(quat))
  qpos = qpos.at[c['joints']].set(jax.random.uniform(
      joint_key, (len(_JOINTS),), minval=-_JOINT_BOUND, maxval=_JOINT_BOUND))
  target = jax.random.uniform(target_key, (3,), minval=_TARGET_LOW,
                              maxval=_TARGET_HIGH)
  return qpos, jnp.zeros(c['nv']), target


def _mouth_to_target(view, target, c):
  """Mouth-to-target vector in the mouth's frame."""
  frame = view['geom_xmat'][c['mouth']].reshape(3, 3)
  # Full float32: GPUs may otherwise run float32 matmuls in TF32.
  return jnp.matmul(target - view['geom_xpos'][c['mouth']], frame,
                    precision=jax.lax.Precision.HIGHEST)


def _observe(view, task_state, c):
  return {
      'joint_angles': view['qpos'][c['joints']],
      'upright': view['xmat'][c['torso'], 8],
      'target': _mouth_to_target(view, task_state, c),
      'velocity': view['qvel'],
  }


def _reward(view, task_state, c):
  distance = jnp.linalg.norm(_mouth_to_target(view, task_state, c))
  in_target = rewards.tolerance(distance, bounds=(0.0, c['radii']),
                                margin=2 * c['radii'])
  is_upright = 0.5 * (view['xmat'][c['torso'], 8] + 1.0)
  return (7.0 * in_target + is_upright) / 8.0


TASKS = {
    'FishSwim': Task(
        name='FishSwim', domain='fish', dmc_task='swim',
        load_model=_load_model,
        control_timestep=0.04, episode_length=1000,
        fields=('qpos', 'qvel', 'xmat', 'geom_xpos', 'geom_xmat'),
        consts=_consts, init=_init, observe=_observe, reward=_reward,
        task_state_size=3),
}
