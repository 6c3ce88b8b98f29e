"""Finger spin and turn (dm_control suite `finger`).

A planar two-joint finger (proximal, distal) manipulates a free-spinning
two-capsule body on a passive hinge. `FingerSpin` rewards spinning the body
fast (hinge velocity <= -15 rad/s); `FingerTurnEasy`/`FingerTurnHard` reward
turning the body's tip into a target on the tip's circle (target radius 7 cm
and 3 cm).

Per-episode differences from the model as loaded, as the suite makes them:
- Spin lowers the hinge's damping from 0.5 to 0.03. That changes the
  dynamics, so `FingerSpin` loads its own copy of the model with that
  damping (`load_model`); the turn tasks use the model unchanged.
- Turn moves the `target` site (the suite writes `site_pos` and `site_size`).
  A site has no effect on the dynamics, so here the target's world (x, z)
  lives in `task_state` [2] and its radius is a task constant; the model's
  target site (and the sensor reading it) is simply not used.
- Spin also hides two sites (rgba), which only matters for rendering.

Observations: the suite builds them from sensors. All but the touch sensors
are reproduced exactly from kinematic fields (a jointpos/jointvel sensor is
qpos/qvel; a framepos sensor of a site or of a body frame, with no reference
frame, copies site_xpos/xpos). The touch sensors need contact forces, so
they are read from `sensordata` (MJX's 'jax' implementation supports touch
sensors; tests compare it with MuJoCo's on contacting states).
Touch is an acceleration-stage sensor: after a dm_control step it holds the
value computed in the last physics step (before that step's integration),
while the position/velocity fields describe the state after it.

Fields read from the view, and why:
- `qpos`: the proximal and distal joint angles (`position`).
- `qvel`: the three joint velocities (`velocity`; the spin reward).
- `site_xpos`: the spinner's `tip` site. The spinner's body frame is fixed
  to the world (it only rotates about its own origin), so its position is a
  model constant.
- `sensordata`: the two touch sensors only.

Reset: the suite samples joint angles (proximal and distal uniform within
their limits, the hinge uniform in [-pi, pi]) until the finger does not touch
the spinner. Here `_NUM_CANDIDATES` candidates are drawn at once and the
first contact-free one is kept, which is the same distribution unless all
are in contact (each candidate is contact-free with probability ~0.9, so
that happens with probability ~1e-16; the last candidate is then used). The
contact test is geometric: the only geoms that can touch are the fingertip
capsule and the spinner's two capsules (see `_fingertip_touches_spinner`).
"""

import copy
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs.task import Task, dm_control_model, name2id

_EASY_TARGET_SIZE = 0.07
_HARD_TARGET_SIZE = 0.03
# The spin reward asks for the hinge to turn at least this fast (negative
# is the rewarded direction).
_SPIN_VELOCITY = 15.0
# The spin task's hinge damping.
_SPIN_HINGE_DAMPING = 0.03
# Reset candidates drawn at once (see the module docstring).
_NUM_CANDIDATES = 16


@functools.lru_cache(maxsize=None)
def _spin_model() -> mujoco.MjModel:
  """The finger model with the spin task's low hinge damping (cached)."""
  model = copy.deepcopy(dm_control_model('finger'))
  hinge = name2id(model, mujoco.mjtObj.mjOBJ_JOINT, 'hinge')
  model.dof_damping[model.jnt_dofadr[hinge]] = _SPIN_HINGE_DAMPING
  return model


def _capsule_segment(model, geom):
  """A capsule geom's axis end points in its body frame, and its radius."""
  if model.geom_type[geom] != mujoco.mjtGeom.mjGEOM_CAPSULE:
    raise ValueError(f'finger: geom {geom} is expected to be a capsule.')
  mat = np.empty(9)
  mujoco.mju_quat2Mat(mat, model.geom_quat[geom])
  axis = mat.reshape(3, 3)[:, 2] * model.geom_size[geom, 1]
  ends = np.stack([model.geom_pos[geom] - axis, model.geom_pos[geom] + axis])
  return ends[:, [0, 2]], float(model.geom_size[geom, 0])


def _consts(model):
  """Addresses, joint ranges and the planar geometry for the reset."""
  body = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_BODY, n)
  joint = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)
  geom = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n)
  sensor = lambda n: name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, n)
  prox, dist, hinge = joint('proximal'), joint('distal'), joint('hinge')
  for j in (prox, dist, hinge):
    # The planar kinematics below assume hinges about -y at body origins.
    if (model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE
        or not np.allclose(model.jnt_axis[j], [0, -1, 0])
        or not np.allclose(model.jnt_pos[j], 0)):
      raise ValueError('finger: unexpected joint layout.')
  for b, parent in (('proximal', 0), ('distal', body('proximal')),
                    ('spinner', 0)):
    if (model.body_parentid[body(b)] != parent
        or not np.allclose(model.body_quat[body(b)], [1, 0, 0, 0])):
      raise ValueError('finger: unexpected body tree.')
  tip_ends, tip_radius = _capsule_segment(model, geom('fingertip'))
  cap_ends, cap_radii = zip(*[_capsule_segment(model, geom(n))
                              for n in ('cap1', 'cap2')])
  spinner = body('spinner')
  touch = [model.sensor_adr[sensor(n)] for n in ('touchtop', 'touchbottom')]
  return {
      'qpos_prox': int(model.jnt_qposadr[prox]),
      'qpos_dist': int(model.jnt_qposadr[dist]),
      'qpos_hinge': int(model.jnt_qposadr[hinge]),
      'qvel': np.array([model.jnt_dofadr[j] for j in (prox, dist, hinge)]),
      'touch': np.array(touch),
      'tip': name2id(model, mujoco.mjtObj.mjOBJ_SITE, 'tip'),
      # The spinner's frame never moves: it only rotates about its origin.
      'spinner_xz': np.asarray(model.body_pos[spinner, [0, 2]], np.float32),
      # The turn target lies on the circle the spinner's tip sweeps.
      'target_circle': float(model.geom_size[geom('cap1'), :2].sum()),
      # Reset sampling.
      'range_prox': np.asarray(model.jnt_range[prox], np.float32),
      'range_dist': np.asarray(model.jnt_range[dist], np.float32),
      'qpos0': np.asarray(model.qpos0, np.float32),
      'nv': int(model.nv),
      # Planar (x, z) geometry for the contact test.
      'proximal_xz': np.asarray(model.body_pos[body('proximal'), [0, 2]]),
      'distal_xz': np.asarray(model.body_pos[body('distal'), [0, 2]]),
      'tip_ends': tip_ends,
      'cap_ends': np.stack(cap_ends),
      'contact_distance': tip_radius + np.array(cap_radii),
  }


def _rotate(points, angle):
  """Rotates (x, z) points by `angle` about -y (the joints' axis)."""
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  x, z = points[..., 0], points[..., 1]
  return jnp.stack([cos * x - sin * z, sin * x + cos * z], axis=-1)


def _segment_distance(p0, p1, q0, q1):
  """Distance between planar segments [p0, p1] and [q0, q1]."""

  def point_to_segment(p, a, b):
    ab = b - a
    t = jnp.clip(jnp.dot(p - a, ab) / jnp.dot(ab, ab), 0.0, 1.0)
    return jnp.linalg.norm(p - (a + t * ab))

  cross = lambda u, v: u[0] * v[1] - u[1] * v[0]
  # Proper crossing: each segment's ends lie on opposite sides of the other.
  crossing = ((cross(p1 - p0, q0 - p0) * cross(p1 - p0, q1 - p0) < 0)
              & (cross(q1 - q0, p0 - q0) * cross(q1 - q0, p1 - q0) < 0))
  ends = jnp.stack([point_to_segment(p0, q0, q1), point_to_segment(p1, q0, q1),
                    point_to_segment(q0, p0, p1), point_to_segment(q1, p0, p1)])
  return jnp.where(crossing, 0.0, jnp.min(ends))


def _fingertip_touches_spinner(qpos, c):
  """Whether the fingertip capsule overlaps either spinner capsule.

  In this model the fingertip is the only finger geom that can reach the
  spinner (the distal link's own geom does not collide, the proximal geoms
  are out of reach, and the spinner's decoration cylinder lies inside its
  capsules in the plane), and nothing reaches the ground.

  Args:
    qpos: [nq] joint angles.
    c: the consts.

  Returns:
    bool [].
  """
  a_prox = qpos[c['qpos_prox']] - c['qpos0'][c['qpos_prox']]
  a_dist = qpos[c['qpos_dist']] - c['qpos0'][c['qpos_dist']]
  a_hinge = qpos[c['qpos_hinge']] - c['qpos0'][c['qpos_hinge']]
  distal_origin = c['proximal_xz'] + _rotate(c['distal_xz'], a_prox)
  tip = distal_origin[None] + _rotate(c['tip_ends'], a_prox + a_dist)
  caps = c['spinner_xz'][None, None] + _rotate(c['cap_ends'], a_hinge)
  distances = jnp.stack([_segment_distance(tip[0], tip[1], cap[0], cap[1])
                         for cap in caps])
  return jnp.any(distances < c['contact_distance'])


def _random_joint_angles(key, c):
  """Joint angles from the suite's reset distribution, contact-free."""
  k_prox, k_dist, k_hinge = jax.random.split(key, 3)
  n = _NUM_CANDIDATES
  prox = jax.random.uniform(k_prox, (n,), minval=c['range_prox'][0],
                            maxval=c['range_prox'][1])
  dist = jax.random.uniform(k_dist, (n,), minval=c['range_dist'][0],
                            maxval=c['range_dist'][1])
  hinge = jax.random.uniform(k_hinge, (n,), minval=-jnp.pi, maxval=jnp.pi)
  qpos = jnp.broadcast_to(jnp.asarray(c['qpos0']), (n, c['qpos0'].shape[0]))
  qpos = (qpos.at[:, c['qpos_prox']].set(prox)
          .at[:, c['qpos_dist']].set(dist)
          .at[:, c['qpos_hinge']].set(hinge))
  touching = jax.vmap(lambda q: _fingertip_touches_spinner(q, c))(qpos)
  # The first contact-free candidate; the last one if none is.
  first = jnp.where(jnp.any(~touching), jnp.argmin(touching), n - 1)
  return qpos[first]


def _init_spin(key, c):
  qpos = _random_joint_angles(key, c)
  return qpos, jnp.zeros((c['nv'],)), jnp.zeros((0,), jnp.float32)


def _init_turn(key, c):
  """A target on the tip's circle at a uniform angle, then the joints."""
  k_target, k_joints = jax.random.split(key)
  angle = jax.random.uniform(k_target, (), minval=-jnp.pi, maxval=jnp.pi)
  r = c['target_circle']
  target = c['spinner_xz'] + r * jnp.stack([jnp.sin(angle), jnp.cos(angle)])
  qpos = _random_joint_angles(k_joints, c)
  return qpos, jnp.zeros((c['nv'],)), target


def _tip_position(view, c):
  """The spinner tip's (x, z) relative to the hinge."""
  return view['site_xpos'][c['tip'], np.array([0, 2])] - c['spinner_xz']


def _observe_spin(view, task_state, c):
  del task_state
  qpos = view['qpos']
  return {
      'position': jnp.concatenate([
          jnp.stack([qpos[c['qpos_prox']], qpos[c['qpos_dist']]]),
          _tip_position(view, c)]),
      'velocity': view['qvel'][c['qvel']],
      # Log-scaled touch forces at the top and bottom of the fingertip.
      'touch': jnp.log1p(view['sensordata'][c['touch']]),
  }


def _reward_spin(view, task_state, c):
  del task_state
  hinge_velocity = view['qvel'][c['qvel'][2]]
  return (hinge_velocity <= -_SPIN_VELOCITY).astype(jnp.float32)


def _target_position(task_state, c):
  """The target's (x, z) relative to the hinge."""
  return task_state - c['spinner_xz']


def _make_turn(target_size):
  """Observation and reward of a turn task with this target radius."""

  def dist_to_target(view, task_state, c):
    # Signed: negative once the tip's centre is inside the target sphere.
    to_target = _target_position(task_state, c) - _tip_position(view, c)
    return jnp.linalg.norm(to_target) - target_size

  def observe(view, task_state, c):
    obs = _observe_spin(view, task_state, c)
    obs['target_position'] = _target_position(task_state, c)
    obs['dist_to_target'] = dist_to_target(view, task_state, c)
    return obs

  def reward(view, task_state, c):
    return (dist_to_target(view, task_state, c) <= 0).astype(jnp.float32)

  return observe, reward


_FIELDS = ('qpos', 'qvel', 'site_xpos', 'sensordata')


def _turn_task(name, dmc_task, target_size):
  observe, reward = _make_turn(target_size)
  return Task(
      name=name, domain='finger', dmc_task=dmc_task,
      load_model=lambda: dm_control_model('finger'),
      control_timestep=0.02, episode_length=1000, fields=_FIELDS,
      consts=_consts, init=_init_turn, observe=observe, reward=reward,
      task_state_size=2)


TASKS = {
    # Two physics steps (0.01 s each) per control, for 20 s.
    'FingerSpin': Task(
        name='FingerSpin', domain='finger', dmc_task='spin',
        load_model=_spin_model, control_timestep=0.02, episode_length=1000,
        fields=_FIELDS, consts=_consts, init=_init_spin,
        observe=_observe_spin, reward=_reward_spin),
    'FingerTurnEasy': _turn_task('FingerTurnEasy', 'turn_easy',
                                 _EASY_TARGET_SIZE),
    'FingerTurnHard': _turn_task('FingerTurnHard', 'turn_hard',
                                 _HARD_TARGET_SIZE),
}
