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

from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from roxie import buffers
from roxie import distributed
from roxie.loops import collect
from roxie.types import Array, EnvState, PRNGKey, Recipe, Rollout


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
  _check_recipe(recipe)
  if iterations < 1:
    raise ValueError(f'iterations must be >= 1, got {iterations}.')
  if mesh is None and isinstance(env, distributed.ShardedEnv):
    mesh = env.mesh
  spec = env.spec
  num_envs = env.num_envs
  if mesh is None:
    local_env, d, axis = env, 1, None
  else:
    sharded = distributed.shard_env(env, mesh)
    if sharded.mesh != mesh:
      raise ValueError('The ShardedEnv was built for another mesh.')
    local_env, d = sharded.local, sharded.num_shards
    axis = distributed.mesh_axis(mesh)
  b = num_envs // d  # Envs per device.
  if not recipe.on_policy and recipe.replay.batch_size % d:
    raise ValueError(f'batch_size ({recipe.replay.batch_size}) must be a '
                     f'multiple of the number of devices ({d}).')

  # -- placement: identity without a mesh --------------------------------------
  per_dev = P(axis)  # Stacked per-device state, or a batch's leading axis.
  rep = P()

  def per_device(fn, in_specs, out_specs):
    """`fn` on every device's shard (shard_map); `fn` itself without a mesh."""
    if mesh is None:
      return fn
    # check_vma=False: `can_sample` is computed by every device from its own
    # replay and returned as replicated (P()); it is equal everywhere by
    # construction, which the varying-axes type check cannot see.
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs,
                         out_specs=out_specs, check_vma=False)

  def device_key(key):
    """This device's key (inside `per_device`): the key folded with its index."""
    return key if d == 1 else jax.random.fold_in(key,
                                                  jax.lax.axis_index(axis))

  def unstack(tree):
    return tree if mesh is None else jax.tree.map(lambda x: x[0], tree)

  def stack(tree):
    return tree if mesh is None else jax.tree.map(lambda x: x[None], tree)

  def constrain(tree, pspec):
    if mesh is None:
      return tree
    return jax.lax.with_sharding_constraint(tree, NamedSharding(mesh, pspec))

  def init(key: PRNGKey) -> LoopState:
    k_agent, k_env, k_loop = jax.random.split(key, 3)
    agent = constrain(recipe.init(k_agent, spec), rep)

    def init_device(k_env):
      env_state = local_env.reset(device_key(k_env))
      if recipe.on_policy:
        replay = ()
      else:
        replay = buffers.replay_init(
            capacity=recipe.replay.capacity // d, num_envs=b,
            obs_size=spec.obs_size, action_size=spec.action_size,
            episode_length=spec.episode_length,
            obs_shapes=getattr(spec, 'obs_shapes', None),
            frame_stack=getattr(spec, 'frame_stack', 1))
      return stack((env_state, replay, collect.init_stats(b)))

    env_state, replay, stats = per_device(init_device, (rep,), per_dev)(k_env)
    return LoopState(agent=agent, env=env_state, replay=replay, stats=stats,
                     key=k_loop, iteration=jnp.zeros((), jnp.int32))

  # --- off-policy -----------------------------------------------------------
  rs = recipe.replay

  def collect_device(agent, env_state, stats, replay, key, warm):
    """steps_per_iteration steps of this device's envs, into its replay."""
    env_state, stats, replay = unstack((env_state, stats, replay))

    def policy(obs, k):
      def explore(_):
        return recipe.act(agent, obs, k, explore=True)[0]

      def uniform(_):
        return collect.uniform_actions(k, b, spec.action_size)
      return jax.lax.cond(warm, uniform, explore, None), {}

    env_step = collect.make_env_step(local_env, policy)

    def step_and_store(carry, k):
      env_state, stats, replay = carry
      (env_state, stats), s = env_step((env_state, stats), k)
      replay = buffers.replay_add(replay, s.obs, s.action, s.timestep)
      return (env_state, stats, replay), None

    (env_state, stats, replay), _ = jax.lax.scan(
        step_and_store, (env_state, stats, replay),
        jax.random.split(device_key(key), recipe.steps_per_iteration))
    # Every device has written the same number of rows: equal everywhere.
    can_sample = buffers.replay_can_sample(replay, n_step=rs.n_step)
    return stack((env_state, stats, replay)) + (can_sample,)

  def sample_device(replay, key):
    """batch_size / D transitions from this device's own replay."""
    return buffers.replay_sample(unstack(replay), device_key(key),
                                 batch_size=rs.batch_size // d,
                                 n_step=rs.n_step, discount=rs.discount)

  def off_policy_iteration(state: LoopState, key: PRNGKey):
    k_steps, k_updates = jax.random.split(key)
    steps_done = state.iteration * env_steps_per_iteration(recipe, num_envs)
    warm = steps_done < recipe.warmup_steps
    env_state, stats, replay, can_sample = per_device(
        collect_device, (rep, per_dev, per_dev, per_dev, rep, rep),
        (per_dev, per_dev, per_dev, rep))(
            state.agent, state.env, state.stats, state.replay, k_steps, warm)
    sample = per_device(sample_device, (per_dev, rep), per_dev)
    update = distributed.data_parallel_update(recipe.update, mesh)

    def one_update(agent, k):
      k_sample, k_update = jax.random.split(k)
      return update(agent, sample(replay, k_sample), k_update)

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
        can_sample,
        steps_done + env_steps_per_iteration(recipe, num_envs)
        >= recipe.warmup_steps)
    if recipe.updates_per_iteration == 0:
      ready = jnp.zeros((), bool)
    agent, metrics = jax.lax.cond(ready, learn, skip, state.agent)
    new_state = state._replace(agent=agent, env=env_state, replay=replay,
                               stats=stats, iteration=state.iteration + 1)
    return new_state, (metrics, ready)

  # --- on-policy ------------------------------------------------------------
  time_major = P(None, axis)  # [T, B, ...] rollout leaves.
  rollout_specs = Rollout(obs=time_major, action=time_major,
                          reward=time_major, terminated=time_major,
                          truncated=time_major, final_obs=time_major,
                          extras=time_major, last_obs=per_dev)

  def rollout_device(agent, env_state, stats, key):
    """A rollout_length x (num_envs / D) rollout of this device's envs."""
    env_state, stats = unstack((env_state, stats))

    def policy(obs, k):
      return recipe.act(agent, obs, k, explore=True)

    env_step = collect.make_env_step(local_env, policy)
    (env_state, stats), steps = jax.lax.scan(
        env_step, (env_state, stats),
        jax.random.split(device_key(key), recipe.rollout_length))
    ts = steps.timestep
    rollout = Rollout(obs=steps.obs, action=steps.action, reward=ts.reward,
                      terminated=ts.terminated, truncated=ts.truncated,
                      final_obs=ts.final_obs, extras=steps.extras,
                      last_obs=env_state.obs)
    return stack((env_state, stats)) + (rollout,)

  def on_policy_iteration(state: LoopState, key: PRNGKey):
    k_steps, k_update = jax.random.split(key)
    env_state, stats, rollout = per_device(
        rollout_device, (rep, per_dev, per_dev, rep),
        (per_dev, per_dev, rollout_specs))(
            state.agent, state.env, state.stats, k_steps)
    update = distributed.data_parallel_update(recipe.update, mesh,
                                              rollout_specs)
    agent, metrics = update(state.agent, rollout, k_update)
    new_state = state._replace(agent=agent, env=env_state, stats=stats,
                               iteration=state.iteration + 1)
    return new_state, (metrics, jnp.ones((), bool))

  iteration_fn = on_policy_iteration if recipe.on_policy else off_policy_iteration

  def global_stats(stats: collect.EpisodeStats) -> collect.EpisodeStats:
    """Per-device statistics ([D, B / D] and [D]) as one batch's ([B], [])."""
    if mesh is None:
      return stats
    return collect.EpisodeStats(
        episode_return=stats.episode_return.reshape(num_envs),
        episode_length=stats.episode_length.reshape(num_envs),
        completed=jnp.sum(stats.completed),
        completed_return=jnp.sum(stats.completed_return),
        completed_length=jnp.sum(stats.completed_length),
        clipped=jnp.sum(stats.clipped), diverged=jnp.sum(stats.diverged))

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
    return state, LoopOutput(metrics=mean_metrics, updates=n,
                             stats=global_stats(state.stats))

  donate_argnums = (0,) if donate else ()
  if mesh is None:
    return jax.jit(init), jax.jit(run, donate_argnums=donate_argnums)
  rep_sh = distributed.replicated(mesh)
  dev_sh = distributed.stacked(mesh)
  state_sh = LoopState(agent=rep_sh, env=dev_sh, replay=dev_sh, stats=dev_sh,
                       key=rep_sh, iteration=rep_sh)
  return (jax.jit(init, in_shardings=rep_sh, out_shardings=state_sh),
          jax.jit(run, in_shardings=(state_sh,),
                  out_shardings=(state_sh, rep_sh),
                  donate_argnums=donate_argnums))
