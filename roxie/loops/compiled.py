"""`make_compiled_loop`: any recipe with any backend, as one XLA program.

One call of the returned `run` function executes `iterations` iterations (see
`roxie.loops.iteration` for what an off- and an on-policy iteration do)
inside a single jitted function whose state is donated, so nothing crosses to
the host between iterations (on the MJX backend nothing crosses at all; the
native backend reaches its physics through a callback inside the program).
Python only runs between calls: logging, checkpoints, progress.

The pieces: `roxie.loops.iteration` builds `init`, the iteration and `run`
for a placement; `roxie.loops.placement` says where they run (one device, or
data-parallel over a mesh).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from jax.sharding import Mesh

from roxie.loops import host
from roxie.loops import iteration as iteration_lib
from roxie.loops import placement
from roxie.loops.iteration import env_steps_per_iteration
from roxie.loops.state import LoopOutput, LoopState
from roxie.types import PRNGKey, Recipe

__all__ = ('LoopOutput', 'LoopState', 'env_steps_per_iteration',
           'check_settings', 'make_compiled_loop')


def check_settings(recipe: Recipe) -> None:
  """Raises ValueError if the recipe's loop settings cannot run."""
  if recipe.on_policy:
    if recipe.rollout_length < 1:
      raise ValueError(f'{recipe.name}: an on-policy recipe needs '
                       f'rollout_length >= 1, got {recipe.rollout_length}.')
  else:
    if recipe.replay is None:
      raise ValueError(f'{recipe.name}: an off-policy recipe needs a ReplaySpec.')
    if recipe.steps_per_iteration < 1 or recipe.updates_per_iteration < 0:
      raise ValueError(f'{recipe.name}: steps_per_iteration must be >= 1 and '
                       'updates_per_iteration >= 0.')


def make_compiled_loop(recipe: Recipe, env, *, iterations: int = 1,
                       donate: bool = True, mesh: Optional[Mesh] = None
                       ) -> Tuple[Callable[[PRNGKey], LoopState],
                                  Callable[[LoopState], Tuple[LoopState, LoopOutput]]]:
  """Fuses `recipe` and `env` into one jitted training program.

  With `mesh` (a 1-D `jax.sharding.Mesh` of D devices, see
  `roxie.distributed`), the same program runs data-parallel: each device
  steps num_envs / D envs (inside `jax.shard_map`), writes them to its own
  replay ring and samples batch_size / D transitions from it; `recipe.update`
  then runs unchanged on the global batch (the devices' batches concatenated,
  sharded along its first axis) with the agent state replicated, so XLA
  averages its gradients across devices with all-reduces. Each device's
  randomness is the call's key folded with its index (D = 1 reproduces the
  unsharded program). The state keeps per-device pieces (env, replay, episode
  statistics) stacked along a leading axis of size D; `LoopOutput` has the
  same form as without a mesh.

  Args:
    recipe: a `roxie.types.Recipe`.
    env: a `roxie.types.Env` (any backend), or with `mesh` a
      `roxie.distributed.ShardedEnv` (an env is split with
      `roxie.distributed.shard_env`).
    iterations: K, iterations per call of `run`.
    donate: donate the loop state's buffers to the call (saves a copy of the
      replay; the state passed in must not be used again).
    mesh: run data-parallel over this 1-D mesh (default: the ShardedEnv's
      mesh, else one device). num_envs and batch_size must be multiples of
      its size.

  Returns:
    `(init, run)`: `init(key) -> LoopState` (jitted) and
    `run(state) -> (state, LoopOutput)` (jitted, K iterations).
  """
  check_settings(recipe)
  if iterations < 1:
    raise ValueError(f'iterations must be >= 1, got {iterations}.')
  place = placement.place(env, mesh)
  host.claim(place.local_env, host.TRAINING)
  spec, num_envs = env.spec, env.num_envs
  init = iteration_lib.make_init(recipe, spec, num_envs, place)
  step = iteration_lib.make_iteration(recipe, spec, num_envs, place)
  run = iteration_lib.make_run(step, iterations, place)
  return place.jit(init, run, donate)
