"""Half-cheetah running (dm_control suite `cheetah`).

A planar runner rewarded linearly for centre-of-mass speed up to 10 m/s.

Fields read: `qpos` (all but the horizontal position are observed), `qvel`,
and `sensordata` (the model's one sensor, `torso_subtreelinvel`, whose x
component is the speed; MJX computes it as MuJoCo does, which
tests/envs/test_suite_locomotion.py checks).

Deviation from the suite: after drawing the limited joints uniformly in their
ranges, dm_control lets the cheetah settle for 200 physics steps (2 s) under
zero control before the episode starts. `init` is pure JAX with no physics, so
an episode here starts from the drawn pose, in the air at the model's initial
height, at rest: the cheetah drops and settles during its first steps while
the agent already acts. A backend that wants the suite's start exactly can
run `SETTLE_STEPS` zero-control physics steps after `init` (and reset time).
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model
from roxie.envs.tasks.walker import sensor_adr

_RUN_SPEED = 10.0

# Zero-control physics steps the suite runs after drawing the start pose.
SETTLE_STEPS = 200


def _consts(model):
  limited = model.jnt_limited.astype(bool)
  return {
      'limited_qpos': model.jnt_qposadr[limited].copy(),
      'limited_range': model.jnt_range[limited].astype(np.float32),
      'com_vel': sensor_adr(model, 'torso_subtreelinvel'),
      'nq': model.nq,
      'nv': model.nv,
  }


def _init(key, c):
  low, high = c['limited_range'].T
  angles = jax.random.uniform(key, low.shape, minval=low, maxval=high)
  qpos = jnp.zeros(c['nq']).at[c['limited_qpos']].set(angles)
  return qpos, jnp.zeros(c['nv']), jnp.zeros((0,))


def _observe(view, task_state, c):
  del task_state, c
  return {
      'position': view['qpos'][1:],  # No horizontal position.
      'velocity': view['qvel'],
  }


def _reward(view, task_state, c):
  del task_state
  return rewards.tolerance(view['sensordata'][c['com_vel']],
                           bounds=(_RUN_SPEED, float('inf')),
                           margin=_RUN_SPEED, value_at_margin=0.0,
                           sigmoid='linear')


TASKS = {
    'CheetahRun': Task(
        name='CheetahRun', domain='cheetah', dmc_task='run',
        load_model=lambda: dm_control_model('cheetah'),
        # The suite steps the cheetah at its physics timestep.
        control_timestep=0.01, episode_length=1000,
        fields=('qpos', 'qvel', 'sensordata'), consts=_consts, init=_init,
        observe=_observe, reward=_reward),
}
