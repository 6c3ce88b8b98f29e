"""Where the compiled loop's pieces run: one device, or a 1-D mesh of them.

The iteration builders (`roxie.loops.iteration`) are written once against
the small interface below; a placement decides what it means:

* `OneDevice`: every method is the identity (or plain `jax.jit`), so the
  iteration bodies are exactly the single-device program.
* `OnMesh`: per-device pieces (env state, replay, episode statistics) run
  inside `jax.shard_map` over the mesh, stacked along a leading axis of size
  D; the agent state is replicated and the recipe's `update` runs on the
  global batch through `roxie.distributed.data_parallel_update`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from roxie import distributed
from roxie.loops import collect
from roxie.loops.state import LoopState
from roxie.types import PRNGKey


class OneDevice:
  """The loop on one device: nothing is sharded, nothing is stacked.

  Attributes:
    local_env: the env each "device" steps (here: the whole env).
    num_shards: D = 1.
    axis: None (no mesh axis).
  """
  num_shards = 1
  axis = None

  def __init__(self, env):
    self.local_env = env

  @property
  def per_device(self) -> P:
    """PartitionSpec of per-device state (unused on one device)."""
    return P(self.axis)

  @property
  def replicated(self) -> P:
    return P()

  def shard_map(self, fn: Callable, in_specs, out_specs) -> Callable:
    """`fn` on every device's shard; on one device, `fn` itself."""
    del in_specs, out_specs
    return fn

  def device_key(self, key: PRNGKey) -> PRNGKey:
    """This device's key (inside `shard_map`); on one device, `key`."""
    return key

  def stack(self, tree: Any) -> Any:
    """Per-device pieces as the loop state stores them (here unchanged)."""
    return tree

  def unstack(self, tree: Any) -> Any:
    """The loop state's per-device pieces as one device sees them."""
    return tree

  def constrain(self, tree: Any, pspec: P) -> Any:
    del pspec
    return tree

  def update(self, update: Callable, data_spec=None) -> Callable:
    """The recipe's `update`, laid out for this placement."""
    del data_spec
    return update

  def global_stats(self, stats: collect.EpisodeStats) -> collect.EpisodeStats:
    """Episode statistics as one batch's ([B] and [] leaves)."""
    return stats

  def jit(self, init: Callable, run: Callable, donate: bool
          ) -> Tuple[Callable, Callable]:
    """The jitted `(init, run)` pair."""
    return jax.jit(init), jax.jit(run, donate_argnums=(0,) if donate else ())


class OnMesh(OneDevice):
  """The loop data-parallel over a 1-D mesh (see `roxie.distributed`).

  Each device steps num_envs / D envs inside `jax.shard_map`, writes its own
  replay ring and samples batch_size / D transitions from it; the agent state
  is replicated and `update` runs on the concatenated global batch, so XLA
  averages gradients with all-reduces. Device i's randomness is the key
  folded with i (D = 1 reproduces `OneDevice`).
  """

  def __init__(self, env, mesh: Mesh):
    sharded = distributed.shard_env(env, mesh)
    if sharded.mesh != mesh:
      raise ValueError('The ShardedEnv was built for another mesh.')
    super().__init__(sharded.local)
    self.mesh = mesh
    self.num_shards = sharded.num_shards
    self.axis = distributed.mesh_axis(mesh)
    self.num_envs = sharded.num_envs

  def shard_map(self, fn, in_specs, out_specs):
    # check_vma=False: `can_sample` is computed by every device from its own
    # replay and returned as replicated (P()); it is equal everywhere by
    # construction, which the varying-axes type check cannot see.
    return jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs,
                         out_specs=out_specs, check_vma=False)

  def device_key(self, key):
    if self.num_shards == 1:
      return key
    return jax.random.fold_in(key, jax.lax.axis_index(self.axis))

  def stack(self, tree):
    return jax.tree.map(lambda x: x[None], tree)

  def unstack(self, tree):
    return jax.tree.map(lambda x: x[0], tree)

  def constrain(self, tree, pspec):
    return jax.lax.with_sharding_constraint(tree,
                                            NamedSharding(self.mesh, pspec))

  def update(self, update, data_spec=None):
    return distributed.data_parallel_update(update, self.mesh, data_spec)

  def global_stats(self, stats):
    """Per-device statistics ([D, B / D] and [D]) as one batch's ([B], [])."""
    b = self.num_envs
    return collect.EpisodeStats(
        episode_return=stats.episode_return.reshape(b),
        episode_length=stats.episode_length.reshape(b),
        completed=jnp.sum(stats.completed),
        completed_return=jnp.sum(stats.completed_return),
        completed_length=jnp.sum(stats.completed_length),
        clipped=jnp.sum(stats.clipped), diverged=jnp.sum(stats.diverged))

  def jit(self, init, run, donate):
    rep = distributed.replicated(self.mesh)
    dev = distributed.stacked(self.mesh)
    state = LoopState(agent=rep, env=dev, replay=dev, stats=dev, key=rep,
                      iteration=rep)
    return (jax.jit(init, in_shardings=rep, out_shardings=state),
            jax.jit(run, in_shardings=(state,), out_shardings=(state, rep),
                    donate_argnums=(0,) if donate else ()))


def place(env, mesh: Optional[Mesh] = None) -> OneDevice:
  """The placement of a loop over `env`: `mesh`'s, the ShardedEnv's, or one device.

  Args:
    env: an env, or a `roxie.distributed.ShardedEnv`.
    mesh: a 1-D mesh to run data-parallel over (default: the ShardedEnv's
      mesh, else one device).

  Returns:
    A `OneDevice` or `OnMesh`.
  """
  if mesh is None and isinstance(env, distributed.ShardedEnv):
    mesh = env.mesh
  return OneDevice(env) if mesh is None else OnMesh(env, mesh)
