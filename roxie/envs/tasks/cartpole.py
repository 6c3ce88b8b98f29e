"""Cart-pole balance and swing-up (dm_control suite `cartpole`).

A cart slides on a rail and carries one hinged pole; the only actuator pushes
the cart. Four tasks share the model and the observation: the pole starts
near upright (`balance`) or hanging down (`swingup`), and the reward is smooth
or a 0/1 indicator (`_sparse`).

Fields read from the view, and why:
- `qpos`: the cart position (the slider joint).
- `qvel`: cart and pole velocities (the observation's `velocity` is all of
  qvel; the smooth reward penalises the pole's angular velocity).
- `xmat`: the pole's orientation; its 'zz' and 'xz' entries are the cosine
  and sine of the pole angle, exactly as the suite reads them.
- `ctrl`: the smooth reward penalises the applied control.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id

# The sparse reward asks for the cart within this band around the centre...
_CART_RANGE = (-0.25, 0.25)
# ...and for the pole's angle cosine within this band (about 5.7 degrees).
_ANGLE_COSINE_RANGE = (0.995, 1.0)


def _consts(model):
  """Ids and addresses the task functions index with."""
  slider = name2id(model, mujoco.mjtObj.mjOBJ_JOINT, 'slider')
  hinge = name2id(model, mujoco.mjtObj.mjOBJ_JOINT, 'hinge_1')
  return {
      'pole': name2id(model, mujoco.mjtObj.mjOBJ_BODY, 'pole_1'),
      'slider_qpos': int(model.jnt_qposadr[slider]),
      'hinge_qpos': int(model.jnt_qposadr[hinge]),
      'hinge_qvel': int(model.jnt_dofadr[hinge]),
      'qpos0': np.asarray(model.qpos0, np.float32),
      'nv': int(model.nv),
  }


def _make_init(swing_up):
  """The suite's reset: near upright, or hanging down, plus a small kick."""

  def init(key, c):
    k_cart, k_pole, k_vel = jax.random.split(key, 3)
    qpos = jnp.asarray(c['qpos0'])
    if swing_up:
      # Cart near the middle, pole hanging down; both with a 0.01 std jitter.
      cart = 0.01 * jax.random.normal(k_cart, ())
      pole = jnp.pi + 0.01 * jax.random.normal(k_pole, ())
    else:
      # Cart anywhere within 0.1 of the middle, pole within ~2 degrees.
      cart = jax.random.uniform(k_cart, (), minval=-0.1, maxval=0.1)
      pole = jax.random.uniform(k_pole, (), minval=-0.034, maxval=0.034)
    qpos = qpos.at[c['slider_qpos']].set(cart).at[c['hinge_qpos']].set(pole)
    # Every degree of freedom gets a small Gaussian velocity.
    qvel = 0.01 * jax.random.normal(k_vel, (c['nv'],))
    return qpos, qvel, jnp.zeros((0,), jnp.float32)

  return init


def _observe(view, task_state, c):
  del task_state
  xmat = view['xmat'][c['pole']]
  return {
      # Cart position, then the pole angle as (cos, sin).
      'position': jnp.stack([view['qpos'][c['slider_qpos']], xmat[8],
                             xmat[2]]),
      'velocity': view['qvel'],
  }


def _make_reward(sparse):
  """The smooth shaped reward, or the upright-and-centred indicator."""

  def reward(view, task_state, c):
    del task_state
    cart = view['qpos'][c['slider_qpos']]
    cos_angle = view['xmat'][c['pole'], 8]
    if sparse:
      centred = rewards.tolerance(cart, _CART_RANGE)
      upright = rewards.tolerance(cos_angle, _ANGLE_COSINE_RANGE)
      return centred * upright
    # Each factor lies in a band [floor, 1], so no single term zeroes it.
    upright = (cos_angle + 1.0) / 2.0
    centred = (1.0 + rewards.tolerance(cart, margin=2.0)) / 2.0
    small_control = rewards.tolerance(view['ctrl'][0], margin=1.0,
                                      value_at_margin=0.0,
                                      sigmoid='quadratic')
    small_control = (4.0 + small_control) / 5.0
    small_velocity = rewards.tolerance(view['qvel'][c['hinge_qvel']],
                                       margin=5.0)
    small_velocity = (1.0 + small_velocity) / 2.0
    return upright * small_control * small_velocity * centred

  return reward


def _task(name, dmc_task, swing_up, sparse):
  return Task(
      name=name, domain='cartpole', dmc_task=dmc_task,
      load_model=lambda: dm_control_model('cartpole'),
      # The suite steps the physics once per control (timestep 0.01 s) for
      # 10 s.
      control_timestep=0.01, episode_length=1000,
      fields=('qpos', 'qvel', 'xmat', 'ctrl'), consts=_consts,
      init=_make_init(swing_up), observe=_observe,
      reward=_make_reward(sparse))


TASKS = {
    'CartpoleBalance': _task('CartpoleBalance', 'balance', False, False),
    'CartpoleBalanceSparse': _task('CartpoleBalanceSparse', 'balance_sparse',
                                   False, True),
    'CartpoleSwingup': _task('CartpoleSwingup', 'swingup', True, False),
    'CartpoleSwingupSparse': _task('CartpoleSwingupSparse', 'swingup_sparse',
                                   True, True),
}
