"""`check_recipe`: run a recipe's functions once, before compiling anything.

A mistake inside a recipe's `init`, `act` or `update` otherwise surfaces
while the whole training program is traced or compiled, deep inside
`lax.scan` and `lax.cond`, often as a carry-type mismatch that names none of
the user's functions. Here each function runs once, outside `jit`, on a
small batch shaped from the env spec (abstract arrays by default, zeros with
`eager=True`), and a failure is re-raised as a `RecipeError` naming the
function and what it was given.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp

from roxie.loops.compiled import check_settings
from roxie.types import EnvSpec, Recipe, Rollout, Transition


class RecipeError(ValueError):
  """A recipe's function failed, or returned the wrong shape, when checked."""


def _call(recipe: Recipe, what: str, fn: Callable, *args, **kwargs):
  """`fn(*args, **kwargs)`, any exception re-raised naming `what`."""
  try:
    return fn(*args, **kwargs)
  except Exception as e:  # pylint: disable=broad-except
    raise RecipeError(f'{recipe.name}: {what} failed: '
                      f'{type(e).__name__}: {e}') from e


def _observations(spec: EnvSpec, lead: tuple) -> Any:
  """Zero observations of shape `lead` + the spec's per-env shape."""
  if spec.obs_shapes is None:
    return jnp.zeros(lead + (spec.obs_size,), jnp.float32)
  return {k: jnp.zeros(lead + tuple(shape), dtype)
          for k, shape, dtype in spec.obs_shapes}


def _same_structure(recipe: Recipe, what: str, before: Any, after: Any):
  """Raises unless `after` has `before`'s tree, shapes and dtypes."""
  if jax.tree.structure(before) != jax.tree.structure(after):
    raise RecipeError(
        f'{recipe.name}: {what} returned an agent state of another structure '
        f'than init made (the loop carries it through lax.scan):\n'
        f'  init:   {jax.tree.structure(before)}\n'
        f'  update: {jax.tree.structure(after)}')
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(before),
                          jax.tree.leaves(after)):
    was = (tuple(jnp.shape(a)), jnp.result_type(a))
    now = (tuple(jnp.shape(b)), jnp.result_type(b))
    if was != now:
      raise RecipeError(
          f'{recipe.name}: {what} changed the agent state leaf '
          f'{jax.tree_util.keystr(path)} from {was[0]} {was[1]} to '
          f'{now[0]} {now[1]}.')


def _act(recipe: Recipe, agent: Any, spec: EnvSpec, b: int, key) -> Any:
  """act(agent, obs [b, ...], key, explore=True), its action shape checked."""
  obs = _observations(spec, (b,))
  out = _call(recipe, f'act(agent_state, obs [{b}, ...], key, explore=True)',
              recipe.act, agent, obs, key, explore=True)
  if not (isinstance(out, tuple) and len(out) == 2):
    raise RecipeError(f'{recipe.name}: act must return (action, extras), got '
                      f'{type(out).__name__}.')
  action, extras = out
  if tuple(jnp.shape(action)) != (b, spec.action_size):
    raise RecipeError(f'{recipe.name}: act returned an action of shape '
                      f'{tuple(jnp.shape(action))}, expected '
                      f'{(b, spec.action_size)} (num_envs, action_size).')
  return action, extras


def _data(recipe: Recipe, agent: Any, spec: EnvSpec, num_envs: int, key):
  """What `update` consumes: a Transition batch or a [T, B] Rollout."""
  if not recipe.on_policy:
    n = recipe.replay.batch_size
    action = jnp.zeros((n, spec.action_size), jnp.float32)
    return Transition(obs=_observations(spec, (n,)), action=action,
                      reward=jnp.zeros((n,)), discount=jnp.ones((n,)),
                      next_obs=_observations(spec, (n,))), f'Transition [{n}]'
  t, b = recipe.rollout_length, num_envs
  action, extras = _act(recipe, agent, spec, b, key)
  tile = lambda x: jnp.broadcast_to(x, (t,) + jnp.shape(x))
  flags = jnp.zeros((t, b), bool)
  rollout = Rollout(obs=_observations(spec, (t, b)), action=tile(action),
                    reward=jnp.zeros((t, b)), terminated=flags,
                    truncated=flags, final_obs=_observations(spec, (t, b)),
                    extras=jax.tree.map(tile, extras),
                    last_obs=_observations(spec, (b,)))
  return rollout, f'Rollout [{t}, {b}]'


def check_recipe(recipe: Recipe, spec: EnvSpec, *,
                 num_envs: Optional[int] = None, seed: int = 0,
                 eager: bool = False) -> None:
  """Runs `init`, `act` and `update` once, outside `jit`, on inputs from `spec`.

  Use it before `make_compiled_loop` on a recipe of one's own: a function
  that raises, returns the wrong action shape, or returns from `update` an
  agent state that differs from `init`'s (in structure, shapes or dtypes:
  the loop carries it through `lax.scan`) is reported by a `RecipeError`
  naming the function, before anything is compiled.

  By default the functions run abstractly (`jax.eval_shape`: the recipe's
  Python runs once on abstract arrays of the right shapes and nothing is
  compiled or computed, ~1 s); this also catches what only fails under
  `jit` (Python branching on array values). `eager=True` runs them on
  arrays of zeros instead, op by op (a SAC update takes ~25 s that way on a
  2-core CPU, each operation compiled on its own), e.g. to step into them
  with a debugger.

  Args:
    recipe: the recipe.
    spec: the env spec it is built for.
    num_envs: B for `act` (and an on-policy rollout's width); default the
      recipe config's `num_envs`, else 2.
    seed: PRNG seed of the keys handed to the functions.
    eager: compute on zeros instead of tracing abstractly.

  Raises:
    ValueError: the recipe's loop settings cannot run (as
      `make_compiled_loop` would say).
    RecipeError (a ValueError): a function failed or returned a wrong shape
      or structure.
  """
  check_settings(recipe)
  if num_envs is None:
    num_envs = int(getattr(recipe.config, 'num_envs', 2) or 2)

  def run_once():
    k_init, k_act, k_update = jax.random.split(jax.random.PRNGKey(seed), 3)
    agent = _call(recipe, 'init(key, env_spec)', recipe.init, k_init, spec)
    _act(recipe, agent, spec, num_envs, k_act)
    data, described = _data(recipe, agent, spec, num_envs, k_act)
    what = f'update(agent_state, {described}, key)'
    out = _call(recipe, what, recipe.update, agent, data, k_update)
    if not (isinstance(out, tuple) and len(out) == 2):
      raise RecipeError(f'{recipe.name}: update must return (agent_state, '
                        f'metrics), got {type(out).__name__}.')
    new_agent, metrics = out
    _same_structure(recipe, what, agent, new_agent)
    if not isinstance(metrics, Mapping):
      raise RecipeError(f'{recipe.name}: update must return its metrics as a '
                        f'mapping of name to array, got '
                        f'{type(metrics).__name__}.')

  if eager:
    run_once()
  else:
    jax.eval_shape(run_once)
