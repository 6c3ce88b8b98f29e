"""A population: P independent training runs as ONE compiled program.

`make_population_loop(recipe, env, population=P)` is `make_compiled_loop`'s
single-device program vmapped over a leading member axis: every member has
its own agent state (parameters, optimiser states, target networks), replay,
env states, episode statistics and keys, and nothing is shared between
members but the program. Member k of `init(population_keys(seeds))` is the
single run `init(jax.random.PRNGKey(seeds[k]))`, computed the same way (up
to XLA's choice of kernels for batched matrix products).

The envs: each member steps its own B envs, but the backend steps all P x B
of them together (`physics.population(P)`, see `roxie.envs.population`):
on the native backend one `mujoco.batch` call per env step for the whole
population (one host callback, not P), on MJX one batch of P x B
simulations. A pure-JAX env of one's own is simply vmapped.

The members run in lockstep (same iteration count), so whatever the loop
decides from the iteration count (warm-up, whether replay can be sampled) is
the same for all of them; the iteration builders take it from the member
axis (`lax.pmax`) so that `lax.cond` stays a branch rather than becoming a
select that runs both sides for every member.

Per-member hyperparameters (later): a recipe whose float settings are
arrays in its state (rather than Python constants closed over by `make`)
can be given one value per member by vmapping `init` over them as well;
nothing in this loop assumes that the members' configs are equal.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence, Tuple

import jax
import jax.numpy as jnp

from roxie import distributed
from roxie.loops import compiled
from roxie.loops import host
from roxie.loops import iteration as iteration_lib
from roxie.loops import placement
from roxie.loops.state import LoopOutput, LoopState
from roxie.types import PRNGKey, Recipe

MEMBER_AXIS = 'member'


def population_keys(seeds: Sequence[int]) -> PRNGKey:
  """[P] keys: member k's is `jax.random.PRNGKey(seeds[k])`, a single run's."""
  return jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])


def member(tree, k: int):
  """Member k's part of a population's state or output (leading axis k)."""
  return jax.tree.map(lambda x: x[k], tree)


def population_env(env, population: int):
  """`env` with its physics replaced by its backend's population physics.

  Reaches through wrappers (dataclasses with an `env` field, e.g.
  ActionRepeat). An env whose physics has no `population(P)` method (a
  pure-JAX env of one's own) is returned as it is: vmap handles it.

  Args:
    env: an env of B envs per member.
    population: P.

  Returns:
    An env whose `num_envs` is still B (per member), to be used only under
    a vmap over P members.
  """
  if dataclasses.is_dataclass(env) and 'env' in {
      f.name for f in dataclasses.fields(env)}:
    return dataclasses.replace(env, env=population_env(env.env, population))
  physics = getattr(env, 'physics', None)
  if callable(getattr(physics, 'population', None)):
    return dataclasses.replace(env, physics=physics.population(population))
  return env


def _check_env(env) -> None:
  if isinstance(env, distributed.ShardedEnv):
    raise ValueError('A population runs on one device: pass an unsharded '
                     'env (a population over a mesh is not supported yet).')
  if getattr(env.spec, 'obs_shapes', None) is not None:
    raise ValueError(
        'A population of runs from pixel observations is not supported: the '
        "renderer draws one batch's frames per call. Train pixel runs one "
        'at a time.')


def make_population_loop(
    recipe: Recipe, env, *, population: int, iterations: int = 1,
    donate: bool = True
) -> Tuple[Callable[[PRNGKey], LoopState],
           Callable[[LoopState], Tuple[LoopState, LoopOutput]]]:
  """P independent runs of `recipe` on `env`, as one jitted program.

  Args:
    recipe: a `roxie.types.Recipe`.
    env: an env of B envs (each member gets B envs of its own; on a backend
      with host physics, this env's own simulations are not used).
    population: P >= 1, the number of members.
    iterations: K, iterations per call of `run` (all members).
    donate: donate the state's buffers to the call.

  Returns:
    `(init, run)`: `init(keys [P]) -> LoopState` with a leading [P] axis on
    every leaf (see `population_keys`; `member(state, k)` is a single run's
    LoopState), and `run(state) -> (state, LoopOutput)` with a leading [P]
    axis on every output leaf.
  """
  compiled.check_settings(recipe)
  if iterations < 1:
    raise ValueError(f'iterations must be >= 1, got {iterations}.')
  if int(population) < 1:
    raise ValueError(f'population must be >= 1, got {population}.')
  _check_env(env)
  pop_env = population_env(env, int(population))
  place = placement.OneDevice(pop_env)
  host.claim(pop_env, host.TRAINING)
  spec, num_envs = env.spec, env.num_envs
  init = iteration_lib.make_init(recipe, spec, num_envs, place)
  step = iteration_lib.make_iteration(recipe, spec, num_envs, place,
                                      member_axis=MEMBER_AXIS)
  run = iteration_lib.make_run(step, iterations, place)
  return (jax.jit(jax.vmap(init, axis_name=MEMBER_AXIS)),
          jax.jit(jax.vmap(run, axis_name=MEMBER_AXIS),
                  donate_argnums=(0,) if donate else ()))
