"""Native CPU physics: `mujoco.batch.Batch`, reached from compiled JAX code.

The simulations live on the host, in one persistent `mujoco.batch.Batch`
(one MjData per simulation, stepped on a C thread pool). Compiled code reaches
them through `jax.experimental.buffer_callback` host callbacks: ONE per env
step for all envs, plus one more only on steps where some env terminated.
`EnvState.physics` is an int32 scalar, a version token: each callback
consumes the token the previous one produced, which (a) orders the callbacks
by data dependency inside `jit`, `lax.scan` and `lax.cond`, so no ordered
effects are needed, and (b) lets the host refuse a stale EnvState (stepping a
state that is no longer the latest would silently continue from other
physics), with a clear error.

Why `buffer_callback` (measured on the 2-core dev machine, see
benchmarks/env_throughput.py --callbacks): `io_callback` and `pure_callback`
cost ~160 us per call on top of the physics, mostly `device_put` of the
arguments and copying the results back; `buffer_callback` hands the callback
XLA's own input and output buffers, so the host reads the actions in place and
writes the view straight into the output buffers (float64 -> float32, laid
out [B, ...], one copy), ~10 us per call. With `has_side_effect=True` it is
never dropped or duplicated, and the token fixes its order; it is a public
(experimental) JAX API. It hands a CPU program host memory only, so inside an
accelerator's program (callback='auto', the default) the copying
`io_callback` is used instead, selected at lowering by
`lax.platform_dependent`; both paths run the same host code and are tested
to give identical results.

One step callback does:
  ctrl <- actions; batch.step(nstep=n_substeps, stage=mjSTAGE_VEL), which
  leaves position/velocity fields current at no extra cost (the persistent
  batch continues its next step from those stages), i.e. dm_control's
  legacy_step; copy the task's fields and qpos/qvel out (all into one flat
  float32 buffer, a contiguous [B, ...] block per field, qpos and qvel in
  one: each buffer costs ~1 us of Python per call and each block copy
  ~1.5 us; JAX slices it apart for free); flag envs that failed or whose
  warnings rose; then reset the envs whose time limit
  was reached (their reset qpos/qvel were sampled in JAX before the call) and
  copy their post-reset fields out too.

Divergence: envs that raise in MuJoCo (`mujoco.batch.SimulationError`; they
keep their pre-step state), whose bad-qpos/qvel/qacc warning counters rose
(MuJoCo then resets them itself), both found by the callback, or whose
qpos/qvel are non-finite or beyond mjMAXVAL, found by the compiled code on
the view. `BatchedEnv` terminates and resets them.

Pixel observations (`roxie.envs.pixels`): with a renderer, the same step
callback also draws the envs due for a frame after stepping them (and the
reset envs after resetting them), reading the pixels with mjr_readPixels
straight into its output buffers, on the renderer's own GL thread.

Only one program may drive a given env's host physics at a time, and
`get_host_state`/`set_host_state` must be called between jitted calls (after
`jax.block_until_ready`).
"""

from __future__ import annotations

import os
import time
from typing import Optional, Sequence, Tuple

import jax
import jax.experimental
from jax.experimental.buffer_callback import buffer_callback
import jax.numpy as jnp
import mujoco
import mujoco.batch
import numpy as np

from roxie.envs import common
from roxie.envs import pixels
from roxie.envs import population as population_lib

_VEL = mujoco.mjtStage.mjSTAGE_VEL.value
_NONE = mujoco.mjtStage.mjSTAGE_NONE.value
_BAD_WARNINGS = tuple(int(w) for w in (
    mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
    mujoco.mjtWarning.mjWARN_BADQACC))
_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)
# How compiled code calls the host: 'buffer' (jax.experimental.buffer_callback,
# in place, CPU programs only), 'io' (io_callback: copies, any platform), or
# 'auto': buffer on CPU, io elsewhere (e.g. inside a GPU program).
CALLBACKS = ('auto', 'buffer', 'io')


def _out_of_bounds(view: common.View) -> jax.Array:
  """[B] bool: qpos or qvel non-finite or beyond mjMAXVAL (MuJoCo's 'bad').

  On the float32 view, where it fuses with the task's functions at no cost
  (on the host, two passes over the strided state rows cost 4-12 us a step).
  float32 keeps inf and NaN and represents the limit 1e10 exactly; only
  float64 values within 2**-24 above it round down onto it and pass.
  """
  def bad(x):
    return jnp.any(~(jnp.abs(x) <= common.MAX_STATE_VALUE), axis=1)
  return bad(view['qpos']) | bad(view['qvel'])


class StaleStateError(RuntimeError):
  """An EnvState that is not the latest was handed to the native backend."""


# A batched step whose physics costs at least this much CPU on one thread
# (`physics_step_us` x envs) is split over every core when no `nthread` is
# given. Measured with benchmarks/native_nthread.py (three runs,
# benchmarks/RESULTS.md, 2026-12-02): below ~160 us a step's work is too
# little to split and the pool's hand-offs cost more than the second core
# gives back (CartpoleSwingup and CheetahRun at 8-16 envs: one thread faster
# by 1.3-2x); from ~300 us a second core cuts the wall-clock by up to 1.9x
# at about the same CPU (WalkerWalk, HopperStand and HumanoidStand from 8-16
# envs, CartpoleSwingup and CheetahRun from 64). The estimate itself varies
# by ~25% between runs; near the limit either choice is within ~15%.
PARALLEL_MIN_STEP_US = 250.0


def physics_step_us(model: mujoco.MjModel, n_substeps: int, *,
                    settle: int = 100, steps: int = 20) -> float:
  """CPU microseconds one env's control step costs on one thread, measured.

  On a scratch `MjData` (the batch is not touched): from the model's
  reference configuration, `settle` physics steps with zero control (bodies
  fall into contact, where most of a step's work is), then the best of three
  blocks of `steps` steps, timed by this thread's CPU clock (so other
  processes' load inflates it little), times `n_substeps`. A few
  milliseconds at most (HumanoidStand: ~4 ms).
  """
  data = mujoco.MjData(model)
  mujoco.mj_resetData(model, data)
  for _ in range(settle):
    mujoco.mj_step(model, data)
  best = float('inf')
  for _ in range(3):
    t0 = time.thread_time_ns()
    for _ in range(steps):
      mujoco.mj_step(model, data)
    best = min(best, (time.thread_time_ns() - t0) / steps)
  return 1e-3 * best * n_substeps


def default_nthread(num_envs: int, step_us: float,
                    cpus: Optional[int] = None) -> int:
  """The simulation threads a batch gets by default.

  Args:
    num_envs: the batch size.
    step_us: one env's control step in CPU microseconds on one thread
      (`physics_step_us`).
    cpus: the cores to use for a costly batch; default `os.cpu_count()`.

  Returns:
    1 if the whole batch's step costs less than `PARALLEL_MIN_STEP_US` on one
    thread, else `cpus` (at most one thread per env).
  """
  cpus = os.cpu_count() if cpus is None else cpus
  if num_envs * step_us < PARALLEL_MIN_STEP_US:
    return 1
  return max(1, min(cpus, num_envs))


class NativePhysics(common.Physics):
  """A `mujoco.batch.Batch` of one model; see the module docstring."""

  def __init__(self, model: mujoco.MjModel, task, num_envs: int,
               nthread: Optional[int] = None, callback: str = 'auto',
               extra_fields: Tuple[str, ...] = (), renderer=None,
               pixel_obs=None):
    self.n_substeps = task.n_substeps(model)
    # Given, the thread count is kept (a population's batch gets it too);
    # not given, it follows the batch's measured cost (`default_nthread`).
    self._nthread_given = nthread
    if nthread is None:
      self._step_us = physics_step_us(model, self.n_substeps)
      nthread = default_nthread(num_envs, self._step_us)
    self.batch = mujoco.batch.Batch(model, num_envs, int(nthread),
                                    persistent=True)
    self.model, self.task = model, task
    self.num_envs = num_envs
    self.fields = tuple(f for f in task.fields if f != 'ctrl')
    self.fields += tuple(f for f in extra_fields if f not in self.fields)
    # The view always carries qpos and qvel: divergence by value is checked
    # on them in the compiled code (see `step`).
    self.fields += tuple(f for f in ('qpos', 'qvel') if f not in self.fields)
    shapes = common.field_shapes(model, self.fields)
    self._bound = {f: self.batch.bind(f) for f in self.fields}
    for f in self.fields:  # bind() gives MjData's layout; make sure it is ours.
      assert self._bound[f].shape[1:] == shapes[f], (f, self._bound[f].shape)
    self._ctrl = self.batch.bind('ctrl')
    # qpos and qvel are adjacent in the state rows: check both in one pass.
    start, nq = self.batch._component(mujoco.mjtState.mjSTATE_QPOS)  # pylint: disable=protected-access
    assert self.batch._component(mujoco.mjtState.mjSTATE_QVEL)[0] == start + nq  # pylint: disable=protected-access
    self._posvel = self.batch.state[:, start:start + model.nq + model.nv]
    lo, hi = min(_BAD_WARNINGS), max(_BAD_WARNINGS) + 1
    assert hi - lo == len(_BAD_WARNINGS)
    self._bad_warnings = self.batch.warning[:, lo:hi, 1]  # A view: 'number'.
    self._warn_seen = np.zeros(num_envs, np.int64)
    self._warn_total = 0
    self._version = 0
    self._resync = True  # Nothing stepped yet: adopt the first token seen.
    # Profiling: called as step_hook(t_enter, t_exit) (perf_counter seconds)
    # by every step callback; see benchmarks/env_throughput.py.
    self.step_hook = None

    if callback not in CALLBACKS:
      raise ValueError(
          f'Unknown callback {callback!r}; choose one of {CALLBACKS}.')
    self.callback = callback
    # All view fields travel in one flat float32 buffer (each buffer of a
    # callback costs ~1 us of Python per call) as contiguous [B, n] blocks (a
    # contiguous destination copies twice as fast as columns of a [B, V]
    # matrix), one np.copyto each (~1.5 us at 16 envs): qpos and qvel in one
    # [B, nq + nv] block, as they lie in the state rows, then each other
    # field; JAX slices them apart for free. Each block is
    # (host source [B, n] float64, lo, hi, ((field, col_lo, col_hi, shape),)).
    nq, nv = model.nq, model.nv
    sources = [(self._posvel, (('qpos', 0, nq, shapes['qpos']),
                               ('qvel', nq, nq + nv, shapes['qvel'])))]
    for f in self.fields:
      if f not in ('qpos', 'qvel'):
        src = self._bound[f].reshape(num_envs, -1)
        assert np.may_share_memory(src, self._bound[f]), f  # A live view.
        sources.append((src, ((f, 0, src.shape[1], shapes[f]),)))
    self._blocks = []
    start = 0
    for src, parts in sources:
      size = src.size
      self._blocks.append((src, start, start + size, parts))
      start += size
    flat = jax.ShapeDtypeStruct((start,), jnp.float32)
    two = jax.ShapeDtypeStruct((2, start), jnp.float32)
    div = jax.ShapeDtypeStruct((num_envs,), jnp.bool_)
    # Pixels: host frames, [2, B, ...] in step and reset (after the step or
    # before the reset; after the reset), [B, ...] in init.
    self.renderer = renderer
    frames2 = frames = ()
    if renderer is not None:
      frames2 = (pixel_obs.host_frame_shapes((2, num_envs)),)
      frames = (pixel_obs.host_frame_shapes((num_envs,)),)
    self._step_call = self._staged(self._host_step,
                                   (_TOKEN, two, div) + frames2)
    self._reset_call = self._staged(self._host_reset, (_TOKEN, flat) + frames2)
    self._init_call = self._staged(self._host_init, (_TOKEN, flat) + frames)

  def _staged(self, host, result_shapes):
    """`host(ctx, out, *args)` as a traceable function of args -> out."""
    in_place = buffer_callback(host, result_shapes, has_side_effect=True)

    def copying(*args):
      def run(*args):
        out = jax.tree.map(lambda s: np.empty(s.shape, s.dtype), result_shapes)
        host(None, out, *args)
        return out
      return jax.experimental.io_callback(run, result_shapes, *args)

    if self.callback == 'buffer':
      return in_place
    if self.callback == 'io':
      return copying
    # buffer_callback hands a CPU callback host memory; on an accelerator its
    # buffers are device memory, so there the copying io_callback is used.
    return lambda *args: jax.lax.platform_dependent(
        *args, cpu=in_place, default=copying)

  # -- the Physics interface (traced) --------------------------------------

  def _unpack(self, flat: jax.Array) -> common.View:
    b = self.num_envs
    view = {}
    for _, lo, hi, parts in self._blocks:
      block = flat[lo:hi].reshape(b, -1)
      for f, c0, c1, shape in parts:
        view[f] = block[:, c0:c1].reshape((b,) + shape)
    return view

  def init(self, qpos, qvel):
    token, flat, *frames = self._init_call(
        jnp.concatenate([qpos, qvel], axis=1))
    view = self._unpack(flat)
    if frames:
      view['frames'] = frames[0]
    return token, view

  def step(self, state, ctrl, reset_mask, qpos, qvel, render=None):
    token, views, diverged, *frames = self._step_call(
        state, ctrl, reset_mask, jnp.concatenate([qpos, qvel], axis=1),
        *self._render_args(render))
    view, reset_view = self._unpack(views[0]), self._unpack(views[1])
    diverged = diverged | _out_of_bounds(view)
    if frames:
      view['frames'] = {k: v[0] for k, v in frames[0].items()}
      reset_view['frames'] = {k: v[1] for k, v in frames[0].items()}
    return token, view, reset_view, diverged

  def reset(self, state, mask, qpos, qvel, render=None):
    token, flat, *frames = self._reset_call(
        state, mask, jnp.concatenate([qpos, qvel], axis=1),
        *self._render_args(render))
    view = self._unpack(flat)
    if frames:
      view['final_frames'] = {k: v[0] for k, v in frames[0].items()}
      view['frames'] = {k: v[1] for k, v in frames[0].items()}
    return token, view

  def _render_args(self, render):
    if (render is None) != (self.renderer is None):
      raise ValueError('A render mask goes with a renderer (pixels), only.')
    return () if render is None else (render,)

  # -- host side -------------------------------------------------------------

  def _take_token(self, token) -> None:
    token = int(np.asarray(token))
    if self._resync:
      self._resync = False
    elif token != self._version:
      raise StaleStateError(
          f'The native backend was handed a stale EnvState (physics token '
          f'{token}, host physics at {self._version}): its physics lives on '
          f'the host and only the latest state can be stepped. After '
          f'restoring a checkpoint, call env.set_host_state(...) first.')

  def _give_token(self, out) -> None:
    self._version = (self._version + 1) % (2**31 - 1)
    np.asarray(out)[...] = self._version

  def _note_warnings(self) -> None:
    """Remembers the bad-state warning counts (they only rise until a reset)."""
    self._warn_seen = self._bad_warnings.sum(axis=1)
    self._warn_total = int(self._warn_seen.sum())

  def _find_diverged(self, diverged: np.ndarray) -> None:
    """diverged[i] = env i's bad-state warnings rose (MuJoCo reset it).

    One whole-batch sum; per-env ones only when something is off. Bad
    qpos/qvel values are flagged in the compiled code (`_out_of_bounds`).
    """
    diverged[...] = False
    if int(self._bad_warnings.sum()) != self._warn_total:
      diverged |= self._bad_warnings.sum(axis=1) > self._warn_seen
      self._note_warnings()

  def _copy_view(self, out: np.ndarray, ids=None) -> None:
    """The view's blocks (float64) into the flat float32 `out`, all or some envs."""
    b = self.num_envs
    for src, lo, hi, _ in self._blocks:
      dst = out[lo:hi].reshape(b, -1)
      if ids is None:
        np.copyto(dst, src, casting='same_kind')
      else:
        dst[ids] = src[ids]

  def _reset_rows(self, ids, init, view_out) -> None:
    """mj_resetData, set qpos/qvel, forward to the view's stages; copy out.

    Args:
      ids: the envs to reset, int [n].
      init: [B, nq + nv] float32 qpos and qvel (only rows `ids` are read).
      view_out: the flat float32 view buffer to write the reset envs into.
    """
    ids = None if ids.size == self.num_envs else ids.astype(np.int32)
    rows = slice(None) if ids is None else ids
    self.batch.reset(ids, stage=_NONE)
    self._posvel[rows] = init[rows]
    self.batch.forward(ids, stage=_VEL)
    self._copy_view(view_out, ids)

  def _load(self, i: int, data: mujoco.MjData) -> None:
    """Env i's MjData (all stages current) into `data`, for rendering."""
    self.batch.get_data(i, data)

  def _render(self, ids, frames_out, slot=None) -> None:
    """Draws envs `ids` into the frames buffers (their [slot] part)."""
    rgb, zbuf = (None if a is None else (a if slot is None else a[slot])
                 for a in pixels.host_frames(frames_out))
    self.renderer.render(self._load, ids, rgb, zbuf)

  def _host_step(self, ctx, out, token, ctrl, mask, init, render=None
                 ) -> None:
    del ctx
    t_enter = time.perf_counter() if self.step_hook else 0.0
    token_out, views_out, div_out = out[:3]
    views_out = np.asarray(views_out)
    view_out, reset_out = views_out[0], views_out[1]
    self._take_token(token)
    np.copyto(self._ctrl, np.asarray(ctrl), casting='same_kind')
    failed = None
    try:
      self.batch.step(nstep=self.n_substeps, stage=_VEL)
    except mujoco.batch.SimulationError as e:
      failed = e.ids
    self._copy_view(view_out)

    diverged = np.asarray(div_out)
    self._find_diverged(diverged)
    if failed is not None:
      diverged[failed] = True
    if render is not None:
      self._render(np.flatnonzero(np.asarray(render)), out[3], 0)

    mask = np.asarray(mask)
    if mask.any():
      ids = np.flatnonzero(mask)
      self._reset_rows(ids, np.asarray(init), reset_out)
      self._note_warnings()
      if render is not None:
        self._render(ids, out[3], 1)
    self._give_token(token_out)
    if self.step_hook:
      self.step_hook(t_enter, time.perf_counter())

  def _host_reset(self, ctx, out, token, mask, init, render=None) -> None:
    del ctx
    token_out, view_out = out[:2]
    self._take_token(token)
    if render is not None:  # Final frames, before the reset.
      self._render(np.flatnonzero(np.asarray(render)), out[2], 0)
    mask = np.asarray(mask)
    if mask.any():
      ids = np.flatnonzero(mask)
      self._reset_rows(ids, np.asarray(init), np.asarray(view_out))
      if render is not None:
        self._render(ids, out[2], 1)
    self._note_warnings()
    self._give_token(token_out)

  def _host_init(self, ctx, out, init) -> None:
    del ctx
    token_out, view_out = out[:2]
    self._reset_rows(np.arange(self.num_envs), np.asarray(init),
                     np.asarray(view_out))
    if self.renderer is not None:
      self._render(np.arange(self.num_envs), out[2])
    self._note_warnings()
    self._resync = False
    self._give_token(token_out)

  # -- data parallelism ------------------------------------------------------

  def shard(self, num_envs: int, *, slots: Sequence[int], axis: str,
            nthread: Optional[int] = None) -> 'ShardedNativePhysics':
    """The physics of one shard of a mesh (see `roxie.distributed`).

    Every local shard (a device of this process) gets its own
    `mujoco.batch.Batch` of `num_envs` simulations; this physics is not used.

    Args:
      num_envs: envs per shard.
      slots: for each mesh position, its index among this process's shards,
        or -1 where another process owns the device.
      axis: the mesh axis name (the program picks its shard by
        `lax.axis_index`).
      nthread: simulation threads of this process, split evenly between its
        shards (default: all cores).
    """
    if self.renderer is not None:
      raise NotImplementedError(
          'Sharding a native env with pixel observations over devices is not '
          'supported: build it without a mesh.')
    n_local = max(1, sum(s >= 0 for s in slots))
    total = os.cpu_count() if nthread is None else int(nthread)
    per_shard = max(1, total // n_local)
    parts = [NativePhysics(self.model, self.task, num_envs, per_shard,
                           self.callback) for _ in range(n_local)]
    return ShardedNativePhysics(parts, slots, axis)

  # -- populations ------------------------------------------------------------

  def population(self, population: int) -> 'NativePopulationPhysics':
    """Physics for P members of this env's size, stepped as one batch.

    One new `mujoco.batch.Batch` of P x B simulations, on the threads this
    env was given, else on the default for P x B envs (`default_nthread`).
    Each env step of the whole population is one host callback (see
    `roxie.envs.population`). This physics is not used.
    """
    if self.renderer is not None:
      raise NotImplementedError(
          'A population of native envs with pixel observations is not '
          'supported: the renderer draws one batch per call.')
    size = int(population) * self.num_envs
    nthread = self._nthread_given
    if nthread is None:  # The default for the population's whole batch.
      nthread = default_nthread(size, self._step_us)
    inner = NativePhysics(self.model, self.task, size, nthread,
                          self.callback, extra_fields=self.fields)
    return NativePopulationPhysics(inner, int(population))

  # -- checkpoints -----------------------------------------------------------

  def get_host_state(self) -> np.ndarray:
    """A copy of every simulation's full state, [B, mj_stateSize(INTEGRATION)]."""
    return np.array(self.batch.state, copy=True)

  def set_host_state(self, rows: np.ndarray) -> None:
    """Restores `get_host_state()` rows; the next EnvState handed in is adopted."""
    rows = np.asarray(rows, dtype=self.batch.state.dtype)
    if rows.shape != self.batch.state.shape:
      raise ValueError(f'Expected host state of shape {self.batch.state.shape}, '
                       f'got {rows.shape}.')
    # Counters from before the forward: a restored state that MuJoCo finds
    # bad (and resets itself) is then reported by the next step as diverged.
    self._note_warnings()
    self.batch.state[...] = rows
    try:
      self.batch.forward(stage=_VEL)
    except mujoco.batch.SimulationError:
      pass  # Those envs diverge on their next step and are reset then.
    self._resync = True


class ShardedNativePhysics(common.Physics):
  """Native physics for the shards of this process, picked per device.

  One `NativePhysics` (its own `mujoco.batch.Batch`, threads and version
  token) per local shard; inside `shard_map` each device's program takes the
  `lax.switch` branch of its own shard, so every device's callbacks drive its
  own simulations. Branches of other processes' shards are never taken.
  """

  def __init__(self, parts: Sequence[NativePhysics], slots: Sequence[int],
               axis: str):
    self.parts = list(parts)
    # Shards of other processes map to slot 0; their branch never runs here.
    self.slots = np.asarray([max(s, 0) for s in slots], np.int32)
    self.axis = axis
    self.num_envs = parts[0].num_envs

  def _call(self, method: str, *args):
    fns = [getattr(p, method) for p in self.parts]
    if len(fns) == 1:
      return fns[0](*args)
    slot = jnp.asarray(self.slots)[jax.lax.axis_index(self.axis)]
    return jax.lax.switch(slot, fns, *args)

  def init(self, qpos, qvel):
    return self._call('init', qpos, qvel)

  def step(self, state, ctrl, reset_mask, qpos, qvel):
    return self._call('step', state, ctrl, reset_mask, qpos, qvel)

  def reset(self, state, mask, qpos, qvel):
    return self._call('reset', state, mask, qpos, qvel)

  def get_host_state(self) -> np.ndarray:
    """This process's shards' physics states, [local shards, B / D, S]."""
    return np.stack([p.get_host_state() for p in self.parts])

  def set_host_state(self, rows: np.ndarray) -> None:
    rows = np.asarray(rows)
    if rows.shape[0] != len(self.parts):
      raise ValueError(f'Expected host state for {len(self.parts)} shards, '
                       f'got {rows.shape[0]}.')
    for p, r in zip(self.parts, rows):
      p.set_host_state(r)


class NativePopulationPhysics(population_lib.PopulationPhysics):
  """P members' envs in one `mujoco.batch.Batch` (see roxie.envs.population).

  The members' states are the version token, one copy per member. They are
  equal, except where a member's termination reset was computed and then
  discarded (vmap turns that member's `lax.cond` into a select): such a
  member keeps the token from before the reset call. The host follows the
  newest, so the members' tokens merge by `max`.
  """

  def __init__(self, inner: NativePhysics, population: int):
    super().__init__(
        inner, population, merge_state=jnp.max,
        split_state=lambda token, p: jnp.broadcast_to(token, (p,)))

  def get_host_state(self) -> np.ndarray:
    """Every member's simulations' states, [P, B, S] float64 (a copy)."""
    rows = self.inner.get_host_state()
    return rows.reshape((self.num_members, self.num_envs) + rows.shape[1:])

  def set_host_state(self, rows: np.ndarray) -> None:
    """Restores `get_host_state()` rows ([P, B, S])."""
    rows = np.asarray(rows)
    expected = (self.num_members, self.num_envs)
    if rows.shape[:2] != expected:
      raise ValueError(f'Expected host state for {expected} (members, envs), '
                       f'got {rows.shape[:2]}.')
    self.inner.set_host_state(rows.reshape((-1,) + rows.shape[2:]))
