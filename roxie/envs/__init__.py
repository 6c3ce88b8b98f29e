"""Environments: the suite's tasks on two physics backends, one interface.

  env = roxie.envs.make('CheetahRun', backend='cpu', num_envs=64)
  state = env.reset(jax.random.key(0))
  state, timestep = env.step(state, action)  # action [64, A] in [-1, 1]

`backend='cpu'` simulates natively (`mujoco.batch`, host callbacks from the
compiled program); `backend='mjx'` simulates in JAX (`mujoco.mjx`). Both run
the same task functions on the same view of physics, with the semantics in
`roxie.envs.common`, so a policy trained on one runs on the other.

`pixels=PixelSpec(...)` makes observations dicts of camera frames, depth,
sensors and the state vector, rendered inside the compiled program on either
backend; see `roxie.envs.pixels`.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Optional, Tuple, Union

import numpy as np

from roxie.envs import common
from roxie.envs.pixels import PixelSpec
from roxie.envs.presets import DEFAULT_PHYSICS, PHYSICS_PRESETS
from roxie.envs.task import Task
from roxie.envs.tasks import TASKS, get_task

BACKENDS = ('cpu', 'mjx')


def list_tasks() -> Tuple[str, ...]:
  """Names of the registered tasks, sorted."""
  return tuple(sorted(TASKS))


@dataclasses.dataclass(frozen=True, eq=False)
class NativeEnv(common.BatchedEnv):
  """A `BatchedEnv` on native CPU physics, with host state access."""

  def get_host_state(self) -> np.ndarray:
    """Every env's full physics state (mjSTATE_INTEGRATION rows), [B, S] float64.

    Save it with the EnvState to checkpoint; call only between jitted calls.
    """
    return self.physics.get_host_state()

  def set_host_state(self, rows: np.ndarray) -> None:
    """Restores rows from `get_host_state`, exactly.

    The next EnvState passed to `step` is then accepted as current (pass the
    one saved with these rows).
    """
    self.physics.set_host_state(rows)


def _renderer(model, pixel_obs, backend: str):
  """The renderer `pixel_obs.spec.renderer` asks for (see roxie.envs.pixels).

  Raises roxie.gl.RenderingUnavailable (naming packages) where the host
  renderer is needed and no GL works, and
  roxie.envs.warp_render.WarpUnavailable (naming what to install) where
  'warp' is asked for and cannot run.
  """
  from roxie.envs import pixels as pixels_lib  # pylint: disable=g-import-not-at-top
  choice = pixel_obs.spec.renderer
  if backend == 'mjx' and choice in ('warp', 'auto'):
    from roxie.envs import warp_render  # pylint: disable=g-import-not-at-top
    if choice == 'warp' or (warp_render.warp_installed()
                            and pixel_obs.camera >= 0):
      try:
        return warp_render.WarpRenderer(model, pixel_obs)
      except warp_render.WarpUnavailable:
        if choice == 'warp':
          raise
  return pixels_lib.HostRenderer(model, pixel_obs)


def _check_sizes(task: Task, num_envs, episode_length) -> Tuple[int, int]:
  """(num_envs, episode_length) as ints, checked; the task's default length."""
  # A float or bool num_envs is a mistake, not a request to round (2.7 would
  # silently become 2).
  if isinstance(num_envs, bool) or not isinstance(num_envs,
                                                  numbers.Integral):
    raise ValueError(f'num_envs must be an integer, got {num_envs!r}.')
  num_envs = int(num_envs)
  if num_envs < 1:
    raise ValueError(f'num_envs must be >= 1, got {num_envs}.')
  if episode_length is None:
    episode_length = task.episode_length
  if int(episode_length) < 1:
    raise ValueError(f'episode_length must be >= 1, got {episode_length}.')
  return num_envs, int(episode_length)


def _pixel_setup(model, spec, pixels: PixelSpec, backend: str, num_envs: int,
                 action_repeat: int):
  """The spec, `PixelObs` and physics keyword arguments of pixel observations.

  Args:
    model: the task's prepared model.
    spec: the state-vector EnvSpec.
    pixels: the PixelSpec asked for.
    backend: 'cpu' or 'mjx'.
    num_envs: B.
    action_repeat: control steps per agent decision.

  Returns:
    (EnvSpec with dict observations, PixelObs, {renderer, pixel_obs,
    extra_fields} for the backend's physics).
  """
  if not isinstance(pixels, PixelSpec):
    raise TypeError(f'pixels must be a roxie.envs.PixelSpec, got '
                    f'{type(pixels).__name__}.')
  from roxie.envs import pixels as pixels_lib  # pylint: disable=g-import-not-at-top
  pixel_obs = pixels_lib.PixelObs.build(model, pixels, num_envs,
                                        spec.obs_size, action_repeat)
  spec = spec._replace(obs_size=pixel_obs.state_size,
                       obs_names=spec.obs_names if pixels.state else (),
                       obs_shapes=pixel_obs.obs_shapes(),
                       frame_stack=int(pixels.frame_stack))
  if backend == 'cpu' and pixels.renderer == 'warp':
    raise ValueError("PixelSpec(renderer='warp') is MJX's renderer: use "
                     "backend='mjx', or renderer='host' or 'auto'.")
  renderer = _renderer(model, pixel_obs, backend) if pixels.renders else None
  extra = dict(renderer=renderer, pixel_obs=pixel_obs,
               extra_fields=('sensordata',) if pixels.sensors else ())
  return spec, pixel_obs, extra


def _physics(model, task: Task, backend: str, num_envs: int, *,
             nthread: Optional[int], callback: Optional[str], impl: str,
             naconmax: Optional[int], njmax: Optional[int], extra):
  """(the backend's Physics, the env class), refusing the other's options."""
  if backend == 'cpu':
    if impl != 'jax':
      raise ValueError("impl is an MJX option; backend='cpu' takes nthread.")
    if naconmax is not None or njmax is not None:
      raise ValueError("naconmax and njmax are backend='mjx', impl='warp' "
                       'options.')
    from roxie.envs import native  # pylint: disable=g-import-not-at-top
    return native.NativePhysics(model, task, num_envs, nthread,
                                callback or 'auto', **extra), NativeEnv
  if nthread is not None or callback is not None:
    raise ValueError("nthread and callback are backend='cpu' options.")
  from roxie.envs import mjx_backend  # pylint: disable=g-import-not-at-top
  return (mjx_backend.MjxPhysics(model, task, num_envs, impl,
                                 naconmax=naconmax, njmax=njmax, **extra),
          common.BatchedEnv)


def make(task_name: Union[str, Task], *, backend: str = 'cpu', num_envs: int,
         episode_length: Optional[int] = None, nthread: Optional[int] = None,
         callback: Optional[str] = None, impl: str = 'jax',
         action_repeat: int = 1, pixels: Optional[PixelSpec] = None,
         physics: str = DEFAULT_PHYSICS, naconmax: Optional[int] = None,
         njmax: Optional[int] = None) -> common.BatchedEnv:
  """A batch of `num_envs` environments of a registered task.

  Args:
    task_name: e.g. 'CartpoleSwingup' (see `list_tasks()`), or a `Task`
      (for a task of one's own, unregistered).
    backend: 'cpu' (native MuJoCo, `mujoco.batch`) or 'mjx'.
    num_envs: B, the number of parallel environments.
    episode_length: steps before a time-limit truncation; default the task's.
    nthread: 'cpu' only: simulation threads (default: one where the whole
      batch's physics step costs under `native.PARALLEL_MIN_STEP_US` of CPU
      on one thread, measured at construction, else all cores; the physics
      does not depend on it).
    callback: 'cpu' only: how compiled code reaches the host physics,
      'auto' (default: in-place `buffer_callback` in CPU programs, copying
      `io_callback` in accelerator programs), 'buffer' or 'io'.
    impl: 'mjx' only: 'jax' (default) or 'warp' (MuJoCo Warp physics, on
      CUDA or Warp's CPU device; needs warp-lang: roxie's `warp` extra). See
      `roxie.envs.mjx_backend` for how its shared contact pool is sized.
    naconmax, njmax: impl 'warp' only: contacts for the whole batch and
      constraint rows per env (default: the model's static bounds under impl
      'jax', times num_envs for naconmax); a step that needs more raises
      `roxie.envs.mjx_backend.WarpOverflowError`.
    action_repeat: control steps per agent decision, rewards summed
      (`roxie.envs.wrappers.ActionRepeat`); `episode_length` stays in control
      steps and must be a multiple of it.
    pixels: a `PixelSpec` for dict observations (camera frames, depth,
      sensors, state; see `roxie.envs.pixels`), None (default) for the flat
      state vector. Frame cadence and stacking count agent steps (under an
      action repeat, `action_repeat` control steps each). Its `renderer`
      picks what draws the frames: 'host' (MuJoCo's OpenGL renderer, both
      backends), 'warp' (MJX's Warp renderer, backend 'mjx') or 'auto'.
    physics: the solver preset, on either backend (`roxie.envs.presets`):
      'dm_control' (default; the suite's own solver options) or 'playground'
      (mujoco_playground's cheaper per-domain solver options, a documented
      deviation from dm_control that changes returns; see
      docs/PERFORMANCE.md). In a run's env_options as 'physics'.

  Returns:
    An Env (see `roxie.types.Env`): `spec`, `num_envs`, `reset`, `step`.

  Raises:
    KeyError: unknown task (the message lists the available ones).
    ValueError: unknown backend or physics preset, bad sizes, or options of
      the other backend.
    roxie.gl.RenderingUnavailable: `pixels` asks for images from the host
      renderer and no headless OpenGL works here (the message names the
      system packages).
    roxie.envs.warp_render.WarpUnavailable: `pixels.renderer` is 'warp' and
      MJX's Warp renderer cannot run (the message names what to install).
  """
  task = task_name if isinstance(task_name, Task) else get_task(task_name)
  if backend not in BACKENDS:
    raise ValueError(f'Unknown backend {backend!r}; choose one of {BACKENDS}.')
  num_envs, episode_length = _check_sizes(task, num_envs, episode_length)
  model = common.prepare_model(task, physics)
  consts = task.consts(model)
  spec = common.BatchedEnv.build_spec(task, model, consts, episode_length)
  pixel_obs, extra = None, {}
  if pixels is not None:
    spec, pixel_obs, extra = _pixel_setup(model, spec, pixels, backend,
                                          num_envs, int(action_repeat))
  physics, cls = _physics(model, task, backend, num_envs, nthread=nthread,
                          callback=callback, impl=impl, naconmax=naconmax,
                          njmax=njmax, extra=extra)
  env = cls(spec=spec, num_envs=num_envs, task=task, backend=backend,
            model=model, physics=physics, consts=consts, pixel_obs=pixel_obs)
  if int(action_repeat) != 1:
    from roxie.envs.wrappers import ActionRepeat  # pylint: disable=g-import-not-at-top
    return ActionRepeat(env, int(action_repeat))
  return env


__all__ = ['make', 'list_tasks', 'get_task', 'BACKENDS', 'NativeEnv',
           'PixelSpec', 'PHYSICS_PRESETS']
