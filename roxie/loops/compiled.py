"""`make_compiled_loop`: any recipe with any backend, as one XLA program.

One call of the returned `run` function executes `iterations` iterations of

  off-policy:  collect `steps_per_iteration` steps from every env (uniform
               random actions during warm-up) -> write them to replay ->
               `updates_per_iteration` gradient steps on sampled n-step batches
  on-policy:   collect a `rollout_length` x num_envs rollout -> one `update`
               (epochs and minibatches happen inside the recipe)

inside a single jitted function whose state is donated, so nothing crosses to
the host between iterations (on the MJX backend nothing crosses at all; the
native backend reaches its physics through a callback inside the program).
Python only runs between calls: logging, checkpoints, progress.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from roxie import buffers
from roxie.loops import collect
from roxie.types import Array, EnvState, PRNGKey, Recipe, Rollout, Transition


class LoopState(NamedTuple):
  """Everything the compiled loop carries from one call to the next."""
  agent: Any  # The recipe's state.
  env: EnvState
  replay: Any  # Replay state (off-policy) or an empty tuple (on-policy).
  stats: collect.EpisodeStats
  key: PRNGKey
  iteration: Array  # [] int32 iterations run so far.


class LoopOutput(NamedTuple):
  """What one call reports back (host-side logging only)."""
  metrics: Mapping[str, Array]  # Recipe metrics, averaged over the call's updates.
  updates: Array  # [] int32 update calls made during this call.
  stats: collect.EpisodeStats  # Episode statistics gathered during the call.


def env_steps_per_iteration(recipe: Recipe, num_envs: int) -> int:
  """Environment steps (all envs together) that one iteration collects."""
  per_env = recipe.rollout_length if recipe.on_policy else recipe.steps_per_iteration
  return int(per_env) * int(num_envs)


def _check_recipe(recipe: Recipe) -> None:
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
                       donate: bool = True
                       ) -> Tuple[Callable[[PRNGKey], LoopState],
                                  Callable[[LoopState], Tuple[LoopState, LoopOutput]]]:
  """Fuses `recipe` and `env` into one jitted training program.

  Args:
    recipe: a `roxie.types.Recipe`.
    env: a `roxie.types.Env` (any backend).
    iterations: K, iterations per call of `run`.
    donate: donate the loop state's buffers to the call (saves a copy of the
      replay; the state passed in must not be used again).

  Returns:
    `(init, run)`: `init(key) -> LoopState` (jitted) and
    `run(state) -> (state, LoopOutput)` (jitted, K iterations).
  """
  _check_recipe(recipe)
  if iterations < 1:
    raise ValueError(f'iterations must be >= 1, got {iterations}.')
  spec = env.spec
  num_envs = env.num_envs

  def init(key: PRNGKey) -> LoopState:
    k_agent, k_env, k_loop = jax.random.split(key, 3)
    agent = recipe.init(k_agent, spec)
    env_state = env.reset(k_env)
    if recipe.on_policy:
      replay = ()
    else:
      replay = buffers.replay_init(
          capacity=recipe.replay.capacity, num_envs=num_envs,
          obs_size=spec.obs_size, action_size=spec.action_size,
          episode_length=spec.episode_length)
    return LoopState(agent=agent, env=env_state, replay=replay,
                     stats=collect.init_stats(num_envs), key=k_loop,
                     iteration=jnp.zeros((), jnp.int32))

  # --- off-policy -----------------------------------------------------------
  def off_policy_iteration(state: LoopState, key: PRNGKey):
    k_steps, k_updates = jax.random.split(key)
    steps_done = state.iteration * env_steps_per_iteration(recipe, num_envs)
    warm = steps_done < recipe.warmup_steps

    def policy(obs, k):
      def explore(_):
        return recipe.act(state.agent, obs, k, explore=True)[0]

      def uniform(_):
        return collect.uniform_actions(k, num_envs, spec.action_size)
      return jax.lax.cond(warm, uniform, explore, None), {}

    env_step = collect.make_env_step(env, policy)

    def step_and_store(carry, k):
      env_state, stats, replay = carry
      (env_state, stats), s = env_step((env_state, stats), k)
      replay = buffers.replay_add(replay, s.obs, s.action, s.timestep)
      return (env_state, stats, replay), None

    (env_state, stats, replay), _ = jax.lax.scan(
        step_and_store, (state.env, state.stats, state.replay),
        jax.random.split(k_steps, recipe.steps_per_iteration))

    rs = recipe.replay

    def one_update(agent, k):
      k_sample, k_update = jax.random.split(k)
      batch = buffers.replay_sample(replay, k_sample, batch_size=rs.batch_size,
                                    n_step=rs.n_step, discount=rs.discount)
      return recipe.update(agent, batch, k_update)

    def learn(agent):
      agent, metrics = jax.lax.scan(
          one_update, agent,
          jax.random.split(k_updates, recipe.updates_per_iteration))
      return agent, jax.tree.map(jnp.mean, metrics)

    metric_shapes = jax.eval_shape(learn, state.agent)[1]

    def skip(agent):
      return agent, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                 metric_shapes)

    ready = jnp.logical_and(
        buffers.replay_can_sample(replay, n_step=rs.n_step),
        steps_done + env_steps_per_iteration(recipe, num_envs)
        >= recipe.warmup_steps)
    if recipe.updates_per_iteration == 0:
      ready = jnp.zeros((), bool)
    agent, metrics = jax.lax.cond(ready, learn, skip, state.agent)
    new_state = state._replace(agent=agent, env=env_state, replay=replay,
                               stats=stats, iteration=state.iteration + 1)
    return new_state, (metrics, ready)

  # --- on-policy ------------------------------------------------------------
  def on_policy_iteration(state: LoopState, key: PRNGKey):
    k_steps, k_update = jax.random.split(key)

    def policy(obs, k):
      return recipe.act(state.agent, obs, k, explore=True)

    env_step = collect.make_env_step(env, policy)
    (env_state, stats), steps = jax.lax.scan(
        env_step, (state.env, state.stats),
        jax.random.split(k_steps, recipe.rollout_length))
    ts = steps.timestep
    rollout = Rollout(obs=steps.obs, action=steps.action, reward=ts.reward,
                      terminated=ts.terminated, truncated=ts.truncated,
                      final_obs=ts.final_obs, extras=steps.extras,
                      last_obs=env_state.obs)
    agent, metrics = recipe.update(state.agent, rollout, k_update)
    new_state = state._replace(agent=agent, env=env_state, stats=stats,
                               iteration=state.iteration + 1)
    return new_state, (metrics, jnp.ones((), bool))

  iteration_fn = on_policy_iteration if recipe.on_policy else off_policy_iteration

  def run(state: LoopState) -> Tuple[LoopState, LoopOutput]:
    state = state._replace(stats=collect.clear_completed(state.stats))
    key, k_iters = jax.random.split(state.key)
    state = state._replace(key=key)
    state, (metrics, learned) = jax.lax.scan(
        iteration_fn, state, jax.random.split(k_iters, iterations))
    n = jnp.sum(learned.astype(jnp.int32))
    w = learned.astype(jnp.float32) / jnp.maximum(n, 1).astype(jnp.float32)
    mean_metrics = jax.tree.map(
        lambda m: jnp.tensordot(w, m.astype(jnp.float32), axes=1), metrics)
    return state, LoopOutput(metrics=mean_metrics, updates=n, stats=state.stats)

  return (jax.jit(init),
          jax.jit(run, donate_argnums=(0,) if donate else ()))
