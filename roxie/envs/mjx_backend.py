"""MJX physics: a batch of `mjx.Data`, vmapped, pure JAX end to end.

`EnvState.physics` is the batched `mjx.Data` ([B, ...] leaves).

The task's view must describe the state after the step with position- and
velocity-dependent fields current (dm_control's legacy_step: mj_step2 then
mj_step1). Rather than `n_substeps` calls to `mjx.step` plus an extra
`mjx.forward` for the view (n + 1 position stages per control step, twice the
collision work when n = 1, as in cheetah), each substep here is MuJoCo's split
step in the order legacy_step uses: the state carried between steps already
has its position/velocity stages current, so a substep is

  step2 (actuation with the NEW ctrl, acceleration, constraint solve,
         acceleration sensors, integration)  then  step1 (position and
         velocity stages and sensors at the new state),

which costs exactly n forwards per control step and leaves the view current.
Measured (2-core CPU, shared, CheetahRun, 64 envs, impl 'jax'): split step
1,902 env steps/s and 46 s compile, against 1,094 env steps/s and 71 s for
`mjx.step` followed by `mjx.forward`.
The RK4 integrator evaluates forward dynamics inside the integrator, so for
RK4 models (cartpole, acrobot) a substep is `mjx.step` and one step1 follows
the last one (n forwards + one position/velocity stage), as dm_control does.
With impl='warp' (MuJoCo Warp physics: Warp kernels called from the program
through XLA's FFI, on CUDA or on Warp's CPU device) the stages are not
separately callable; there each control step is n `mjx.step` calls plus one
`mjx.forward` for the view. MuJoCo Warp keeps one contact pool for all the
worlds of a batch: those leaves of `mjx.Data` (`contact__*`, `nacon`,
`ncollision`) have no [B] axis, so a per-env reset selects only the
per-world leaves and keeps the pool (contacts are derived state: the next
step's collision pass rebuilds it from the positions). The pool holds
`naconmax` contacts for the whole batch and each world `njmax` constraint
rows; the defaults are this model's static bounds under impl 'jax' (every
candidate pair at its most contacts: 35 per env on CheetahRun, 177 on
HumanoidWalk) times the batch size, so a step cannot fill them unless Warp
finds more contacts per pair than those bounds; if one does, the step
raises `WarpOverflowError` (naming the counts and the option to raise)
rather than dropping contacts silently. The counts checked are those of a
control step's last collision pass (the view's `mjx.forward`), inside the
same `lax.cond` pattern as the per-step reset.

Pixel observations (`roxie.envs.pixels`): by default frames are drawn on the
host by MuJoCo's OpenGL renderer, through a `jax.pure_callback` that receives
the poses (qpos, mocap) of the envs' MJX state, puts them into an MjData and
runs mj_fwdPosition before drawing; this works everywhere (from a GPU program
the callback copies the poses to the host and the frames back). With
`PixelSpec(renderer='warp')` (or 'auto' where Warp is installed) the same
poses go to MJX's batch renderer instead (`roxie.envs.warp_render`: MuJoCo
Warp's ray tracer, inside the program, on CUDA or Warp's CPU device), with
either impl. Both give the same observation layout and dtypes.
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx
import numpy as np

from roxie.envs import common

IMPLS = ('jax', 'warp')


class WarpOverflowError(RuntimeError):
  """A MuJoCo Warp step needed more contacts or constraints than allocated."""


def _static_bounds(model: mujoco.MjModel) -> Tuple[int, int]:
  """(contacts, constraint rows) per env: impl 'jax''s static allocation."""
  try:
    d = mjx.make_data(mjx.put_model(model, impl='jax'), impl='jax')
    return (int(d._impl.contact.dist.shape[0]),  # pylint: disable=protected-access
            int(d._impl.efc_J.shape[0]))  # pylint: disable=protected-access
  except NotImplementedError:  # Geometry only Warp simulates: a guess.
    return 8 * int(model.ngeom), 4 * (8 * int(model.ngeom)) + int(model.nv)


def _raise_overflow(nacon, naconmax, nefc, njmax):
  raise WarpOverflowError(
      f'MuJoCo Warp overflowed its buffers: {int(nacon)} contacts for a pool '
      f'of naconmax={int(naconmax)} (the whole batch), or up to '
      f'{int(nefc)} constraint rows in one env for njmax={int(njmax)}. '
      'Rebuild the env with larger ones: roxie.envs.make(..., '
      "impl='warp', naconmax=N, njmax=M).")


def _step1(m: mjx.Model, d: mjx.Data) -> mjx.Data:
  """Position- and velocity-dependent stages and sensors (mj_step1)."""
  d = mjx.fwd_position(m, d)
  d = mjx.sensor_pos(m, d)
  d = mjx.fwd_velocity(m, d)
  return mjx.sensor_vel(m, d)


def _step2(m: mjx.Model, d: mjx.Data) -> mjx.Data:
  """The rest of mjx.step after step1: as mjx.forward's tail, then integrate."""
  d = mjx.fwd_actuation(m, d)
  d = mjx.fwd_acceleration(m, d)
  if d._impl.efc_J.size == 0:  # pylint: disable=protected-access
    d = d.replace(qacc=d.qacc_smooth)
  else:
    d = mjx.solve(m, d)
    d = mjx.sensor_acc(m, d)
  if m.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER:
    return mjx.euler(m, d)
  if m.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST:
    return mjx.implicit(m, d)
  raise NotImplementedError(
      f'MJX split step: integrator {m.opt.integrator} not supported.')


def _allow_rank_promotion(fn):
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with jax.numpy_rank_promotion('allow'):
      return fn(*args, **kwargs)
  return wrapped


def _field(d: mjx.Data, name: str) -> jax.Array:
  value = getattr(d, name, None)
  if value is None:
    value = getattr(d._impl, name)  # pylint: disable=protected-access
  return value


class MjxPhysics(common.Physics):
  """A batch of MJX simulations of one model; see the module docstring."""

  def __init__(self, model: mujoco.MjModel, task, num_envs: int,
               impl: str = 'jax', extra_fields: Tuple[str, ...] = (),
               renderer=None, pixel_obs=None, naconmax: Optional[int] = None,
               njmax: Optional[int] = None):
    if impl not in IMPLS:
      raise ValueError(f'Unknown MJX impl {impl!r}; choose one of {IMPLS}.')
    if impl == 'warp':
      from roxie.envs import warp_render  # pylint: disable=g-import-not-at-top
      if not warp_render.warp_installed():
        raise ValueError(
            "MJX impl='warp' needs NVIDIA Warp, which is not installed: "
            f"{warp_render.install_hint()}; or use impl='jax'.")
    elif naconmax is not None or njmax is not None:
      raise ValueError("naconmax and njmax size MuJoCo Warp's buffers: "
                       "impl='warp' only.")
    try:
      self.mx = mjx.put_model(model, impl=impl)
    except NotImplementedError as e:
      raise NotImplementedError(
          f'MJX (impl={impl!r}) cannot simulate task {task.name!r}: {e}') from e
    self.impl = impl
    self.model, self.task = model, task
    self.num_envs = num_envs
    self.n_substeps = task.n_substeps(model)
    self.fields = tuple(f for f in task.fields if f != 'ctrl')
    self.fields += tuple(f for f in extra_fields if f not in self.fields)
    self.renderer = renderer
    self._warp_frames = getattr(renderer, 'name', None) == 'warp'
    if renderer is not None and not self._warp_frames:
      self._frame_shapes = pixel_obs.host_frame_shapes((num_envs,))
    self.shapes = common.field_shapes(model, self.fields)
    self.split = (impl == 'jax' and model.opt.integrator in (
        mujoco.mjtIntegrator.mjINT_EULER,
        mujoco.mjtIntegrator.mjINT_IMPLICITFAST))
    if impl == 'warp':
      contacts, rows = _static_bounds(model)
      self.naconmax = int(num_envs * contacts if naconmax is None
                          else naconmax)
      # At least one row: a model without constraints (a pendulum) has 0.
      self.njmax = int(max(rows, 1) if njmax is None else njmax)
      if self.naconmax < 0 or self.njmax < 1:
        raise ValueError(f'naconmax ({self.naconmax}) must be >= 0 and njmax '
                         f'({self.njmax}) >= 1.')
      self.template = None  # Warp's Data is made per world, under vmap.
      self._per_world = self._warp_per_world_leaves(num_envs)
    else:
      self.template = mjx.make_data(self.mx)

  # -- MuJoCo Warp: the batch's shared contact pool -------------------------

  def _warp_data(self) -> mjx.Data:
    """One world's Data (call under vmap: the pool comes out unbatched)."""
    return mjx.make_data(self.model, impl='warp', naconmax=self.naconmax,
                         njmax=self.njmax)

  def _warp_per_world_leaves(self, b: int) -> Tuple[bool, ...]:
    """Per leaf of a batch's Data: whether it has the [B] axis of worlds.

    A leaf whose batched shape is (B,) + its one-world shape belongs to a
    world; the others (the contact pool and its counters) are shared. Read
    from shapes only (jax.eval_shape), not from MJX's private tables.
    """
    one = jax.eval_shape(self._warp_data)
    many = jax.eval_shape(jax.vmap(lambda _: self._warp_data()),
                          jnp.zeros((b,)))
    return tuple(tuple(m.shape) == (b,) + tuple(o.shape) for o, m in zip(
        jax.tree.leaves(one), jax.tree.leaves(many)))

  def _select(self, mask: jax.Array, fresh: mjx.Data, d: mjx.Data) -> mjx.Data:
    """Per-env reset: `fresh` where `mask`, else `d`; the shared pool is d's."""
    if self.impl != 'warp':
      return common.select(mask, fresh, d)
    leaves_f, treedef = jax.tree.flatten(fresh)
    leaves_d = jax.tree.leaves(d)
    out = [common.select(mask, f, x) if own else x
           for f, x, own in zip(leaves_f, leaves_d, self._per_world)]
    return jax.tree.unflatten(treedef, out)

  def _check_overflow(self, d: mjx.Data) -> None:
    """Raises WarpOverflowError (from the program) if a buffer overflowed."""
    if self.impl != 'warp':
      return
    impl = d._impl  # pylint: disable=protected-access
    nacon = jnp.maximum(jnp.max(impl.nacon), jnp.max(impl.ncollision))
    nefc = jnp.max(d._impl.nefc)  # pylint: disable=protected-access
    over = (nacon > self.naconmax) | (nefc > self.njmax)
    naconmax, njmax = self.naconmax, self.njmax

    def fail(nacon, nefc):
      jax.debug.callback(
          lambda a, e: _raise_overflow(a, naconmax, e, njmax), nacon, nefc)

    jax.lax.cond(over, fail, lambda *_: None, nacon, nefc)

  def shard(self, num_envs: int, *, slots=None, axis=None,
            nthread=None) -> 'MjxPhysics':
    """The physics of one shard of a mesh (see `roxie.distributed`).

    Pure JAX: every device runs the same `num_envs` simulations' program
    inside `shard_map` on its own part of the state, so the shard is this
    physics at the shard's batch size (`slots`, `axis` and `nthread`, the
    native backend's concerns, are ignored).
    """
    del slots, axis, nthread
    self._refuse_warp('Sharding an env over devices')
    if self.renderer is not None:
      raise NotImplementedError(
          'Sharding an MJX env with pixel observations over devices is not '
          'supported: build it without a mesh.')
    return MjxPhysics(self.model, self.task, num_envs, self.impl)

  def population(self, population: int):
    """Physics for P members of this env's size: one batch of P x B.

    Pure JAX, so plain vmap would work too; one batch keeps the termination
    reset (a `lax.cond` on any env of the batch) a branch, where vmap would
    make it a select that resets every env on every step
    (see `roxie.envs.population`).
    """
    from roxie.envs import population as population_lib  # pylint: disable=g-import-not-at-top
    self._refuse_warp('A population of envs')
    if self.renderer is not None:
      raise NotImplementedError(
          'A population of MJX envs with pixel observations is not '
          'supported yet.')
    p = int(population)
    inner = MjxPhysics(self.model, self.task, p * self.num_envs, self.impl,
                       extra_fields=self.fields)
    return population_lib.PopulationPhysics(
        inner, p,
        merge_state=lambda d: jax.tree.map(population_lib.flatten_members, d),
        split_state=lambda d, p: jax.tree.map(
            lambda x: population_lib.split_members(x, p), d))

  def _refuse_warp(self, what: str) -> None:
    if self.impl == 'warp':
      raise NotImplementedError(
          f"{what} with impl='warp' physics is not supported: MuJoCo Warp's "
          'contact pool is shared by the whole batch, so it cannot be split '
          "into members or shards. Use impl='jax' (or one env batch).")

  # -- per-env pieces (vmapped below) -------------------------------------

  def _fresh(self, qpos: jax.Array, qvel: jax.Array) -> mjx.Data:
    """mj_resetData, then qpos/qvel, then the stages the view needs."""
    template = self._warp_data() if self.impl == 'warp' else self.template
    d = template.replace(qpos=qpos.astype(template.qpos.dtype),
                         qvel=qvel.astype(template.qvel.dtype))
    if self.impl == 'jax':
      return _step1(self.mx, d)
    return mjx.forward(self.mx, d)

  def _advance(self, d: mjx.Data) -> mjx.Data:
    """One control step (n substeps), the view's stages current after it."""
    m = self.mx
    if self.split:
      body = lambda d, _: (_step1(m, _step2(m, d)), None)
      return jax.lax.scan(body, d, None, length=self.n_substeps)[0]
    d = jax.lax.scan(lambda d, _: (mjx.step(m, d), None), d, None,
                     length=self.n_substeps)[0]
    return _step1(m, d) if self.impl == 'jax' else mjx.forward(m, d)

  def _view(self, d: mjx.Data) -> common.View:
    b = self.num_envs
    return {f: _field(d, f).reshape((b,) + self.shapes[f]).astype(jnp.float32)
            for f in self.fields}

  # -- pixels: host rendering from the MJX poses ----------------------------

  def _host_frames(self, mask, qpos, mocap_pos, mocap_quat):
    out = {k: np.zeros(s.shape, s.dtype) for k, s in self._frame_shapes.items()}
    m = self.renderer.model
    qpos, mocap_pos, mocap_quat = (np.asarray(a, np.float64) for a in
                                   (qpos, mocap_pos, mocap_quat))

    def load(i, d):
      d.qpos[:] = qpos[i]
      if m.nmocap:
        d.mocap_pos[:] = mocap_pos[i]
        d.mocap_quat[:] = mocap_quat[i]
      mujoco.mj_fwdPosition(m, d)

    self.renderer.render(load, np.flatnonzero(np.asarray(mask)),
                         out.get('rgb'), out.get('zbuf'))
    return out

  def _frames(self, d: mjx.Data, mask: jax.Array, token=None):
    """(frames of the envs in `mask` (the rest zeros or any), token).

    Host frames come from a pure_callback; Warp frames from MJX's renderer,
    whose calls in one program are ordered by passing on the token.
    """
    if self._warp_frames:
      return self.renderer.frames(d.qpos, d.mocap_pos, d.mocap_quat, mask,
                                  token)
    return jax.pure_callback(self._host_frames, self._frame_shapes, mask,
                             d.qpos, d.mocap_pos, d.mocap_quat), token

  def _check_render(self, render: Optional[jax.Array]) -> None:
    if (render is None) != (self.renderer is None):
      raise ValueError('A render mask goes with a renderer (pixels), only.')

  @staticmethod
  def _diverged(d: mjx.Data) -> jax.Array:
    def bad(x):
      return jnp.any(~(jnp.abs(x) <= common.MAX_STATE_VALUE), axis=-1)
    return bad(d.qpos) | bad(d.qvel) | bad(d.qacc)

  # -- the Physics interface ---------------------------------------------
  # MJX relies on NumPy rank promotion internally; allow it within its calls
  # whatever the caller's setting (roxie's tests set 'raise').

  @_allow_rank_promotion
  def init(self, qpos, qvel) -> Tuple[Any, common.View]:
    d = jax.vmap(self._fresh)(qpos, qvel)
    view = self._view(d)
    if self.renderer is not None:
      view['frames'], _ = self._frames(d, jnp.ones((self.num_envs,), bool))
    return d, view

  @_allow_rank_promotion
  def step(self, state, ctrl, reset_mask, qpos, qvel, render=None):
    self._check_render(render)
    d = state.replace(ctrl=ctrl.astype(state.ctrl.dtype))
    d = jax.vmap(self._advance)(d)
    self._check_overflow(d)
    view = self._view(d)
    token = None
    if render is not None:
      view['frames'], token = self._frames(d, render)
    diverged = self._diverged(d)

    def do_reset(operand):
      d, token = operand
      fresh = jax.vmap(self._fresh)(qpos, qvel)
      fresh_view = self._view(fresh)
      if render is not None:
        fresh_view['frames'], _ = self._frames(fresh, reset_mask, token)
      return self._select(reset_mask, fresh, d), fresh_view
    d, reset_view = jax.lax.cond(jnp.any(reset_mask), do_reset,
                                 lambda operand: (operand[0], view),
                                 (d, token))
    return d, view, reset_view, diverged

  @_allow_rank_promotion
  def reset(self, state, mask, qpos, qvel, render=None):
    self._check_render(render)
    fresh = jax.vmap(self._fresh)(qpos, qvel)
    view = self._view(fresh)
    if render is not None:
      view['final_frames'], token = self._frames(state, render)
      view['frames'], _ = self._frames(fresh, mask, token)
    return self._select(mask, fresh, state), view
