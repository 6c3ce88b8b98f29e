"""Humanoid: stand, walk and run (dm_control suite `humanoid`).

A 21-actuator 3D humanoid. The reward multiplies head height, torso
uprightness and a small-control term by a centre-of-mass speed term: stay
still for stand, reach 1 m/s (walk) or 10 m/s (run) horizontally.

Fields read: `qpos` (joint angles), `qvel`, `ctrl` (small-control reward, in
actuator units), `xpos` (head height; torso, hand and foot positions for the
egocentric extremities), `xmat` (torso frame) and `sensordata` (only
`torso_subtreelinvel`, the centre-of-mass velocity, a velocity-stage sensor
that MJX computes as MuJoCo does, which tests/envs/test_suite_locomotion.py
checks). The suite's observation uses none of the model's acceleration-stage
sensors (accelerometer, force, torque, touch).

Reset: the suite draws joints with its limited-and-rotational randomiser and
redraws the whole pose while MuJoCo finds any contact (about one draw in
four touches itself or the floor). `init` has no collision detector, so it
runs its own: forward kinematics of the drawn pose in JAX and exact distance
tests for the model's primitive pairs (capsules, spheres, the floor plane),
with MuJoCo's pair filters. It draws `_CANDIDATES` poses and keeps the first
free of contact, which is the suite's distribution exactly unless all of them
touch (probability about 0.25**16, ~2e-10), when the last is kept; the test
checks the detector against MuJoCo's `ncon > 0`.
"""

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs import rewards
from roxie.envs.task import Task, dm_control_model, name2id
from roxie.envs.tasks.walker import (randomize_limited_and_rotational_joints,
                                     randomizer_consts, sensor_adr)

_STAND_HEIGHT = 1.4
_WALK_SPEED = 1.0
_RUN_SPEED = 10.0
_CANDIDATES = 16

_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)
_SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)
_PLANE = int(mujoco.mjtGeom.mjGEOM_PLANE)
_SPHERE = int(mujoco.mjtGeom.mjGEOM_SPHERE)
_CAPSULE = int(mujoco.mjtGeom.mjGEOM_CAPSULE)


# --- Rotations ----------------------------------------------------------------


def _mm(a, b):
  """`a @ b` in full float32 (GPUs may otherwise use TF32, ~1e-3 error)."""
  return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def _quat_to_mat(q):
  """The rotation matrix [3, 3] of a unit quaternion (w, x, y, z)."""
  w, x, y, z = q[0], q[1], q[2], q[3]
  return jnp.stack([
      jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z),
                 2 * (x * z + w * y)]),
      jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z),
                 2 * (y * z - w * x)]),
      jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x),
                 1 - 2 * (x * x + y * y)]),
  ])


def _np_quat_to_mat(quats):
  """Rotation matrices [n, 3, 3] of unit quaternions [n, 4], in NumPy."""
  mats = np.zeros((len(quats), 9))
  for quat, mat in zip(quats, mats):
    mujoco.mju_quat2Mat(mat, quat)
  return mats.reshape(-1, 3, 3).astype(np.float32)


def _cross_matrix(axis):
  """K with K @ v = axis x v, for unit axes [n, 3]: [n, 3, 3]."""
  x, y, z = axis[:, 0], axis[:, 1], axis[:, 2]
  zero = np.zeros_like(x)
  return np.stack([np.stack([zero, -z, y], -1), np.stack([z, zero, -x], -1),
                   np.stack([-y, x, zero], -1)], 1).astype(np.float32)


# --- Contact detection at reset ----------------------------------------------


def _tree_consts(model):
  """Per-body tables for `_body_poses`, bodies 1.. in MuJoCo's order.

  Each body's joints fill `slots` padded rows, kind -1 for padding.
  """
  bodies = np.arange(1, model.nbody, dtype=np.int32)
  slots = max(1, int(model.body_jntnum.max()))
  kind = np.full((model.nbody, slots), -1, np.int32)
  qposadr = np.zeros((model.nbody, slots), np.int32)
  axis = np.zeros((model.nbody, slots, 3), np.float32)
  pos = np.zeros((model.nbody, slots, 3), np.float32)
  qpos0 = np.zeros((model.nbody, slots), np.float32)
  for b in bodies:
    for s in range(model.body_jntnum[b]):
      j = model.body_jntadr[b] + s
      kind[b, s], qposadr[b, s] = model.jnt_type[j], model.jnt_qposadr[j]
      axis[b, s], pos[b, s] = model.jnt_axis[j], model.jnt_pos[j]
      qpos0[b, s] = model.qpos0[model.jnt_qposadr[j]]
  k = _cross_matrix(axis.reshape(-1, 3)).reshape(model.nbody, slots, 3, 3)
  return {
      'fk_body': bodies,
      'fk_parent': model.body_parentid[bodies],
      'fk_pos': model.body_pos[bodies].astype(np.float32),
      'fk_mat': _np_quat_to_mat(model.body_quat[bodies]),
      'fk_kind': kind[bodies],
      'fk_qposadr': qposadr[bodies],
      'fk_axis': axis[bodies],
      'fk_anchor': pos[bodies],
      'fk_qpos0': qpos0[bodies],
      # Rodrigues' terms of each joint axis: R = I + sin K + (1 - cos) K^2.
      'fk_k': k[bodies],
      'fk_k2': (k @ k)[bodies],
  }


def _contact_consts(model):
  """Tables for `_penetrating`: kinematic tree, geoms and candidate pairs.

  Candidate pairs follow MuJoCo's filters: geoms on different weld bodies,
  not on a weld parent and child (unless one is the world), with compatible
  contype/conaffinity.

  Raises:
    NotImplementedError: on features this detector does not model (geoms
      other than plane, sphere and capsule in a candidate pair; ball joints;
      explicit pairs or exclusions; disabled contacts or parent filtering).
  """
  if model.npair or model.nexclude:
    raise NotImplementedError('Explicit contact pairs/exclusions.')
  if model.opt.disableflags & (mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
                               | mujoco.mjtDisableBit.mjDSBL_CONTACT
                               | mujoco.mjtDisableBit.mjDSBL_FILTERPARENT):
    raise NotImplementedError('Non-default contact flags.')
  if not np.isin(model.jnt_type, (_FREE, _HINGE, _SLIDE)).all():
    raise NotImplementedError('Only free, hinge and slide joints.')
  weld = model.body_weldid
  weld_parent = weld[model.body_parentid[weld]]
  pairs = []
  for g1 in range(model.ngeom):
    for g2 in range(g1 + 1, model.ngeom):
      w1, w2 = weld[model.geom_bodyid[g1]], weld[model.geom_bodyid[g2]]
      if w1 == w2:
        continue
      if w1 and w2 and (w1 == weld_parent[w2] or w2 == weld_parent[w1]):
        continue
      if not ((model.geom_contype[g1] & model.geom_conaffinity[g2])
              or (model.geom_contype[g2] & model.geom_conaffinity[g1])):
        continue
      kinds = {int(model.geom_type[g1]), int(model.geom_type[g2])}
      if not kinds <= {_PLANE, _SPHERE, _CAPSULE} or kinds == {_PLANE}:
        raise NotImplementedError(f'Geom pair {g1}, {g2} of types {kinds}.')
      pairs.append((g1, g2))
  pairs = np.array(pairs).reshape(-1, 2)
  plane = model.geom_type[pairs] == _PLANE
  return {
      **_tree_consts(model),
      'geom_body': model.geom_bodyid.copy(),
      'geom_pos': model.geom_pos.astype(np.float32),
      'geom_mat': _np_quat_to_mat(model.geom_quat),
      'geom_radius': model.geom_size[:, 0].astype(np.float32),
      # Capsules are segments of this half-length along z; spheres points.
      'geom_half': np.where(model.geom_type == _CAPSULE,
                            model.geom_size[:, 1], 0.0).astype(np.float32),
      # Pairs with the plane (if any) second, for `_penetrating`.
      'pairs_plane': np.where(plane[:, :1], pairs[:, ::-1], pairs)[
          plane.any(axis=1)],
      'pairs_solid': pairs[~plane.any(axis=1)],
      'geom_margin': model.geom_margin.astype(np.float32),
  }


def _body_poses(qpos, c):
  """World positions [nbody, 3] and rotation matrices [nbody, 3, 3].

  MuJoCo's `mj_kinematics` for free, hinge and slide joints, as a scan over
  the bodies in order (parents come first), so that it compiles to one small
  loop body whatever the model's size.
  """
  eye = np.eye(3, dtype=np.float32)
  nbody = len(c['fk_body']) + 1
  table_keys = ('fk_body', 'fk_parent', 'fk_pos', 'fk_mat', 'fk_kind',
                'fk_qposadr', 'fk_axis', 'fk_anchor', 'fk_qpos0', 'fk_k',
                'fk_k2')

  def body(carry, x):
    positions, mats = carry
    b, parent, pos, mat, kinds, adrs, axes, anchors, qpos0, ks, k2s = x
    pos = positions[parent] + _mm(mats[parent], pos)
    mat = _mm(mats[parent], mat)
    for s in range(kinds.shape[0]):  # Joint slots, in order.
      kind, adr = kinds[s], adrs[s]
      q = qpos[adr] - qpos0[s]
      anchor = pos + _mm(mat, anchors[s])
      hinge_mat = _mm(mat, eye + jnp.sin(q) * ks[s] + (1 - jnp.cos(q)) * k2s[s])
      hinge_pos = anchor - _mm(hinge_mat, anchors[s])
      slide_pos = pos + _mm(mat, axes[s]) * q
      free_pos = jax.lax.dynamic_slice(qpos, (adr,), (3,))
      quat = jax.lax.dynamic_slice(qpos, (adr + 3,), (4,))
      free_mat = _quat_to_mat(
          quat / jnp.maximum(jnp.linalg.norm(quat), 1e-12))
      pos = jnp.where(kind == _HINGE, hinge_pos,
                      jnp.where(kind == _SLIDE, slide_pos,
                                jnp.where(kind == _FREE, free_pos, pos)))
      mat = jnp.where(kind == _HINGE, hinge_mat,
                      jnp.where(kind == _FREE, free_mat, mat))
    return (positions.at[b].set(pos), mats.at[b].set(mat)), None

  start = (jnp.zeros((nbody, 3)), jnp.broadcast_to(eye, (nbody, 3, 3)))
  (positions, mats), _ = jax.lax.scan(
      body, start, tuple(jnp.asarray(c[k]) for k in table_keys))
  return positions, mats


def _segment_distance(p1, q1, p2, q2):
  """Distances between segments p1-q1 and p2-q2 (each [n, 3]), [n].

  The clamped closest-point solution (as in Ericson, Real-Time Collision
  Detection, 5.1.9); either segment may have zero length.
  """
  eps = 1e-12
  d1, d2, r = q1 - p1, q2 - p2, p1 - p2
  a = jnp.sum(d1 * d1, -1)
  e = jnp.sum(d2 * d2, -1)
  b = jnp.sum(d1 * d2, -1)
  c = jnp.sum(d1 * r, -1)
  f = jnp.sum(d2 * r, -1)
  safe_a = jnp.maximum(a, eps)
  safe_e = jnp.maximum(e, eps)
  denom = a * e - b * b
  # Both proper segments: the closest point of the first to the second's
  # line (any point when they are parallel), then t, then s again where t
  # was clamped.
  s = jnp.where(denom > 1e-6 * a * e,
                jnp.clip((b * f - c * e) / jnp.maximum(denom, eps), 0, 1),
                0.0)
  t = (b * s + f) / safe_e
  s = jnp.where(t < 0, jnp.clip(-c / safe_a, 0, 1),
                jnp.where(t > 1, jnp.clip((b - c) / safe_a, 0, 1), s))
  t = jnp.clip(t, 0, 1)
  # Points: the first a point, the second, or both.
  s = jnp.where(a <= eps, 0.0,
                jnp.where(e <= eps, jnp.clip(-c / safe_a, 0, 1), s))
  t = jnp.where(e <= eps, 0.0,
                jnp.where(a <= eps, jnp.clip(f / safe_e, 0, 1), t))
  gap = (p1 + d1 * s[:, None]) - (p2 + d2 * t[:, None])
  return jnp.linalg.norm(gap, axis=-1)


def _penetrating(qpos, c):
  """Whether MuJoCo would find any contact in pose `qpos` ([], bool)."""
  xpos, xmat = _body_poses(qpos, c)
  body = c['geom_body']
  body_mat = xmat[body]
  geom_mat = _mm(body_mat, c['geom_mat'])
  centre = xpos[body] + _mm(body_mat, c['geom_pos'][:, :, None])[..., 0]
  axis = geom_mat[:, :, 2]  # The z axis, along which capsules extend.
  half = (axis * c['geom_half'][:, None])
  ends = (centre - half, centre + half)
  radius, margin = c['geom_radius'], c['geom_margin']
  touching = []
  solid = c['pairs_solid']
  if len(solid):
    g1, g2 = solid[:, 0], solid[:, 1]
    distance = _segment_distance(ends[0][g1], ends[1][g1], ends[0][g2],
                                 ends[1][g2]) - radius[g1] - radius[g2]
    touching.append(distance < np.maximum(margin[g1], margin[g2]))
  with_plane = c['pairs_plane']
  if len(with_plane):
    g, p = with_plane[:, 0], with_plane[:, 1]
    normal, origin = axis[p], centre[p]
    height = jnp.minimum(jnp.sum((ends[0][g] - origin) * normal, -1),
                         jnp.sum((ends[1][g] - origin) * normal, -1))
    touching.append(height - radius[g] < np.maximum(margin[g], margin[p]))
  return jnp.concatenate(touching).any()


# --- Task ---------------------------------------------------------------------


def _consts(model):
  c = randomizer_consts(model)
  c.update(_contact_consts(model))
  body = lambda name: name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
  c.update(
      torso=body('torso'),
      head=body('head'),
      extremities=np.array([body(side + limb) for side in ('left_', 'right_')
                            for limb in ('hand', 'foot')]),
      com_vel=sensor_adr(model, 'torso_subtreelinvel'),
      # Joint angles: all of qpos but the free root's 7.
      joints=np.arange(7, model.nq),
      nv=model.nv,
  )
  return c


def _init(key, c):
  keys = jax.random.split(key, _CANDIDATES)
  # The consts stay closed over: they are static tables, not batched.
  poses = jax.vmap(lambda k: randomize_limited_and_rotational_joints(k, c))(
      keys)
  touching = jax.vmap(lambda q: _penetrating(q, c))(poses)
  # The first pose free of contact, else the last.
  chosen = jnp.where(touching.all(), _CANDIDATES - 1, jnp.argmin(touching))
  return poses[chosen], jnp.zeros(c['nv']), jnp.zeros((0,))


def _com_velocity(view, c):
  return view['sensordata'][c['com_vel']:c['com_vel'] + 3]


def _observe(view, task_state, c):
  del task_state
  xpos, torso = view['xpos'], c['torso']
  frame = view['xmat'][torso].reshape(3, 3)
  return {
      'joint_angles': view['qpos'][c['joints']],
      'head_height': xpos[c['head'], 2],
      # Hands and feet, left then right, relative to the torso, in its frame.
      'extremities': _mm(xpos[c['extremities']] - xpos[torso][None],
                         frame).ravel(),
      'torso_vertical': view['xmat'][torso, 6:9],  # zx, zy, zz
      'com_velocity': _com_velocity(view, c),
      'velocity': view['qvel'],
  }


def _reward(view, task_state, c, *, move_speed):
  del task_state
  standing = rewards.tolerance(view['xpos'][c['head'], 2],
                               bounds=(_STAND_HEIGHT, float('inf')),
                               margin=_STAND_HEIGHT / 4)
  upright = rewards.tolerance(view['xmat'][c['torso'], 8],
                              bounds=(0.9, float('inf')), sigmoid='linear',
                              margin=1.9, value_at_margin=0.0)
  small_control = rewards.tolerance(view['ctrl'], margin=1.0,
                                    value_at_margin=0.0,
                                    sigmoid='quadratic').mean()
  small_control = (4.0 + small_control) / 5.0
  horizontal = _com_velocity(view, c)[:2]
  if move_speed == 0:
    move = rewards.tolerance(horizontal, margin=2.0).mean()
  else:
    move = rewards.tolerance(jnp.linalg.norm(horizontal),
                             bounds=(move_speed, float('inf')),
                             margin=move_speed, value_at_margin=0.0,
                             sigmoid='linear')
    move = (5.0 * move + 1.0) / 6.0
  return small_control * standing * upright * move


def _task(name, dmc_task, move_speed):
  return Task(
      name=name, domain='humanoid', dmc_task=dmc_task,
      load_model=lambda: dm_control_model('humanoid'),
      control_timestep=0.025, episode_length=1000,
      fields=('qpos', 'qvel', 'ctrl', 'xpos', 'xmat', 'sensordata'),
      consts=_consts, init=_init, observe=_observe,
      reward=functools.partial(_reward, move_speed=move_speed))


TASKS = {
    'HumanoidStand': _task('HumanoidStand', 'stand', 0.0),
    'HumanoidWalk': _task('HumanoidWalk', 'walk', _WALK_SPEED),
    'HumanoidRun': _task('HumanoidRun', 'run', _RUN_SPEED),
}
