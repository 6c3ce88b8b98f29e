"""A task: an MJCF model, a reset distribution, and pure observation/reward.

A task is defined once and runs on every physics backend. Its functions are
pure JAX over ONE environment (backends `jax.vmap` them) and read physics only
through a `View`: a dict of the MjData fields named in `Task.fields`, for one
simulation, after the step. Because both backends hand the task the same view,
a policy trained on one backend runs unchanged on the other.

View conventions (the same on every backend):
- Fields are float32 arrays shaped as MjData's, per simulation:
  `qpos` [nq], `qvel` [nv], `ctrl` [nu], `xpos` [nbody, 3], `sensordata`
  [nsensordata], `subtree_com` [nbody, 3], `cvel` [nbody, 6], ...
- Rotation matrices are flat rows, as in MjData: `xmat` [nbody, 9],
  `geom_xmat` [ngeom, 9], `site_xmat` [nsite, 9] (index 2 is 'xz', 8 is 'zz').
- Position- and velocity-dependent fields describe the state AFTER the step,
  as dm_control's suite sees them (its default `legacy_step`, the same as
  `mj_step1` after `mj_step`), so observations and rewards match the suite's.
- `ctrl` is the control the step applied, in actuator units.

Model constants a task needs (body ids, geom sizes, joint ranges, ...) come
from `consts(model)` once, as a dict of NumPy arrays, and are closed over as
constants; they never depend on the backend.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import chex
import mujoco
import numpy as np

Array = chex.Array
View = Mapping[str, Array]
Consts = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Task:
  """One control task, defined once for every backend.

  Attributes:
    name: registry name, as in mujoco_playground's DM Control suite
      (e.g. 'CartpoleSwingup').
    domain: dm_control suite domain (e.g. 'cartpole').
    dmc_task: dm_control suite task in that domain (e.g. 'swingup').
    load_model: returns the compiled `mujoco.MjModel` (built from the MJCF that
      the installed dm_control package ships; no model file lives in roxie).
    control_timestep: seconds per environment step; a multiple of the model's
      timestep.
    episode_length: environment steps before a time-limit truncation.
    fields: the MjData fields the task's functions read from the view.
    consts: `consts(model) -> dict` of model constants (NumPy), computed once.
    init: `init(key, consts) -> (qpos [nq], qvel [nv], task_state [K])`, the
      reset distribution for one environment, in JAX. `task_state` holds
      per-episode parameters that are not physics state (a target position,
      say); it is float32 [K] with K = `task_state_size` (0 allowed).
    observe: `observe(view, task_state, consts) -> dict[str, Array]`, the
      named observation parts in dm_control's order; each is flattened and
      concatenated by the environment.
    reward: `reward(view, task_state, consts) -> Array []` float32.
    terminate: optional `terminate(view, task_state, consts) -> Array []`
      bool, a failure that ends the episode without bootstrap. None for the
      suite's tasks, which only end at their time limit.
    task_state_size: K.
  """
  name: str
  domain: str
  dmc_task: str
  load_model: Callable[[], mujoco.MjModel]
  control_timestep: float
  episode_length: int
  fields: Tuple[str, ...]
  consts: Callable[[mujoco.MjModel], Consts]
  init: Callable[..., Tuple[Array, Array, Array]]
  observe: Callable[[View, Array, Consts], Dict[str, Array]]
  reward: Callable[[View, Array, Consts], Array]
  terminate: Optional[Callable[[View, Array, Consts], Array]] = None
  task_state_size: int = 0

  def n_substeps(self, model: mujoco.MjModel) -> int:
    """Physics steps per control step."""
    n = self.control_timestep / model.opt.timestep
    if abs(n - round(n)) > 1e-6 or round(n) < 1:
      raise ValueError(
          f'{self.name}: control_timestep {self.control_timestep} is not a '
          f'multiple of the model timestep {model.opt.timestep}.')
    return int(round(n))


@functools.lru_cache(maxsize=None)
def dm_control_model(domain: str, **kwargs) -> mujoco.MjModel:
  """Compiles a suite domain's MJCF as the installed dm_control ships it.

  Args:
    domain: the suite module name, e.g. 'cartpole'.
    **kwargs: passed to that module's `get_model_and_assets` (e.g.
      `num_poles` for cartpole).

  Returns:
    A compiled `mujoco.MjModel` (cached; do not mutate it).
  """
  import importlib  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  # roxie only reads dm_control's model files. Without a display and with
  # MUJOCO_GL unset, dm_control's import probes GLFW and warns; keep it from
  # picking a renderer then (roxie's own rendering uses mujoco.Renderer).
  unset = 'MUJOCO_GL' not in os.environ
  if unset:
    os.environ['MUJOCO_GL'] = 'off'
  try:
    module = importlib.import_module(f'dm_control.suite.{domain}')
  except ImportError as e:
    raise ImportError(
        f'roxie loads the suite models from dm_control, which failed to '
        f'import ({e}). Install it with `pip install dm-control`.') from e
  finally:
    if unset:
      del os.environ['MUJOCO_GL']
  xml, assets = module.get_model_and_assets(**kwargs)
  if isinstance(xml, bytes):
    xml = xml.decode()
  return mujoco.MjModel.from_xml_string(xml, assets)


def name2id(model: mujoco.MjModel, obj: mujoco.mjtObj, name: str) -> int:
  """`mujoco.mj_name2id` that raises with a clear message when missing."""
  i = mujoco.mj_name2id(model, obj, name)
  if i < 0:
    raise KeyError(f'No {obj.name[6:].lower()} named {name!r} in the model.')
  return i


def flatten_observation(parts: Mapping[str, Array]) -> Array:
  """Concatenates named observation parts in order, each flattened."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.concatenate([jnp.ravel(v).astype(jnp.float32)
                          for v in parts.values()])
