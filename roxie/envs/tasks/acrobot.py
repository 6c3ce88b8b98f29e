"""Acrobot swing-up (dm_control suite `acrobot`).

A two-link pendulum actuated only at the elbow must bring its tip into a
target sphere above the shoulder. The reward is smooth (`AcrobotSwingup`) or
a 0/1 indicator (`AcrobotSwingupSparse`).

Fields read from the view, and why:
- `xmat`: the two links' orientations ('xz' and 'zz' entries are the sine and
  cosine of each link's absolute angle), as the suite observes them.
- `qvel`: the joint velocities (the observation's `velocity`).
- `site_xpos`: the tip site, for the distance to the target. The target site
  is fixed to the world, so its position is a model constant.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id


def _consts(model):
  """Ids, addresses and the (static) target."""
  body = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_BODY, n)
  site = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_SITE, n)
  joint = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)
  target = site('target')
  if model.site_bodyid[target] != 0:
    raise ValueError('acrobot: the target site is expected on the world body.')
  return {
      'arms': np.array([body('upper_arm'), body('lower_arm')]),
      'tip': site('tip'),
      # A world site sits at its model position.
      'target_pos': np.asarray(model.site_pos[target], np.float32),
      'target_radius': float(model.site_size[target, 0]),
      'joints_qpos': np.array([model.jnt_qposadr[joint('shoulder')],
                               model.jnt_qposadr[joint('elbow')]]),
      'qpos0': np.asarray(model.qpos0, np.float32),
      'nv': int(model.nv),
  }


def _init(key, c):
  """Both joints uniform in [-pi, pi); the arm starts at rest."""
  angles = jax.random.uniform(key, (2,), minval=-jnp.pi, maxval=jnp.pi)
  qpos = jnp.asarray(c['qpos0']).at[c['joints_qpos']].set(angles)
  return qpos, jnp.zeros((c['nv'],)), jnp.zeros((0,), jnp.float32)


def _observe(view, task_state, c):
  del task_state
  xmat = view['xmat'][c['arms']]  # [2, 9]
  return {
      # Horizontal (xz) components of both links' z-axes, then the vertical
      # (zz) ones.
      'orientations': jnp.concatenate([xmat[:, 2], xmat[:, 8]]),
      'velocity': view['qvel'],
  }


def _make_reward(sparse):
  """Tip inside the target sphere; smooth fall-off over 1 m unless sparse."""

  def reward(view, task_state, c):
    del task_state
    distance = jnp.linalg.norm(c['target_pos'] - view['site_xpos'][c['tip']])
    return rewards.tolerance(distance, bounds=(0.0, c['target_radius']),
                             margin=0.0 if sparse else 1.0)

  return reward


def _task(name, dmc_task, sparse):
  return Task(
      name=name, domain='acrobot', dmc_task=dmc_task,
      load_model=lambda: dm_control_model('acrobot'),
      # One physics step (0.01 s) per control, for 10 s.
      control_timestep=0.01, episode_length=1000,
      fields=('qvel', 'xmat', 'site_xpos'), consts=_consts, init=_init,
      observe=_observe, reward=_make_reward(sparse))


TASKS = {
    'AcrobotSwingup': _task('AcrobotSwingup', 'swingup', False),
    'AcrobotSwingupSparse': _task('AcrobotSwingupSparse', 'swingup_sparse',
                                  True),
}
