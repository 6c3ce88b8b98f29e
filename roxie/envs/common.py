"""The backend-independent half of a batched environment.

Both physics backends (MJX and native CPU MuJoCo) run through ONE `BatchedEnv`:
action checking, clipping and scaling, the reset distribution, observation,
reward, termination, divergence handling and auto-reset live here, once. A
backend supplies only the physics, as a `Physics`: three pure functions that
advance, reset and initialise a batch of simulations and hand back the task's
view of them.

Step semantics (the same on every backend):
1. The action [B, A] is checked (shape, at trace time); values outside
   [-1, 1] are clipped and NaNs become 0, both counted per env in
   `info['clipped']` (int32, the number of such dims); then it is mapped
   linearly onto each actuator's ctrlrange (actuators without ctrllimited
   get the action unchanged).
2. Physics advances `n_substeps`; the view describes the state after the step
   with position- and velocity-dependent fields current (dm_control's
   legacy_step). Envs whose time limit is reached on this step
   (`t + 1 == episode_length`) are reset by the same physics call, from reset
   states sampled beforehand, so the common truncation costs no extra call.
3. Observation, reward and termination are computed from the view. An env
   whose physics diverged (non-finite or huge qpos/qvel/qacc, or a MuJoCo
   error) is terminated with reward 0 and `final_obs` equal to the last valid
   observation, and reported in `info['diverged']`.
4. Envs that terminated (rare in the suite) are reset by a second physics call
   under `lax.cond`, only when some env needs it.
5. Where an episode ended, `TimeStep.obs` is the next episode's first
   observation and `final_obs` the observation the step reached; `t` restarts
   at 0. `terminated` and `truncated` are exclusive (a terminal step that is
   also the last one counts as terminated).

Pixel observations (`pixel_obs`, see `roxie.envs.pixels`): observations are
then dicts; the physics calls above also render the envs due for a frame
(after step 2, and the reset envs after their reset), and the termination
reset of step 4 first renders the terminal frame of envs not rendered yet.

Reset distribution: `task.init(key_i, consts)` for env i, vmapped, with
`key_i = split(key, B)[i]`; the physics is then at MuJoCo's defaults
(mj_resetData) with that qpos/qvel, and forwarded. It is pure JAX, so both
backends start from identical states given the same key.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from roxie.envs.presets import apply_preset, check_preset
from roxie.envs.task import Task, flatten_observation
from roxie.types import EnvSpec, EnvState, TimeStep

View = Dict[str, jax.Array]
# View entries that are not task fields: rendered frames ('frames': the
# state's, 'final_frames': before a reset) and 'sensordata' for pixel
# observations' sensors; see roxie.envs.pixels.
EXTRAS = ('frames', 'final_frames', 'sensordata')

# MuJoCo's mjMAXVAL: mj_checkPos/Vel/Acc call a state bad beyond it.
MAX_STATE_VALUE = 1e10


def prepare_model(task: Task, physics: str = 'dm_control') -> mujoco.MjModel:
  """The task's model as both backends simulate it.

  A copy of `task.load_model()` with `mjENBL_ENERGY` cleared unless the task
  reads `energy`: the flag only computes `d.energy` (no effect on dynamics)
  and MJX rejects it. `opt` fields are runtime options of a compiled model, so
  no recompilation through `MjSpec` is needed; the same model then goes to
  both backends.

  Args:
    task: the task.
    physics: the solver preset (`roxie.envs.presets`): 'dm_control' keeps the
      suite's options, 'playground' sets mujoco_playground's.

  Returns:
    A fresh `mujoco.MjModel`, owned by the caller.
  """
  check_preset(physics)
  model = copy.copy(task.load_model())
  apply_preset(model, task.domain, physics)
  if 'energy' not in task.fields:
    model.opt.enableflags &= ~int(mujoco.mjtEnableBit.mjENBL_ENERGY)
  return model


def field_shapes(model: mujoco.MjModel,
                 fields: Tuple[str, ...]) -> Dict[str, Tuple[int, ...]]:
  """Per-env shape of each view field, as MjData lays it out.

  Rotation matrices are flat rows ([n, 9]), as MjData stores them.

  Args:
    model: the model.
    fields: MjData field names.

  Returns:
    {field: shape}, in the order of `fields`.
  """
  data = mujoco.MjData(model)
  shapes = {}
  for name in fields:
    value = getattr(data, name, None)
    if not isinstance(value, np.ndarray):
      raise ValueError(f'View field {name!r} is not an MjData array field.')
    shapes[name] = tuple(value.shape)
  return shapes


def select(mask: jax.Array, a: Any, b: Any) -> Any:
  """`where(mask, a, b)` over matching pytrees, `mask` [B] broadcast per leaf."""
  def pick(x, y):
    m = jnp.reshape(mask, mask.shape + (1,) * (x.ndim - mask.ndim))
    return jnp.where(m, x, y)
  return jax.tree.map(pick, a, b)


class ResetSample(NamedTuple):
  """Sampled initial states for a batch: qpos [B, nq], qvel [B, nv], task_state [B, K]."""
  qpos: jax.Array
  qvel: jax.Array
  task_state: jax.Array


class Physics:
  """What a backend supplies: a batch of simulations, functionally.

  `state` is the backend's `EnvState.physics`. Views are dicts of float32
  [B, ...] arrays for the task's fields except `ctrl` (which BatchedEnv adds).

  A backend built with a renderer (pixel observations) takes a `render` [B]
  bool mask in `step` and `reset`, and adds to its views `'frames'`, the host
  frames {'rgb', 'zbuf'} (`PixelObs.host_frame_shapes`) of the view's state:
  after `init` of every env, after `step` of the envs in `render` (the rest
  undefined), after a reset of the reset envs; `reset` also returns
  `'final_frames'`, of the envs in `render` BEFORE the reset.
  """

  def init(self, qpos: jax.Array, qvel: jax.Array) -> Tuple[Any, View]:
    """All envs at defaults with qpos/qvel, forwarded: (state, view)."""
    raise NotImplementedError

  def step(self, state: Any, ctrl: jax.Array, reset_mask: jax.Array,
           qpos: jax.Array, qvel: jax.Array
           ) -> Tuple[Any, View, View, jax.Array]:
    """Advance every env one control step with `ctrl` [B, nu].

    Then reset the envs in `reset_mask` [B] to qpos/qvel.

    Returns:
      (state, view after the step, view after the reset (meaningful only where
      `reset_mask`), diverged [B] bool).
    """
    raise NotImplementedError

  def reset(self, state: Any, mask: jax.Array, qpos: jax.Array,
            qvel: jax.Array) -> Tuple[Any, View]:
    """Reset the envs in `mask`: (state, view, meaningful only where mask)."""
    raise NotImplementedError


def _control_map(model: mujoco.MjModel):
  """(offset, scale) such that ctrl = offset + scale * action, per actuator."""
  limited = np.asarray(model.actuator_ctrllimited, bool)
  lo, hi = np.asarray(model.actuator_ctrlrange, np.float64).T
  offset = np.where(limited, 0.5 * (hi + lo), 0.0).astype(np.float32)
  scale = np.where(limited, 0.5 * (hi - lo), 1.0).astype(np.float32)
  return offset, scale


@dataclasses.dataclass(frozen=True, eq=False)
class BatchedEnv:
  """A batch of `num_envs` environments of one task on one physics backend.

  Frozen and hashed by identity, so it can be closed over by, or passed as a
  static argument to, jitted functions. `reset` and `step` are pure JAX
  (the native backend's host physics is reached by callbacks whose order is
  fixed by data dependencies), and compose with `jit`, `lax.scan`, `lax.cond`.

  Attributes:
    spec: what a learner needs to know (sizes, timestep, episode length).
    num_envs: B.
    task: the task definition.
    backend: 'cpu' or 'mjx'.
    model: the `mujoco.MjModel` both backends simulate (do not mutate).
    physics: the backend's `Physics`.
    consts: the task's model constants.
  """
  spec: EnvSpec
  num_envs: int
  task: Task
  backend: str
  model: mujoco.MjModel
  physics: Physics
  consts: Mapping[str, Any]
  # Dict observations (pixels, depth, sensors, state): a
  # `roxie.envs.pixels.PixelObs`, or None for the flat state vector.
  pixel_obs: Optional[Any] = None

  # -- construction -------------------------------------------------------

  @staticmethod
  def build_spec(task: Task, model: mujoco.MjModel, consts: Mapping[str, Any],
                 episode_length: int) -> EnvSpec:
    """The EnvSpec of `task` on `model`, by tracing its `observe` abstractly."""
    shapes = field_shapes(model, task.fields)
    view = {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}
    ts = jax.ShapeDtypeStruct((task.task_state_size,), jnp.float32)
    parts = jax.eval_shape(lambda v, t: task.observe(v, t, consts), view, ts)
    names = tuple((k, int(np.prod(v.shape))) for k, v in parts.items())
    return EnvSpec(
        task=task.name, obs_size=sum(n for _, n in names),
        action_size=int(model.nu), obs_names=names,
        control_timestep=float(task.control_timestep),
        episode_length=int(episode_length))

  # -- pieces shared by reset and step -------------------------------------

  def _sample(self, key: jax.Array) -> ResetSample:
    keys = jax.random.split(key, self.num_envs)
    qpos, qvel, ts = jax.vmap(lambda k: self.task.init(k, self.consts))(keys)
    return ResetSample(
        jnp.asarray(qpos, jnp.float32).reshape(self.num_envs, self.model.nq),
        jnp.asarray(qvel, jnp.float32).reshape(self.num_envs, self.model.nv),
        jnp.asarray(ts, jnp.float32).reshape(
            self.num_envs, self.task.task_state_size))

  def _sample_if(self, key: jax.Array, mask: jax.Array) -> ResetSample:
    """Reset states where `mask` (the rest zeros); sampled only if any(mask)."""
    zeros = ResetSample(
        jnp.zeros((self.num_envs, self.model.nq), jnp.float32),
        jnp.zeros((self.num_envs, self.model.nv), jnp.float32),
        jnp.zeros((self.num_envs, self.task.task_state_size), jnp.float32))
    return jax.lax.cond(jnp.any(mask), lambda: self._sample(key),
                        lambda: zeros)

  @staticmethod
  def _extras(view: View) -> View:
    return {k: view[k] for k in EXTRAS if k in view}

  def _render_kwargs(self, mask: jax.Array) -> Dict[str, jax.Array]:
    renders = self.pixel_obs is not None and self.pixel_obs.spec.renders
    return {'render': mask} if renders else {}

  def _with_ctrl(self, view: View, ctrl: jax.Array) -> View:
    if 'ctrl' in self.task.fields:
      view = dict(view, ctrl=ctrl)
    return {k: view[k] for k in self.task.fields}

  def _observe(self, view: View, task_state: jax.Array) -> jax.Array:
    fn = lambda v, t: flatten_observation(self.task.observe(v, t, self.consts))
    return jax.vmap(fn)(view, task_state)

  def _evaluate(self, view: View, task_state: jax.Array):
    """(obs [B, O], reward [B], terminate [B]) of the post-step view."""
    c = self.consts
    obs = self._observe(view, task_state)
    reward = jax.vmap(lambda v, t: self.task.reward(v, t, c))(view, task_state)
    if self.task.terminate is None:
      term = jnp.zeros((self.num_envs,), bool)
    else:
      term = jax.vmap(lambda v, t: self.task.terminate(v, t, c))(
          view, task_state)
    return obs, jnp.asarray(reward, jnp.float32), jnp.asarray(term, bool)

  def _actions(self, action: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """(ctrl [B, nu] float32, number of clipped dims per env int32 [B])."""
    expected = (self.num_envs, self.spec.action_size)
    if tuple(action.shape) != expected:
      raise ValueError(
          f'{self.spec.task}: expected an action of shape {expected} '
          f'(num_envs, action_size), got {tuple(action.shape)}.')
    action = jnp.asarray(action, jnp.float32)
    outside = ~(jnp.abs(action) <= 1.0)  # NaN counts as outside.
    clipped = jnp.sum(outside, axis=1, dtype=jnp.int32)
    action = jnp.clip(jnp.nan_to_num(action, nan=0.0), -1.0, 1.0)
    offset, scale = _control_map(self.model)
    return offset[None] + scale[None] * action, clipped

  def _outcome(self, state: EnvState, view: View, ctrl: jax.Array,
               diverged: jax.Array, time_up: jax.Array,
               render: Optional[jax.Array], boundary: Optional[jax.Array]
               ) -> Tuple[Any, jax.Array, jax.Array]:
    """What one step reached, before any reset (step's stage 3).

    Args:
      state: the EnvState the step started from.
      view: the physics' post-step view.
      ctrl: [B, nu] the control applied.
      diverged: [B] bool, envs whose physics blew up.
      time_up: [B] bool, envs at their time limit.
      render, boundary: [B] bool pixel cadence masks (None without pixels).

    Returns:
      (final_obs [B, O] (or the pixel dict), reward [B] float32,
      terminated [B] bool, divergence included).
    """
    px = self.pixel_obs
    extra = self._extras(view)
    # Finite inputs for the task functions even where physics blew up.
    view = jax.tree.map(jnp.nan_to_num, self._with_ctrl(view, ctrl))
    final_obs, reward, term = self._evaluate(view, state.task_state)
    reward = jnp.where(diverged, 0.0, jnp.nan_to_num(reward))
    terminated = term | diverged
    done = terminated | time_up
    final_obs = jnp.nan_to_num(final_obs)
    if px is not None:
      final_obs = px.advance(state.obs, final_obs, extra, render,
                             boundary | done)
    final_obs = select(diverged, state.obs, final_obs)
    return final_obs, reward, terminated

  def _reset_late(self, term_key: jax.Array, late: jax.Array,
                  render: Optional[jax.Array], diverged: jax.Array, args):
    """Resets the envs that terminated (`late` [B]) with a second call.

    Pixels: their final frame, unless rendered already, is drawn by that call
    before it resets them.

    Args:
      term_key: PRNG key for their reset states.
      late: [B] bool, envs terminated before their time limit.
      render: [B] bool, envs rendered by the step call (None without pixels).
      diverged: [B] bool.
      args: (physics, reset_view, init, final_obs) as the step left them.

    Returns:
      `args` with the late envs reset (and their final frames drawn).
    """
    physics, reset_view, init, final_obs = args
    late_init = self._sample(term_key)
    unrendered = None if render is None else late & ~render & ~diverged
    physics, late_view = self.physics.reset(
        physics, late, late_init.qpos, late_init.qvel,
        **self._render_kwargs(unrendered))
    if 'final_frames' in late_view:
      final_obs = self.pixel_obs.replace_newest(
          final_obs, late_view.pop('final_frames'), unrendered)
    return (physics, select(late, late_view, reset_view),
            select(late, late_init, init), final_obs)

  def _first_obs(self, done: jax.Array, reset_view: View, init,
                 final_obs):
    """The next observation: a fresh episode's first where `done` [B]."""
    zero_ctrl = jnp.zeros((self.num_envs, self.model.nu), jnp.float32)
    rview = jax.tree.map(jnp.nan_to_num,
                         self._with_ctrl(reset_view, zero_ctrl))
    first_obs = jnp.nan_to_num(self._observe(rview, init.task_state))
    if self.pixel_obs is not None:
      first_obs = self.pixel_obs.first(first_obs, self._extras(reset_view))
    return select(done, first_obs, final_obs)

  # -- the Env protocol -----------------------------------------------------

  def reset(self, key: jax.Array) -> EnvState:
    """Starts every env in a fresh episode.

    Args:
      key: PRNG key for the reset distribution (this and later episodes).

    Returns:
      The EnvState, `t` = 0.
    """
    key, init_key = jax.random.split(key)
    init = self._sample(init_key)
    physics, view = self.physics.init(init.qpos, init.qvel)
    extra = self._extras(view)
    view = self._with_ctrl(
        view, jnp.zeros((self.num_envs, self.model.nu), jnp.float32))
    obs = jnp.nan_to_num(self._observe(view, init.task_state))
    if self.pixel_obs is not None:
      obs = self.pixel_obs.first(obs, extra)
    return EnvState(obs=obs, t=jnp.zeros((self.num_envs,), jnp.int32),
                    task_state=init.task_state, key=key, physics=physics)

  def step(self, state: EnvState, action: jax.Array
           ) -> Tuple[EnvState, TimeStep]:
    """Advances every env one control step, resetting finished episodes.

    Args:
      state: the current EnvState.
      action: [B, A] in [-1, 1] (values outside are clipped and counted).

    Returns:
      (next EnvState, TimeStep); see the module docstring for semantics.
    """
    ctrl, clipped = self._actions(action)
    time_up = state.t + 1 >= self.spec.episode_length
    key, trunc_key, term_key = jax.random.split(state.key, 3)

    # Time-limit resets are known now: sample them and let the physics call
    # that steps also reset those envs.
    trunc_init = self._sample_if(trunc_key, time_up)
    px = self.pixel_obs
    if px is not None:  # Frames to render: on the cadence and final ones.
      boundary, render = px.cadence(state.t + 1)
      render = render | time_up
    else:
      boundary = render = None
    physics, view, reset_view, diverged = self.physics.step(
        state.physics, ctrl, time_up, trunc_init.qpos, trunc_init.qvel,
        **self._render_kwargs(render))
    final_obs, reward, terminated = self._outcome(
        state, view, ctrl, diverged, time_up, render, boundary)
    truncated = time_up & ~terminated
    done = terminated | time_up

    # Terminations are known only now: reset those envs with a second call.
    late = terminated & ~time_up
    physics, reset_view, init, final_obs = jax.lax.cond(
        jnp.any(late),
        functools.partial(self._reset_late, term_key, late, render, diverged),
        lambda args: args, (physics, reset_view, trunc_init, final_obs))

    task_state = select(done, init.task_state, state.task_state)
    obs = jax.lax.cond(
        jnp.any(done),
        functools.partial(self._first_obs, done, reset_view, init),
        lambda o: o, final_obs)

    t = jnp.where(done, 0, state.t + 1).astype(jnp.int32)
    next_state = EnvState(obs=obs, t=t, task_state=task_state, key=key,
                          physics=physics)
    timestep = TimeStep(obs=obs, reward=reward, terminated=terminated,
                        truncated=truncated, final_obs=final_obs,
                        info={'clipped': clipped, 'diverged': diverged})
    return next_state, timestep
