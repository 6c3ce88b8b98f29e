"""Ball in cup (dm_control suite `ball_in_cup`, task `catch`).

A planar cup on two actuated, spring-loaded slide joints has a ball tied to
it by a string; the reward is 1 while the ball lies inside the cup's target
box, else 0.

Fields read from the view, and why:
- `qpos`: the observation's `position`, and the reward. The cup and the ball
  move only along slide joints (world-aligned axes, no rotation), so the
  cup's target site and the ball's body frame are their model offsets plus
  the joint positions: exactly the site_xpos/xpos the suite reads.
- `qvel`: the observation's `velocity`.

Reset: the suite draws the ball's position uniformly (x in [-0.2, 0.2],
z offset in [0.2, 0.5]) until it does not penetrate the cup; the cup starts
at rest at its origin. Here `_NUM_CANDIDATES` positions are drawn at once
and the first that clears every cup capsule is kept, which is the same
distribution unless all penetrate (each clears with probability ~0.83, so
that happens with probability below 1e-12; the last candidate is then used).
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs.task import Task, dm_control_model, name2id

_NUM_CANDIDATES = 16
_BALL_X_RANGE = (-0.2, 0.2)
_BALL_Z_RANGE = (0.2, 0.5)


def _slide_offset(model, body, x_joint, z_joint):
  """A body's world (x, z) at zero joint positions, checking the joints."""
  for j, axis in ((x_joint, [1, 0, 0]), (z_joint, [0, 0, 1])):
    if (model.jnt_type[j] != mujoco.mjtJoint.mjJNT_SLIDE
        or model.jnt_bodyid[j] != body
        or not np.allclose(model.jnt_axis[j], axis)):
      raise ValueError('ball_in_cup: unexpected joint layout.')
  if (model.body_parentid[body] != 0
      or not np.allclose(model.body_quat[body], [1, 0, 0, 0])
      or model.body_jntnum[body] != 2):
    raise ValueError('ball_in_cup: unexpected body tree.')
  return model.body_pos[body, [0, 2]]


def _consts(model):
  """Joint addresses, the target box, and the cup's capsules."""
  body = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_BODY, n)
  joint = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)
  cup, ball = body('cup'), body('ball')
  qadr = lambda n: int(model.jnt_qposadr[joint(n)])
  cup_xz = _slide_offset(model, cup, joint('cup_x'), joint('cup_z'))
  ball_xz = _slide_offset(model, ball, joint('ball_x'), joint('ball_z'))
  target = name2id(model, mujoco.mjtObj.mjOBJ_SITE, 'target')
  ball_geom = name2id(model, mujoco.mjtObj.mjOBJ_GEOM, 'ball')
  ball_radius = float(model.geom_size[ball_geom, 0])
  # The cup's capsules in world (x, z) with the cup at its origin, for the
  # reset's penetration test.
  segments, radii = [], []
  for g in range(model.ngeom):
    if model.geom_bodyid[g] != cup:
      continue
    mat = np.empty(9)
    mujoco.mju_quat2Mat(mat, model.geom_quat[g])
    half = mat.reshape(3, 3)[:, 2] * model.geom_size[g, 1]
    ends = np.stack([model.geom_pos[g] - half, model.geom_pos[g] + half])
    segments.append(ends[:, [0, 2]] + cup_xz)
    radii.append(model.geom_size[g, 0])
  return {
      'cup_qpos': np.array([qadr('cup_x'), qadr('cup_z')]),
      'ball_qpos': np.array([qadr('ball_x'), qadr('ball_z')]),
      'target_offset': np.asarray(cup_xz + model.site_pos[target, [0, 2]],
                                  np.float32),
      'ball_offset': np.asarray(ball_xz, np.float32),
      # The ball's centre must be this close to the target's centre, per
      # axis, for the whole ball to be inside the box.
      'in_target_bound': np.asarray(
          model.site_size[target, [0, 2]] - ball_radius, np.float32),
      'cup_segments': np.stack(segments),  # [n, 2 ends, (x, z)]
      'clearance': ball_radius + np.array(radii),  # [n]
      'qpos0': np.asarray(model.qpos0, np.float32),
      'nv': int(model.nv),
  }


def _penetrates_cup(ball_xz, c):
  """Whether a ball centred at `ball_xz` (world) overlaps a cup capsule."""
  a, b = c['cup_segments'][:, 0], c['cup_segments'][:, 1]  # [n, 2]
  ab = b - a
  p = ball_xz[None]
  t = jnp.clip(jnp.sum((p - a) * ab, -1) / jnp.sum(ab * ab, -1), 0.0, 1.0)
  nearest = a + t[:, None] * ab
  return jnp.any(jnp.linalg.norm(p - nearest, axis=-1)
                 < c['clearance'])


def _init(key, c):
  """The ball at a random, non-penetrating spot; everything at rest."""
  k_x, k_z = jax.random.split(key)
  n = _NUM_CANDIDATES
  x = jax.random.uniform(k_x, (n,), minval=_BALL_X_RANGE[0],
                         maxval=_BALL_X_RANGE[1])
  z = jax.random.uniform(k_z, (n,), minval=_BALL_Z_RANGE[0],
                         maxval=_BALL_Z_RANGE[1])
  candidates = jnp.stack([x, z], axis=-1)  # joint positions, [n, 2]
  hits = jax.vmap(lambda q: _penetrates_cup(q + c['ball_offset'], c))(
      candidates)
  # The first clear candidate; the last one if none is.
  first = jnp.where(jnp.any(~hits), jnp.argmin(hits), n - 1)
  qpos = jnp.asarray(c['qpos0']).at[c['ball_qpos']].set(candidates[first])
  return qpos, jnp.zeros((c['nv'],)), jnp.zeros((0,), jnp.float32)


def _observe(view, task_state, c):
  del task_state, c
  return {'position': view['qpos'], 'velocity': view['qvel']}


def _reward(view, task_state, c):
  """1 while the ball is entirely inside the target box (in x and z)."""
  del task_state
  qpos = view['qpos']
  target = c['target_offset'] + qpos[c['cup_qpos']]
  ball = c['ball_offset'] + qpos[c['ball_qpos']]
  inside = jnp.all(jnp.abs(target - ball) < c['in_target_bound'])
  return inside.astype(jnp.float32)


TASKS = {
    # Ten physics steps (0.002 s each) per control, for 20 s.
    'BallInCup': Task(
        name='BallInCup', domain='ball_in_cup', dmc_task='catch',
        load_model=lambda: dm_control_model('ball_in_cup'),
        control_timestep=0.02, episode_length=1000,
        fields=('qpos', 'qvel'), consts=_consts, init=_init,
        observe=_observe, reward=_reward),
}
