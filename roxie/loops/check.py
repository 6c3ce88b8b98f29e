"""`check_recipe`: run a recipe's functions once, before compiling anything.

A mistake inside a recipe's `init`, `act` or `update` otherwise surfaces
while the whole training program is traced or compiled, deep inside
`lax.scan` and `lax.cond`, often as a carry-type mismatch that names none of
the user's functions. Here each function runs once, outside `jit`, on a
small batch shaped from the env spec (abstract arrays by default, zeros with
`eager=True`), and a failure is re-raised as a `RecipeError` naming the
function and what it was given. A recipe's exported policy
(`Recipe.policy`) is compared with its `act(explore=False)` on random
observations, so a policy that acts otherwise than the recipe is refused
before anything is trained.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp

from roxie.loops.compiled import check_settings
from roxie.types import EnvSpec, Policy, Recipe, Rollout, Transition

# How far `Recipe.policy` may be from `act(explore=False)` (float32 rounding
# of the same network, computed in two programs); roxie.export uses the same.
POLICY_ATOL = 1e-5
_POLICY_OBS = 8  # Random observations the policy is compared on.


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


def _random_observations(spec: EnvSpec, n: int, key) -> Any:
  """n random observations of `spec`: N(0, 3^2) floats, uniform uint8 images."""
  if spec.obs_shapes is None:
    return 3. * jax.random.normal(key, (n, spec.obs_size))
  out = {}
  for name, shape, dtype in spec.obs_shapes:
    key, k = jax.random.split(key)
    shape = (n,) + tuple(shape)
    if jnp.issubdtype(jnp.dtype(dtype), jnp.integer):
      out[name] = jax.random.randint(k, shape, 0, 256).astype(dtype)
    else:
      out[name] = 3. * jax.random.normal(k, shape, dtype)
  return out


def check_policy(recipe: Recipe, spec: EnvSpec, *, seed: int = 0,
                 eager: bool = False) -> None:
  """Checks that `recipe.policy` takes the action `act(explore=False)` takes.

  At a freshly initialised agent state and on random observations (the
  export compares them again on the trained state), `policy.apply(
  policy.params(state), obs)` must equal `act(state, obs, key,
  explore=False)` within `POLICY_ATOL`. Runs as one small jitted program
  (init, act and the policy; op by op with `eager=True`). A recipe without a
  policy passes.

  Args:
    recipe: the recipe.
    spec: the env spec it is built for.
    seed: PRNG seed of the state, the observations and act's key.
    eager: compute op by op instead of compiling.

  Raises:
    RecipeError: the policy is not a `roxie.types.Policy`, one of its
      functions fails, or its actions differ from act's.
  """
  policy = recipe.policy
  if policy is None:
    return
  if not (isinstance(policy, Policy) and callable(policy.params)
          and callable(policy.apply)):
    raise RecipeError(
        f'{recipe.name}: Recipe.policy must be a roxie.types.Policy(params='
        f'function, apply=function), got {type(policy).__name__}.')
  n = _POLICY_OBS

  def both(key):
    k_init, k_obs, k_act = jax.random.split(key, 3)
    agent = _call(recipe, 'init(key, env_spec)', recipe.init, k_init, spec)
    obs = _random_observations(spec, n, k_obs)
    expected, _ = _call(recipe, f'act(agent_state, obs [{n}, ...], key, '
                        'explore=False)', recipe.act, agent, obs, k_act,
                        explore=False)
    params = _call(recipe, 'policy.params(agent_state)', policy.params, agent)
    if not isinstance(params, Mapping):
      raise RecipeError(
          f'{recipe.name}: policy.params(agent_state) must return a dict of '
          f'arrays (what acting needs), got {type(params).__name__}.')
    got = _call(recipe, f'policy.apply(params, obs [{n}, ...])', policy.apply,
                params, obs)
    if tuple(jnp.shape(got)) != tuple(jnp.shape(expected)):
      raise RecipeError(
          f'{recipe.name}: policy.apply gave actions of shape '
          f'{tuple(jnp.shape(got))}, but act(explore=False) gives '
          f'{tuple(jnp.shape(expected))}.')
    return expected, got

  run = both if eager else jax.jit(both)
  expected, got = jax.device_get(run(jax.random.PRNGKey(seed)))
  diff = abs(expected.astype('float64') - got.astype('float64'))
  err = float(diff.max())
  if not err <= POLICY_ATOL:  # NaN fails too.
    i = int(diff.max(axis=-1).argmax()) if err == err else 0
    raise RecipeError(
        f'{recipe.name}: the exported policy, policy.apply(policy.params('
        f'agent_state), obs), differs from act(agent_state, obs, key, '
        f'explore=False) by up to {err:.3g} (tolerance {POLICY_ATOL:g}) on '
        f'random observations; e.g. observation {i}: policy '
        f'{[round(float(x), 4) for x in got[i]]}, act '
        f'{[round(float(x), 4) for x in expected[i]]}. '
        'Recipe.policy must take the action act takes without exploration '
        '(same networks, parameters and observation normalisation).')


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
  `jit` (Python branching on array values). A recipe with a `policy` is
  then checked by `check_policy`, which computes (one small compiled
  program). `eager=True` runs them on
  arrays of zeros instead, op by op (a SAC update takes ~25 s that way on a
  2-core CPU, each operation compiled on its own), e.g. to step into them
  with a debugger.

  Args:
    recipe: the recipe.
    spec: the env spec it is built for.
    num_envs: B for `act` (and an on-policy rollout's width); default 2.
    seed: PRNG seed of the keys handed to the functions.
    eager: compute on zeros instead of tracing abstractly.

  Raises:
    ValueError: the recipe's loop settings cannot run (as
      `make_compiled_loop` would say).
    RecipeError (a ValueError): a function failed or returned a wrong shape
      or structure, or the recipe's policy acts otherwise than its
      act(explore=False).
  """
  check_settings(recipe)
  if num_envs is None:
    num_envs = 2

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
  check_policy(recipe, spec, seed=seed, eager=eager)
