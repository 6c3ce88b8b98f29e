"""The compiled loop's pieces: `init`, one iteration of each kind, and `run`.

Each builder returns a pure function for one placement
(`roxie.loops.placement`: one device or a mesh), so each can be traced,
jitted and tested alone; `make_compiled_loop` only composes and jits them.

  off-policy:  collect `steps_per_iteration` steps from every env (uniform
               random actions during warm-up) -> write them to replay ->
               `updates_per_iteration` gradient steps on sampled n-step batches
  on-policy:   collect a `rollout_length` x num_envs rollout -> one `update`
               (epochs and minibatches happen inside the recipe)

An iteration is `iteration(state, key) -> (state, (metrics, learned))`,
`learned` a [] bool saying whether it updated the agent.

`member_axis`: the iteration builders also run vmapped over the members of
a population (`roxie.loops.population`), named by this vmap axis. Members run
in lockstep, so what the loop branches on (warm-up, whether to learn) is the
same for all of them; taking it from the member axis (`lax.pmax`) keeps the
predicate unbatched, so `lax.cond` stays a branch instead of a select that
runs both sides for every member. Without it (None) nothing changes.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from roxie import buffers
from roxie.loops import collect
from roxie.loops.placement import OneDevice
from roxie.loops.state import LoopOutput, LoopState
from roxie.types import EnvSpec, PRNGKey, Recipe, Rollout

Iteration = Callable[[LoopState, PRNGKey], Tuple[LoopState, tuple]]


def env_steps_per_iteration(recipe: Recipe, num_envs: int) -> int:
  """Environment steps (all envs together) that one iteration collects."""
  per_env = recipe.rollout_length if recipe.on_policy else recipe.steps_per_iteration
  return int(per_env) * int(num_envs)


def _agree(x, member_axis: Optional[str]):
  """`x`, equal for every member by construction, as one unbatched value."""
  return x if member_axis is None else jax.lax.pmax(x, member_axis)


def make_init(recipe: Recipe, spec: EnvSpec, num_envs: int,
              place: OneDevice) -> Callable[[PRNGKey], LoopState]:
  """`init(key) -> LoopState`: agent, envs reset, empty replay, zero stats.

  Args:
    recipe: the recipe.
    spec: the env's spec.
    num_envs: B, all devices together.
    place: the placement.
  """
  d = place.num_shards
  b = num_envs // d  # Envs per device.

  def init_device(k_env):
    env_state = place.local_env.reset(place.device_key(k_env))
    if recipe.on_policy:
      replay = ()
    else:
      replay = buffers.replay_init(
          capacity=recipe.replay.capacity // d, num_envs=b,
          obs_size=spec.obs_size, action_size=spec.action_size,
          episode_length=spec.episode_length,
          obs_shapes=getattr(spec, 'obs_shapes', None),
          frame_stack=getattr(spec, 'frame_stack', 1))
    return place.stack((env_state, replay, collect.init_stats(b)))

  def init(key: PRNGKey) -> LoopState:
    k_agent, k_env, k_loop = jax.random.split(key, 3)
    agent = place.constrain(recipe.init(k_agent, spec), place.replicated)
    env_state, replay, stats = place.shard_map(
        init_device, (place.replicated,), place.per_device)(k_env)
    return LoopState(agent=agent, env=env_state, replay=replay, stats=stats,
                     key=k_loop, iteration=jnp.zeros((), jnp.int32))

  return init


def _collect_into_replay(recipe: Recipe, spec: EnvSpec, b: int,
                         place: OneDevice, member_axis: Optional[str]):
  """`collect(agent, env, stats, replay, key, warm)` on one device's shard.

  steps_per_iteration steps of the device's b envs (uniform random actions
  while `warm`), each written to its replay; returns the stacked
  (env, stats, replay) and whether replay can now be sampled.
  """
  n_step = recipe.replay.n_step

  def collect_device(agent, env_state, stats, replay, key, warm):
    env_state, stats, replay = place.unstack((env_state, stats, replay))

    def policy(obs, k):
      def explore(_):
        return recipe.act(agent, obs, k, explore=True)[0]

      def uniform(_):
        return collect.uniform_actions(k, b, spec.action_size)
      return jax.lax.cond(warm, uniform, explore, None), {}

    env_step = collect.make_env_step(place.local_env, policy)

    def step_and_store(carry, k):
      env_state, stats, replay = carry
      (env_state, stats), s = env_step((env_state, stats), k)
      # Members write in lockstep: with the ring's counters ([] leaves)
      # unbatched, vmap keeps each write a dynamic_update_slice, where a
      # per-member row index would make it a scatter.
      replay = jax.tree.map(
          lambda x: _agree(x, member_axis) if jnp.ndim(x) == 0 else x, replay)
      replay = buffers.replay_add(replay, s.obs, s.action, s.timestep)
      return (env_state, stats, replay), None

    (env_state, stats, replay), _ = jax.lax.scan(
        step_and_store, (env_state, stats, replay),
        jax.random.split(place.device_key(key), recipe.steps_per_iteration))
    # Every device has written the same number of rows: equal everywhere.
    can_sample = buffers.replay_can_sample(replay, n_step=n_step)
    return place.stack((env_state, stats, replay)) + (can_sample,)

  dev, rep = place.per_device, place.replicated
  return place.shard_map(collect_device, (rep, dev, dev, dev, rep, rep),
                         (dev, dev, dev, rep))


def _learner(recipe: Recipe, place: OneDevice):
  """`learn(agent, replay, key) -> (agent, mean metrics)`: the update burst.

  updates_per_iteration gradient steps, each on batch_size transitions
  (batch_size / D from every device's own replay).
  """
  rs = recipe.replay
  d = place.num_shards

  def sample_device(replay, key):
    return buffers.replay_sample(place.unstack(replay), place.device_key(key),
                                 batch_size=rs.batch_size // d,
                                 n_step=rs.n_step, discount=rs.discount)

  sample = place.shard_map(sample_device,
                           (place.per_device, place.replicated),
                           place.per_device)
  update = place.update(recipe.update)

  def learn(agent, replay, key):
    def one_update(agent, k):
      k_sample, k_update = jax.random.split(k)
      return update(agent, sample(replay, k_sample), k_update)

    agent, metrics = jax.lax.scan(
        one_update, agent, jax.random.split(key, recipe.updates_per_iteration))
    return agent, jax.tree.map(jnp.mean, metrics)

  return learn


def off_policy_iteration(recipe: Recipe, spec: EnvSpec, num_envs: int,
                         place: OneDevice, *,
                         member_axis: Optional[str] = None) -> Iteration:
  """One off-policy iteration: collect into replay, then maybe learn.

  The update burst runs (under `lax.cond`) once replay can sample and the
  iteration's steps complete the warm-up; otherwise the agent is unchanged
  and the metrics are zeros.

  Args:
    recipe: an off-policy recipe.
    spec: the env's spec.
    num_envs: B, all devices together.
    place: the placement.
    member_axis: the vmap axis of a population's members, or None.

  Returns:
    `iteration(state, key) -> (state, (metrics, learned))`.
  """
  if recipe.replay.batch_size % place.num_shards:
    raise ValueError(f'batch_size ({recipe.replay.batch_size}) must be a '
                     f'multiple of the number of devices ({place.num_shards}).')
  collect_fn = _collect_into_replay(recipe, spec, num_envs // place.num_shards,
                                    place, member_axis)
  learn = _learner(recipe, place)
  per_iteration = env_steps_per_iteration(recipe, num_envs)

  def iteration(state: LoopState, key: PRNGKey):
    k_steps, k_updates = jax.random.split(key)
    steps_done = state.iteration * per_iteration
    warm = _agree(steps_done < recipe.warmup_steps, member_axis)
    env_state, stats, replay, can_sample = collect_fn(
        state.agent, state.env, state.stats, state.replay, k_steps, warm)

    def learn_now(agent):
      return learn(agent, replay, k_updates)

    metric_shapes = jax.eval_shape(learn_now, state.agent)[1]

    def skip(agent):
      return agent, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                 metric_shapes)

    ready = jnp.logical_and(
        can_sample, steps_done + per_iteration >= recipe.warmup_steps)
    if recipe.updates_per_iteration == 0:
      ready = jnp.zeros((), bool)
    ready = _agree(ready, member_axis)
    agent, metrics = jax.lax.cond(ready, learn_now, skip, state.agent)
    new_state = state._replace(agent=agent, env=env_state, replay=replay,
                               stats=stats, iteration=state.iteration + 1)
    return new_state, (metrics, ready)

  return iteration


def on_policy_iteration(recipe: Recipe, spec: EnvSpec, num_envs: int,
                        place: OneDevice, *,
                        member_axis: Optional[str] = None) -> Iteration:
  """One on-policy iteration: a rollout_length x num_envs rollout, one update.

  Args:
    recipe: an on-policy recipe.
    spec: the env's spec (unused: rollouts take their shapes from the env).
    num_envs: B, all devices together (unused: each device steps its shard).
    place: the placement.
    member_axis: the vmap axis of a population's members (unused: an
      on-policy iteration does not branch).

  Returns:
    `iteration(state, key) -> (state, (metrics, learned))`, learned always.
  """
  del spec, num_envs, member_axis
  dev, rep = place.per_device, place.replicated
  time_major = P(None, place.axis)  # [T, B, ...] rollout leaves.
  rollout_specs = Rollout(obs=time_major, action=time_major,
                          reward=time_major, terminated=time_major,
                          truncated=time_major, final_obs=time_major,
                          extras=time_major, last_obs=dev)

  def rollout_device(agent, env_state, stats, key):
    """A rollout_length x (num_envs / D) rollout of this device's envs."""
    env_state, stats = place.unstack((env_state, stats))

    def policy(obs, k):
      return recipe.act(agent, obs, k, explore=True)

    env_step = collect.make_env_step(place.local_env, policy)
    (env_state, stats), steps = jax.lax.scan(
        env_step, (env_state, stats),
        jax.random.split(place.device_key(key), recipe.rollout_length))
    ts = steps.timestep
    rollout = Rollout(obs=steps.obs, action=steps.action, reward=ts.reward,
                      terminated=ts.terminated, truncated=ts.truncated,
                      final_obs=ts.final_obs, extras=steps.extras,
                      last_obs=env_state.obs)
    return place.stack((env_state, stats)) + (rollout,)

  collect_fn = place.shard_map(rollout_device, (rep, dev, dev, rep),
                               (dev, dev, rollout_specs))
  update = place.update(recipe.update, rollout_specs)

  def iteration(state: LoopState, key: PRNGKey):
    k_steps, k_update = jax.random.split(key)
    env_state, stats, rollout = collect_fn(state.agent, state.env, state.stats,
                                           k_steps)
    agent, metrics = update(state.agent, rollout, k_update)
    new_state = state._replace(agent=agent, env=env_state, stats=stats,
                               iteration=state.iteration + 1)
    return new_state, (metrics, jnp.ones((), bool))

  return iteration


def make_iteration(recipe: Recipe, spec: EnvSpec, num_envs: int,
                   place: OneDevice, *,
                   member_axis: Optional[str] = None) -> Iteration:
  """The recipe's kind of iteration (on- or off-policy)."""
  build = on_policy_iteration if recipe.on_policy else off_policy_iteration
  return build(recipe, spec, num_envs, place, member_axis=member_axis)


def make_run(iteration: Iteration, iterations: int, place: OneDevice
             ) -> Callable[[LoopState], Tuple[LoopState, LoopOutput]]:
  """`run(state) -> (state, LoopOutput)`: `iterations` iterations, scanned.

  The per-call episode counters are cleared first (episodes in progress
  continue); the metrics are averaged over the iterations that learned.
  """
  def run(state: LoopState) -> Tuple[LoopState, LoopOutput]:
    state = state._replace(stats=collect.clear_completed(state.stats))
    key, k_iters = jax.random.split(state.key)
    state = state._replace(key=key)
    state, (metrics, learned) = jax.lax.scan(
        iteration, state, jax.random.split(k_iters, iterations))
    n = jnp.sum(learned.astype(jnp.int32))
    w = learned.astype(jnp.float32) / jnp.maximum(n, 1).astype(jnp.float32)
    mean_metrics = jax.tree.map(
        lambda m: jnp.tensordot(w, m.astype(jnp.float32), axes=1), metrics)
    return state, LoopOutput(metrics=mean_metrics, updates=n,
                             stats=place.global_stats(state.stats))

  return run
