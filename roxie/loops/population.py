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

Per-member hyperparameters: `make_population_loop(recipe, env,
population=P, hparams={field: P values}, make=module.make)` gives member k
the config `member_config(recipe.config, hparams, k)`. Inside the program
the recipe is rebuilt per member by `make(dataclasses.replace(config,
field=value))` with each value a traced [] float32 array (vmapped like the
keys), so a recipe needs no change beyond reading those fields as arrays
(`jnp` arithmetic, optax, `jnp.where`; no Python `if`, `float()` or
`math`). What the loop itself reads in Python (on- or off-policy, replay
sizes and n-step, rollout length, updates and steps per iteration, warm-up)
comes from `recipe` and must not depend on the swept fields: every member's
recipe is first built on the host from its own config (so `make`'s own
checks see its values) and compared. Only float fields may be swept
(`sweepable_fields`: annotated `float` or `Optional[float]`); sizes,
counts, switches, tuples and strings are refused, naming the field. An
Optional field swept takes a number in every member (sweeping
`max_grad_norm` turns clipping on for all of them). A recipe that still
reads a swept field as a Python number is refused, naming it, when the
program is first traced. Member k follows the single run of
`make(member_config(...), spec)` with seed k within float tolerance: the
member computes in float32 what the single run may fold from a Python float
(e.g. 1 - tau, or D4PG's support from the discount).

The fields each built-in recipe supports (all its own float fields; each
is traced per member by tests/loops/test_population_hparams.py; those of
its `pixels` settings are not swept, since a population refuses pixels):

  ddpg  discount, tau, actor_lr, critic_lr, max_grad_norm, noise_start,
        noise_end, saturation_weight, saturation_threshold, obs_clip
  td3   discount, tau, actor_lr, critic_lr, max_grad_norm, noise_start,
        noise_end, target_noise, target_noise_clip, obs_clip
  d4pg  discount, tau, actor_lr, critic_lr, max_grad_norm, noise_start,
        noise_end, v_min, v_max, critic_init_value, obs_clip
  td4   td3's and v_min, v_max, critic_init_value
  sac   discount, tau, actor_lr, critic_lr, alpha_lr, max_grad_norm,
        init_alpha, target_entropy, obs_clip
  mpo   discount, tau, policy_lr, critic_lr, dual_lr, max_grad_norm,
        epsilon, epsilon_mean, epsilon_std, init_temperature,
        init_alpha_mean, init_alpha_std, action_penalty_epsilon, obs_clip
  ppo   discount, gae_lambda, clip_epsilon, value_clip_epsilon,
        entropy_coef, learning_rate, target_kl, max_grad_norm,
        init_log_std, obs_clip
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import itertools
import math
import numbers
import types
import typing
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

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
    a vmap over P members. An env that is already a population env of P
    members is returned as it is (so a caller that keeps the population env,
    e.g. to checkpoint its host physics, can pass it to
    `make_population_loop`).

  Raises:
    ValueError: `env` is a population env of another size.
  """
  if dataclasses.is_dataclass(env) and 'env' in {
      f.name for f in dataclasses.fields(env)}:
    return dataclasses.replace(env, env=population_env(env.env, population))
  physics = getattr(env, 'physics', None)
  members = getattr(physics, 'num_members', None)
  if members is not None:
    if int(members) != int(population):
      raise ValueError(f'This env is already a population env of {members} '
                       f'members, not {population}.')
    return env
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


def _is_float_type(hint) -> bool:
  """Whether a field's annotation is `float` or `Optional[float]`."""
  if hint is float:
    return True
  union = typing.get_origin(hint) in (typing.Union, types.UnionType)
  return union and set(typing.get_args(hint)) == {float, type(None)}


def sweepable_fields(config) -> Tuple[str, ...]:
  """The fields of a recipe's config that may differ per member.

  Those declared `float` or `Optional[float]` (learning rates, tau, discount,
  temperatures, epsilons, noise scales, coefficients). Everything else (ints,
  bools, strings, tuples) sizes or switches the program the members share.
  Where a recipe reads one of these as a Python number rather than as an
  array, `make_population_loop` refuses it when it first traces the program
  (see the module docstring for each recipe's list).

  Args:
    config: a recipe's config, a dataclass instance.

  Returns:
    The field names, in declaration order.
  """
  try:
    hints = typing.get_type_hints(type(config))
  except (NameError, TypeError):  # Unresolvable annotations: go by value.
    hints = {}
  names = []
  for f in dataclasses.fields(config):
    value = getattr(config, f.name)
    hint = hints.get(f.name)
    if (_is_float_type(hint) if hint is not None else
        isinstance(value, float)):
      names.append(f.name)
  return tuple(names)


def check_hparams(config, hparams: Mapping[str, Sequence[float]],
                  population: int) -> Dict[str, Tuple[float, ...]]:
  """Checks per-member values of a config's float fields.

  Args:
    config: the recipe's config (a dataclass instance), shared by the members
      but for the fields in `hparams`.
    hparams: {field: P values}, member k taking the k-th.
    population: P.

  Returns:
    {field: P floats}.

  Raises:
    ValueError: naming the field, for an empty mapping, a field the config
      lacks or that may not differ per member (listing those that may), a
      count of values other than P, or a value that is not a finite number.
  """
  if not dataclasses.is_dataclass(config) or isinstance(config, type):
    raise ValueError(
        'Per-member hyperparameters need a recipe whose config is a '
        f'dataclass instance; its config is {type(config).__name__}.')
  if not hparams:
    raise ValueError('hparams is empty: give {field: one value per member} '
                     'or None.')
  names = {f.name for f in dataclasses.fields(config)}
  nested = {g.name: f.name for f in dataclasses.fields(config)
            if dataclasses.is_dataclass(getattr(config, f.name))
            for g in dataclasses.fields(getattr(config, f.name))}
  sweepable = sweepable_fields(config)
  listed = ', '.join(sweepable) or 'none'
  checked = {}
  for name, values in hparams.items():
    if name in nested and name not in names:
      raise ValueError(
          f'{name} (of {type(config).__name__}.{nested[name]}) cannot differ '
          'per member: only the config\'s own float fields can. The fields '
          f'that may differ per member: {listed}.')
    if name not in names:
      raise ValueError(
          f'{type(config).__name__} has no field {name!r}. The fields that '
          f'may differ per member: {listed}.')
    if name not in sweepable:
      raise ValueError(
          f'{name} ({getattr(config, name)!r}) cannot differ per member: '
          'only float fields can, since the members share one program and '
          'a size, count, switch or tuple shapes it. The fields that may '
          f'differ per member: {listed}.')
    if isinstance(values, (str, bytes)) or not isinstance(
        values, collections.abc.Sequence):
      raise ValueError(f'{name}: give a sequence of {population} numbers, '
                       f'one per member; got {values!r}.')
    if len(values) != population:
      raise ValueError(f'{name}: {len(values)} values for a population of '
                       f'{population}; give one per member.')
    for v in values:
      if (isinstance(v, bool) or not isinstance(v, numbers.Real)
          or not math.isfinite(v)):
        raise ValueError(f'{name}: {v!r} is not a finite number.')
    checked[name] = tuple(float(v) for v in values)
  return checked


def member_config(config, hparams: Mapping[str, Sequence[float]], k: int):
  """Member k's config: `config` with the k-th value of every swept field.

  The single run that member k follows is `make(member_config(...), spec)`
  with seed k's key.
  """
  return dataclasses.replace(config,
                             **{f: float(v[k]) for f, v in hparams.items()})


def population_grid(seeds: Sequence[int],
                    sweep: Mapping[str, Sequence[float]]
                    ) -> Tuple[Tuple[int, ...], Dict[str, Tuple[float, ...]]]:
  """The cross product of seeds and swept values, one entry per member.

  Members are ordered by the sweep's values (first field outermost), the
  seeds innermost: seeds (0, 1) and {'tau': (0.01, 0.02)} give the members
  (seed 0, tau 0.01), (1, 0.01), (0, 0.02), (1, 0.02).

  Args:
    seeds: the seeds, at least one.
    sweep: {field: values}, each with at least one value; may be empty.

  Returns:
    (P seeds, {field: P values}) for `population_keys` and
    `make_population_loop(hparams=...)` (the mapping is empty without a
    sweep: pass None then).

  Raises:
    ValueError: naming the field, for no seeds or a field without values.
  """
  if not seeds:
    raise ValueError('A population needs at least one seed.')
  for name, values in sweep.items():
    if isinstance(values, (str, bytes)) or not len(values):
      raise ValueError(f'{name}: the sweep gives it no values.')
  names = tuple(sweep)
  combos = list(itertools.product(*(tuple(sweep[f]) for f in names)))
  member_seeds = tuple(int(s) for _ in combos for s in seeds)
  hparams = {f: tuple(combo[i] for combo in combos for _ in seeds)
             for i, f in enumerate(names)}
  return member_seeds, hparams


# What the loop reads from a recipe in Python: it must be the same for every
# member, so it may not depend on a field that differs per member.
def _structure(recipe: Recipe) -> Dict[str, Any]:
  out = {f: getattr(recipe, f) for f in (
      'name', 'on_policy', 'rollout_length', 'updates_per_iteration',
      'steps_per_iteration', 'warmup_steps')}
  if recipe.replay is not None:  # Its discount may differ per member.
    out.update(replay_capacity=recipe.replay.capacity,
               replay_batch_size=recipe.replay.batch_size,
               replay_n_step=recipe.replay.n_step)
  return out


def _check_structure(recipe: Recipe, make: Callable[..., Recipe], spec,
                     hparams: Dict[str, Tuple[float, ...]]) -> None:
  """Raises unless every member's recipe has `recipe`'s structure.

  Each member's recipe is built from its own (concrete) config, so `make`'s
  own checks see every member's values on the host.
  """
  base = _structure(recipe)
  fields = ', '.join(hparams)
  for k in range(len(next(iter(hparams.values())))):
    mine = _structure(make(member_config(recipe.config, hparams, k), spec))
    for what, value in mine.items():
      if value != base[what]:
        raise ValueError(
            f'{recipe.name}: the members disagree on {what} ({base[what]!r} '
            f'for the recipe given, {value!r} for member {k}): it depends on '
            f'{fields}, so these cannot differ per member.')


def _member_recipe(recipe: Recipe, make: Callable[..., Recipe], spec,
                   values: Mapping[str, jax.Array]) -> Recipe:
  """`recipe` with its functions rebuilt for one member's (traced) values.

  What the loop reads in Python stays `recipe`'s (checked equal for every
  member by `_check_structure`); only the replay's discount, an array in the
  sampler, is the member's.
  """
  mine = make(dataclasses.replace(recipe.config, **values), spec)
  replay = recipe.replay
  if replay is not None:
    replay = replay._replace(discount=mine.replay.discount)
  return recipe._replace(config=mine.config, init=mine.init, act=mine.act,
                         update=mine.update, replay=replay)


@contextlib.contextmanager
def _refuse_python_numbers(name: str, fields: Sequence[str]):
  """Turns a recipe's Python use of a swept field into a clear refusal."""
  try:
    yield
  except jax.errors.ConcretizationTypeError as e:
    raise ValueError(
        f'{name} reads {", ".join(fields)} as a Python number (a branch, a '
        'check or a conversion in its make or update), so it cannot differ '
        'per member in this recipe; sweep it in separate populations. '
        f'(JAX: {str(e).splitlines()[0]})') from e


def make_population_loop(
    recipe: Recipe, env, *, population: int, iterations: int = 1,
    donate: bool = True,
    hparams: Optional[Mapping[str, Sequence[float]]] = None,
    make: Optional[Callable[[Any, Any], Recipe]] = None,
) -> Tuple[Callable[[PRNGKey], LoopState],
           Callable[[LoopState], Tuple[LoopState, LoopOutput]]]:
  """P independent runs of `recipe` on `env`, as one jitted program.

  With `hparams`, the members also differ in float fields of the recipe's
  config: member k runs `make(member_config(recipe.config, hparams, k),
  env.spec)`. Inside the program the recipe is rebuilt per member with those
  fields as traced [] float32 arrays (vmapped over the members), so the
  recipe needs no change beyond reading them as arrays.

  Args:
    recipe: a `roxie.types.Recipe`; with `hparams`, `make(recipe.config,
      env.spec)`.
    env: an env of B envs (each member gets B envs of its own; on a backend
      with host physics, this env's own simulations are not used).
    population: P >= 1, the number of members.
    iterations: K, iterations per call of `run` (all members).
    donate: donate the state's buffers to the call.
    hparams: None (every member runs `recipe`), or {field: P floats}, the
      fields among `sweepable_fields(recipe.config)`.
    make: the recipe's factory `(config, env_spec) -> Recipe`; needed with
      `hparams`.

  Returns:
    `(init, run)`: `init(keys [P]) -> LoopState` with a leading [P] axis on
    every leaf (see `population_keys`; `member(state, k)` is a single run's
    LoopState), and `run(state) -> (state, LoopOutput)` with a leading [P]
    axis on every output leaf.

  Raises:
    ValueError: for bad settings, and for `hparams` as `check_hparams` says;
      when the members' recipes would differ in what the loop reads in
      Python (their kind, replay sizes, rollout length, updates per
      iteration, warm-up); and, at the first call of `init` or `run`, when
      the recipe reads a swept field as a Python number.
  """
  compiled.check_settings(recipe)
  if iterations < 1:
    raise ValueError(f'iterations must be >= 1, got {iterations}.')
  if int(population) < 1:
    raise ValueError(f'population must be >= 1, got {population}.')
  _check_env(env)
  spec, num_envs = env.spec, env.num_envs
  if hparams is None:
    values, fields = {}, ()
    member_recipe = lambda _: recipe
  else:
    if make is None:
      raise ValueError('Per-member hyperparameters need make, the recipe\'s '
                       'factory (config, env_spec) -> Recipe.')
    checked = check_hparams(recipe.config, hparams, int(population))
    _check_structure(recipe, make, spec, checked)
    values = {f: jnp.asarray(v, jnp.float32) for f, v in checked.items()}
    fields = tuple(checked)
    member_recipe = lambda v: _member_recipe(recipe, make, spec, v)
  pop_env = population_env(env, int(population))
  place = placement.OneDevice(pop_env)
  host.claim(pop_env, host.TRAINING)

  def init_member(key, v):
    with _refuse_python_numbers(recipe.name, fields):
      return iteration_lib.make_init(member_recipe(v), spec, num_envs,
                                     place)(key)

  def run_member(state, v):
    with _refuse_python_numbers(recipe.name, fields):
      step = iteration_lib.make_iteration(member_recipe(v), spec, num_envs,
                                          place, member_axis=MEMBER_AXIS)
      return iteration_lib.make_run(step, iterations, place)(state)

  init = jax.vmap(init_member, axis_name=MEMBER_AXIS)
  run = jax.vmap(run_member, axis_name=MEMBER_AXIS)
  return (jax.jit(lambda keys: init(keys, values)),
          jax.jit(lambda state: run(state, values),
                  donate_argnums=(0,) if donate else ()))
