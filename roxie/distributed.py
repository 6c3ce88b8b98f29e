"""Data parallelism over devices and hosts, on JAX's own machinery.

`make_compiled_loop(recipe, env, mesh=mesh)` runs the training program over
the devices of a 1-D `jax.sharding.Mesh`:

* Environments are split into one equal shard per device. Each device steps
  its own shard inside `jax.shard_map`: the MJX backend runs a batch of
  num_envs / D simulations per device; the native backend gives every device
  its own `mujoco.batch.Batch` of num_envs / D simulations (threads split
  between them), reached from that device's program by its own callback.
* Replay is sharded the same way: each device holds a whole ring of its own
  envs' transitions ([D, R, B / D, ...] globally) and samples batch_size / D
  transitions from it locally. Nothing about replay ever crosses devices.
* The recipe's `update` is NOT wrapped: it runs on the global batch (the
  concatenation of the per-device batches, sharded along its first axis) with
  parameters replicated, and XLA's SPMD partitioner (GSPMD/Shardy) turns the
  recipe's means over the batch into per-device partial sums plus an
  all-reduce. Gradients are thus averaged across devices, and the update is
  the same function of the global batch as on one device, with no change to
  the recipe.

Many hosts: call `initialize(...)` (a thin wrapper of
`jax.distributed.initialize` that also selects CPU collectives) in every
process before anything else touches JAX, then build the mesh over
`jax.devices()` (all processes' devices) and run the same program in every
process; XLA's collectives keep the replicated parameters identical.

The loop state of a sharded run stores every per-device piece (env state,
replay, episode statistics) stacked along a new leading axis of size D that
is sharded over the mesh; the agent state, key and iteration are replicated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DEFAULT_AXIS = 'data'


def initialize(coordinator_address: Optional[str] = None,
               num_processes: Optional[int] = None,
               process_id: Optional[int] = None, *,
               cpu_collectives: str = 'gloo', **kwargs) -> None:
  """Joins a multi-process (multi-host) JAX job; call before any other JAX use.

  Args:
    coordinator_address: 'host:port' of process 0's coordinator service
      (default: JAX's cluster auto-detection, or JAX_COORDINATOR_ADDRESS).
    num_processes: processes in the job.
    process_id: this process's index, 0 <= process_id < num_processes.
    cpu_collectives: collectives between CPU devices of different processes,
      'gloo' (default) or 'mpi'; ignored by accelerator platforms.
    **kwargs: passed on to `jax.distributed.initialize`.
  """
  if cpu_collectives:
    jax.config.update('jax_cpu_collectives_implementation', cpu_collectives)
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes,
                             process_id=process_id, **kwargs)


def make_mesh(num_devices: Optional[int] = None, *,
              devices: Optional[Sequence[Any]] = None,
              axis_name: str = DEFAULT_AXIS) -> Mesh:
  """A 1-D mesh over the first `num_devices` of `devices` (default: all of
  `jax.devices()`, every process's devices in a multi-process job)."""
  devices = list(jax.devices() if devices is None else devices)
  n = len(devices) if num_devices is None else int(num_devices)
  if not 1 <= n <= len(devices):
    raise ValueError(f'Asked for {n} devices; {len(devices)} are available '
                     f'({devices[0].platform}). On CPU, more devices come from '
                     '`jax.config.update("jax_num_cpu_devices", N)` or '
                     'XLA_FLAGS=--xla_force_host_platform_device_count=N, set '
                     'before JAX initialises.')
  return Mesh(np.asarray(devices[:n]), (axis_name,))


def request_cpu_devices(n: int) -> bool:
  """Splits this process's CPU into `n` XLA devices, if JAX has not started.

  Affects only the CPU platform (the default where no accelerator is
  installed). Returns whether the setting was applied.
  """
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  if n <= 1 or xla_bridge.backends_are_initialized():
    return False
  if jax.config.jax_num_cpu_devices >= n:
    return True
  jax.config.update('jax_num_cpu_devices', int(n))
  return True


def setup(num_devices: Optional[int] = None, *,
          coordinator_address: Optional[str] = None,
          num_processes: Optional[int] = None,
          process_id: Optional[int] = None) -> None:
  """What `roxie train` does before anything else touches JAX.

  Joins the multi-process job if `coordinator_address` is given, and on CPU
  asks for enough devices for `num_devices` (all processes together, split
  evenly between them).
  """
  procs = int(num_processes or 1)
  if num_devices and num_devices > 1:
    if num_devices % procs:
      raise ValueError(f'--num-devices ({num_devices}) must be a multiple of '
                       f'--num-processes ({procs}).')
    request_cpu_devices(num_devices // procs)
  if coordinator_address:
    initialize(coordinator_address, procs, process_id)


def default_num_devices(num_devices: Optional[int] = None) -> int:
  """`num_devices`, or by default 1 in one process and every device of a
  multi-process job (each process must own part of the mesh)."""
  if num_devices:
    return int(num_devices)
  return len(jax.devices()) if jax.process_count() > 1 else 1


def mesh_axis(mesh: Mesh) -> str:
  """The name of a 1-D mesh's axis (raises for other meshes)."""
  if len(mesh.axis_names) != 1:
    raise ValueError(f'Data parallelism needs a 1-D mesh, got axes '
                     f'{mesh.axis_names}.')
  return mesh.axis_names[0]


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def stacked(mesh: Mesh) -> NamedSharding:
  """Sharding of per-device state stacked along a leading axis of size D."""
  return NamedSharding(mesh, P(mesh_axis(mesh)))


def local_shards(mesh: Mesh) -> list:
  """For each shard (mesh position), its slot among this process's shards,
  or -1 where another process owns the device."""
  me = jax.process_index()
  slots, n = [], 0
  for d in mesh.devices.flat:
    if d.process_index == me:
      slots.append(n)
      n += 1
    else:
      slots.append(-1)
  return slots


def local_copy(tree: Any) -> Any:
  """Replicated global arrays -> this process's copy on one local device.

  For host-side use of the agent state and metrics of a sharded run
  (evaluation with an unsharded evaluator, `np.asarray`, saving): in a
  multi-process job, replicated arrays are not fully addressable, and an
  unsharded program should not run over all the mesh's devices.
  """
  def one(x):
    if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
      if not x.sharding.is_fully_replicated:
        raise ValueError(f'local_copy needs replicated arrays, got sharding '
                         f'{x.sharding} of an array of shape {x.shape}.')
      return x.addressable_data(0)
    return x
  return jax.tree.map(one, tree)


def put_like(tree: Any, shapes: Any) -> Any:
  """Host arrays placed as `shapes` (from `jax.eval_shape` of a jitted
  program, e.g. the loop's `init`) lays them out; default placement where
  they carry no sharding. A restored sharded loop state placed this way does
  not make `run` compile a second program."""
  return jax.tree.map(
      lambda x, s: jax.device_put(x, getattr(s, 'sharding', None)), tree,
      shapes)


# -- environments --------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedEnv:
  """A batch of `num_envs` environments split into equal shards over a mesh.

  Attributes:
    spec: the environments' EnvSpec.
    num_envs: B, all shards together.
    mesh: the 1-D mesh; shard i lives on `mesh.devices[i]`.
    local: the env of one shard (B / D environments), used inside
      `jax.shard_map` over the mesh; on the native backend its physics
      dispatches to the calling device's own host simulations.
  """
  spec: Any
  num_envs: int
  mesh: Mesh
  local: Any

  @property
  def num_shards(self) -> int:
    return int(self.mesh.devices.size)


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedNativeEnv(ShardedEnv):
  """A `ShardedEnv` on the native backend, with host state access.

  `get_host_state` / `set_host_state` cover this process's shards
  ([local shards, B / D, S] float64); call them between jitted calls.
  """

  def get_host_state(self) -> np.ndarray:
    return self.local.physics.get_host_state()

  def set_host_state(self, rows: np.ndarray) -> None:
    self.local.physics.set_host_state(rows)


def _sharded(spec, num_envs: int, mesh: Mesh, local) -> ShardedEnv:
  host = callable(getattr(getattr(local, 'physics', None), 'get_host_state',
                          None))
  cls = ShardedNativeEnv if host else ShardedEnv
  return cls(spec=spec, num_envs=int(num_envs), mesh=mesh, local=local)


def _wrapped(env) -> bool:
  """Whether `env` is a wrapper dataclass (e.g. ActionRepeat) of `env.env`."""
  return dataclasses.is_dataclass(env) and 'env' in {
      f.name for f in dataclasses.fields(env)}


def _with_num_envs(env, num_envs: int):
  """`env` (through its wrappers) with its batch size set to `num_envs`."""
  if _wrapped(env):
    return dataclasses.replace(env, env=_with_num_envs(env.env, num_envs))
  return dataclasses.replace(env, num_envs=int(num_envs))


def _local_env(env, mesh: Mesh, nthread: Optional[int]):
  """The env of one shard of `env` (see `shard_env`)."""
  if _wrapped(env):  # Shard what it wraps, then wrap the shard the same way.
    return dataclasses.replace(env, env=_local_env(env.env, mesh, nthread))
  d = int(mesh.devices.size)
  if env.num_envs % d:
    raise ValueError(f'num_envs ({env.num_envs}) must be a multiple of the '
                     f'number of devices ({d}).')
  b = env.num_envs // d
  physics = getattr(env, 'physics', None)
  if callable(getattr(physics, 'shard', None)) and dataclasses.is_dataclass(env):
    # The backend splits its own simulations (`roxie.envs` physics: MJX
    # re-sizes its batch, native gives every local shard its own host batch).
    local = physics.shard(b, slots=local_shards(mesh), axis=mesh_axis(mesh),
                          nthread=nthread)
    return dataclasses.replace(env, num_envs=b, physics=local)
  if hasattr(env, 'shard'):
    return env.shard(d)
  if dataclasses.is_dataclass(env):  # A pure-JAX env of one's own.
    return dataclasses.replace(env, num_envs=b)
  raise TypeError(f'Cannot shard {type(env).__name__}: give it a '
                  '`shard(num_shards)` method returning the env of one shard.')


def shard_env(env, mesh: Mesh, *, nthread: Optional[int] = None) -> ShardedEnv:
  """Splits `env` (num_envs B) into one shard of B / D envs per mesh device.

  Args:
    env: a `roxie.envs.make` env (its physics splits itself: a
      `shard(num_envs, *, slots, axis, nthread)` method returning one
      shard's physics), or a pure-JAX env that is a dataclass with a
      `num_envs` field, or any env with a `shard(num_shards)` method
      returning the env of one shard.
    mesh: a 1-D mesh of D devices; B must be a multiple of D.
    nthread: simulation threads of this process for backends with host
      physics, split evenly between its shards (default: all cores).

  Returns:
    A `ShardedEnv`. On the native backend it has its own simulations, so the
    physics of `env` itself is not used (build `env` with few envs, or use
    `make_sharded_env`, to avoid allocating it twice).
  """
  if isinstance(env, ShardedEnv):
    return env
  mesh_axis(mesh)
  return _sharded(env.spec, env.num_envs, mesh, _local_env(env, mesh, nthread))


def make_sharded_env(task, *, mesh: Mesh, num_envs: int, backend: str = 'cpu',
                     nthread: Optional[int] = None, **options) -> ShardedEnv:
  """`roxie.envs.make` for a mesh: `num_envs` split evenly over its devices.

  Only the shards' own simulations are allocated (a one-env template is built
  to share the model and spec).
  """
  from roxie import envs  # pylint: disable=g-import-not-at-top
  d = int(mesh.devices.size)
  if num_envs % d:
    raise ValueError(f'num_envs ({num_envs}) must be a multiple of the '
                     f'number of devices ({d}).')
  template = envs.make(task, backend=backend, num_envs=1, **options)
  local = _local_env(_with_num_envs(template, num_envs), mesh, nthread)
  return _sharded(template.spec, num_envs, mesh, local)


# -- updates -------------------------------------------------------------------


def data_parallel_update(update, mesh: Optional[Mesh], data_spec=None):
  """`update(agent, data, key)` data-parallel over `mesh`, the recipe unchanged.

  `data` is laid out with its batch axis sharded over the mesh (`data_spec`, a
  PartitionSpec or a pytree prefix of them; default: the leading axis), the
  agent state replicated. XLA's SPMD partitioner then computes each device's
  part of the batch where it lies, and the recipe's reductions over the batch
  (its loss means, hence its gradients) become partial sums plus all-reduces:
  the result is the update of the whole global batch, replicated on every
  device. Call it inside `jax.jit`; without a mesh it is `update` itself.

  Args:
    update: a recipe's `update`.
    mesh: a 1-D mesh, or None.
    data_spec: how `data` is sharded.

  Returns:
    The constrained update function.
  """
  if mesh is None:
    return update
  axis = mesh_axis(mesh)
  data_spec = P(axis) if data_spec is None else data_spec
  rep = NamedSharding(mesh, P())
  to_named = lambda s: NamedSharding(mesh, s)
  data_sharding = jax.tree.map(to_named, data_spec,
                               is_leaf=lambda s: isinstance(s, P))

  def wrapped(agent, data, key):
    data = jax.lax.with_sharding_constraint(data, data_sharding)
    agent = jax.lax.with_sharding_constraint(agent, rep)
    agent, metrics = update(agent, data, key)
    return (jax.lax.with_sharding_constraint(agent, rep),
            jax.lax.with_sharding_constraint(metrics, rep))
  return wrapped
