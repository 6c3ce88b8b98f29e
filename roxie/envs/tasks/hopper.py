"""One-legged hopper: stand and hop (dm_control suite `hopper`).

Both tasks reward the torso's height above the foot; stand multiplies it by a
small-control term, hop by a forward-speed term.

Fields read: `qpos` (all but the horizontal position are observed), `qvel`,
`ctrl` (stand's small-control reward, in actuator units), `xipos` (heights
of the torso's and foot's centres of mass) and `sensordata`
(`torso_subtreelinvel` for hop's speed, and the two foot touch sensors).

The touch sensors (`touch_toe`, `touch_heel`) are acceleration-stage
quantities: the summed normal force of the contacts inside each site's sphere,
which needs the constraint solver, so no position/velocity field yields them.
They are read from `sensordata`, where both MuJoCo and MJX compute them
(tests/envs/test_suite_locomotion.py checks that MJX agrees with MuJoCo). The
suite observes them as its legacy step leaves them: from the forward dynamics
of the last substep, i.e. at the state before that substep's integration,
not at the state observed. They match the suite when the backend leaves the
acceleration stage of `sensordata` as `mj_step` did and refreshes only the
position and velocity stages (as `mj_step1`, or `mujoco.batch`'s
`step(stage=mjSTAGE_VEL)`); a backend that re-runs the full forward pass after
the step reports them one substep later. At reset the suite runs the full
`mj_forward`, so its first touch values are the initial pose's: nonzero in
about 0.3% of resets (drawn poses with the foot in the floor). A backend
that forwards only the position and velocity stages at reset reports 0
there. Every other part of the observation and reward is exact at the
observed state.
"""

import functools

import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id
from roxie.envs.tasks.walker import (randomize_limited_and_rotational_joints,
                                     randomizer_consts, sensor_adr)

_STAND_HEIGHT = 0.6
_HOP_SPEED = 2.0


def _consts(model):
  c = randomizer_consts(model)
  c.update(
      torso=name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'torso'),
      foot=name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'foot'),
      com_vel=sensor_adr(model, 'torso_subtreelinvel'),
      touch=np.array([sensor_adr(model, 'touch_toe'),
                      sensor_adr(model, 'touch_heel')]),
      nv=model.nv,
  )
  return c


def _init(key, c):
  qpos = randomize_limited_and_rotational_joints(key, c)
  return qpos, jnp.zeros(c['nv']), jnp.zeros((0,))


def _observe(view, task_state, c):
  del task_state
  return {
      'position': view['qpos'][1:],  # No horizontal position.
      'velocity': view['qvel'],
      'touch': jnp.log1p(view['sensordata'][c['touch']]),
  }


def _reward(view, task_state, c, *, hopping):
  del task_state
  height = view['xipos'][c['torso'], 2] - view['xipos'][c['foot'], 2]
  standing = rewards.tolerance(height, (_STAND_HEIGHT, 2.0))
  if hopping:
    hop = rewards.tolerance(view['sensordata'][c['com_vel']],
                            bounds=(_HOP_SPEED, float('inf')),
                            margin=_HOP_SPEED / 2, value_at_margin=0.5,
                            sigmoid='linear')
    return standing * hop
  small_control = rewards.tolerance(view['ctrl'], margin=1.0,
                                    value_at_margin=0.0,
                                    sigmoid='quadratic').mean()
  return standing * (small_control + 4.0) / 5.0


def _task(name, dmc_task, hopping):
  return Task(
      name=name, domain='hopper', dmc_task=dmc_task,
      load_model=lambda: dm_control_model('hopper'),
      control_timestep=0.02, episode_length=1000,
      # Only stand's reward has a control term.
      fields=('qpos', 'qvel') + (() if hopping else ('ctrl',))
      + ('xipos', 'sensordata'),
      consts=_consts, init=_init, observe=_observe,
      reward=functools.partial(_reward, hopping=hopping))


TASKS = {
    'HopperStand': _task('HopperStand', 'stand', False),
    'HopperHop': _task('HopperHop', 'hop', True),
}
