"""Six-link swimmer reaching a target (dm_control suite `swimmer`, swimmer6).

A planar chain of six links in a dense fluid, rewarded for bringing its
nose to a target sphere drawn at reset.

The target: the suite moves the model's `target` geom at every reset. Here the
model is shared and constant, so the target's horizontal position is the
task state `[x, y]` ([2]); its height is the geom's, from the model. The
target geom cannot collide (contacts are disabled in this model), so its
position has no effect on the physics, and the model's own `target` geom
(and the `target_pos` sensor that reads it) are simply ignored.

Fields read: `qpos` (internal joint angles) and `sensordata`: the nose's
world position (`nose_pos`), the head's world x and y axes (`head_xaxis`,
`head_yaxis`: the suite's nose-to-target vector is expressed in the head
frame and keeps its x and y), and the local linear velocity and angular
velocity of every link (`head_vel`/`head_gyro`, `velocimeter_i`/`gyro_i`; the
suite observes x, y linear and z angular of each). MJX computes these frame,
velocimeter and gyro sensors as MuJoCo does, which
tests/envs/test_suite_locomotion.py checks.
"""

import copy

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id
from roxie.envs.tasks.walker import (randomize_limited_and_rotational_joints,
                                     randomizer_consts, sensor_adr)

_N_LINKS = 6
# Probability of a close target, and the half-widths of the squares that close
# and far targets are drawn in.
_CLOSE_PROBABILITY = 0.2
_CLOSE_BOX = 0.3
_FAR_BOX = 2.0


def _load_model():
  """The suite's model, with every geom's collision bits cleared.

  The dynamics are unchanged: contacts are disabled in this model (its
  option flag `contact="disable"`). But `mjx.put_model` rejects the model as
  shipped, since it has ellipsoid-box geom pairs, for which MJX has no
  collision function, whether or not contacts count; with no colliding pair
  it accepts it. tests/envs/test_suite_locomotion.py checks
  that MuJoCo steps this model exactly as the suite's.
  """
  model = copy.deepcopy(dm_control_model('swimmer', n_joints=_N_LINKS))
  model.geom_contype[:] = 0
  model.geom_conaffinity[:] = 0
  return model


def _consts(model):
  c = randomizer_consts(model)
  target = name2id(model, mujoco.mjtObj.mjOBJ_GEOM, 'target')
  lin = [sensor_adr(model, 'head_vel')] + [
      sensor_adr(model, f'velocimeter_{i}') for i in range(_N_LINKS - 1)]
  ang = [sensor_adr(model, 'head_gyro')] + [
      sensor_adr(model, f'gyro_{i}') for i in range(_N_LINKS - 1)]
  c.update(
      # Per link: local x and y linear velocity, then z angular velocity.
      body_vel=np.stack([np.array(lin), np.array(lin) + 1,
                         np.array(ang) + 2], axis=1),
      nose=sensor_adr(model, 'nose_pos'),
      head_xaxis=sensor_adr(model, 'head_xaxis'),
      head_yaxis=sensor_adr(model, 'head_yaxis'),
      target_z=np.float32(model.geom_pos[target, 2]),
      target_size=float(model.geom_size[target, 0]),
      # Internal joints: all but the three planar root joints.
      joints=np.arange(3, model.nq),
      nv=model.nv,
  )
  return c


def _init(key, c):
  joints_key, close_key, target_key = jax.random.split(key, 3)
  qpos = randomize_limited_and_rotational_joints(joints_key, c)
  close = jax.random.uniform(close_key) < _CLOSE_PROBABILITY
  box = jnp.where(close, _CLOSE_BOX, _FAR_BOX)
  target = jax.random.uniform(target_key, (2,), minval=-1.0, maxval=1.0) * box
  return qpos, jnp.zeros(c['nv']), target


def _nose_to_target(view, target_xy, c):
  """Nose-to-target vector in the head frame, x and y."""
  s = view['sensordata']
  target = jnp.concatenate([target_xy, jnp.full((1,), c['target_z'])])
  delta = target - s[c['nose']:c['nose'] + 3]
  # Elementwise products and sums, not dots: GPUs may run float32 dots in
  # TF32.
  return jnp.stack([
      jnp.sum(delta * s[c['head_xaxis']:c['head_xaxis'] + 3]),
      jnp.sum(delta * s[c['head_yaxis']:c['head_yaxis'] + 3]),
  ])


def _observe(view, task_state, c):
  return {
      'joints': view['qpos'][c['joints']],
      'to_target': _nose_to_target(view, task_state, c),
      'body_velocities': view['sensordata'][c['body_vel']].ravel(),
  }


def _reward(view, task_state, c):
  size = c['target_size']
  distance = jnp.linalg.norm(_nose_to_target(view, task_state, c))
  return rewards.tolerance(distance, bounds=(0.0, size), margin=5 * size,
                           sigmoid='long_tail')


TASKS = {
    'SwimmerSwimmer6': Task(
        name='SwimmerSwimmer6', domain='swimmer', dmc_task='swimmer6',
        load_model=_load_model,
        control_timestep=0.03, episode_length=1000,
        fields=('qpos', 'sensordata'), consts=_consts, init=_init,
        observe=_observe, reward=_reward, task_state_size=2),
}
