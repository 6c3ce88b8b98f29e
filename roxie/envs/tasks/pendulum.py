"""Pendulum swing-up (dm_control suite `pendulum`)."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id

# The pole counts as upright within 8 degrees of vertical.
_COS_BOUND = float(np.cos(np.deg2rad(8.0)))


def _consts(model):
  return {
      'pole': name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'pole'),
      'hinge_qpos': model.jnt_qposadr[
          name2id(model, mujoco.mjtObj.mjOBJ_JOINT, 'hinge')],
      'hinge_qvel': model.jnt_dofadr[
          name2id(model, mujoco.mjtObj.mjOBJ_JOINT, 'hinge')],
      'nq': model.nq,
      'nv': model.nv,
  }


def _init(key, c):
  angle = jax.random.uniform(key, (), minval=-jnp.pi, maxval=jnp.pi)
  qpos = jnp.zeros(c['nq']).at[c['hinge_qpos']].set(angle)
  return qpos, jnp.zeros(c['nv']), jnp.zeros((0,))


def _observe(view, task_state, c):
  del task_state
  xmat = view['xmat'][c['pole']]
  return {
      'orientation': jnp.stack([xmat[8], xmat[2]]),  # zz, xz
      'velocity': view['qvel'][c['hinge_qvel']][None],
  }


def _reward(view, task_state, c):
  del task_state
  return rewards.tolerance(view['xmat'][c['pole'], 8], (_COS_BOUND, 1.0))


TASKS = {
    'PendulumSwingup': Task(
        name='PendulumSwingup', domain='pendulum', dmc_task='swingup',
        load_model=lambda: dm_control_model('pendulum'),
        control_timestep=0.02, episode_length=1000,
        fields=('qvel', 'xmat'), consts=_consts, init=_init,
        observe=_observe, reward=_reward),
}
