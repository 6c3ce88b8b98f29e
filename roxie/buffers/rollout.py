"""On-policy rollout storage: [T, B] chunks as `roxie.types.Rollout`.

Two ways to build a rollout, for two ways of collecting one:

* `rollout_from_steps` assembles a `Rollout` from what a `lax.scan` over T
  environment steps returns stacked: this is the usual path, where one
  compiled program collects the whole chunk (as in purejaxrl's PPO).
* `rollout_init` / `rollout_add` / `rollout_get` fill fixed [T, B] storage one
  step per call, for when a chunk is collected across several calls (for
  example a host loop, or fewer steps per compiled call than T).

Both keep the true next observation of every step (`final_obs`), which
differs from `obs[t + 1]` exactly where an episode ended, so a truncated step
bootstraps from the state it reached rather than the reset state.
"""

from typing import Any, Mapping, NamedTuple

import chex
import jax
import jax.numpy as jnp

from roxie import types

Array = chex.Array


def rollout_from_steps(obs: Array, action: Array, timestep: types.TimeStep,
                       extras: Mapping[str, Array]) -> types.Rollout:
  """Assembles a rollout from T stacked steps.

  Args:
    obs: [T, B, O] observations acted on.
    action: [T, B, A] actions taken.
    timestep: a `TimeStep` of [T, B, ...] arrays, what each step returned.
      `timestep.obs[t]` is `obs[t + 1]`, and `timestep.obs[T - 1]` is the
      observation after the chunk.
    extras: [T, B, ...] arrays that `act` returned (e.g. log_prob, value).

  Returns:
    The `Rollout`, with `last_obs = timestep.obs[-1]`.
  """
  chex.assert_rank([obs, action], 3)
  chex.assert_equal_shape_prefix([obs, action, timestep.reward,
                                  timestep.terminated, timestep.truncated,
                                  timestep.final_obs], 2)
  chex.assert_equal_shape([obs, timestep.final_obs, timestep.obs])
  for value in extras.values():
    chex.assert_equal_shape_prefix([obs, value], 2)
  return types.Rollout(
      obs=obs,
      action=action,
      reward=timestep.reward,
      terminated=timestep.terminated.astype(bool),
      truncated=timestep.truncated.astype(bool),
      final_obs=timestep.final_obs,
      extras=dict(extras),
      last_obs=timestep.obs[-1])


class RolloutState(NamedTuple):
  """Fixed [T, B] storage that `rollout_add` fills one step at a time."""
  obs: Array  # [T, B, O]
  action: Array  # [T, B, A]
  reward: Array  # [T, B] float32
  terminated: Array  # [T, B] bool
  truncated: Array  # [T, B] bool
  final_obs: Array  # [T, B, O]
  extras: Mapping[str, Array]  # [T, B, ...]
  last_obs: Array  # [B, O] the observation after the newest stored step.
  step: Array  # [] int32 rows of the current chunk written, in [0, T].


def rollout_init(*, length: int, num_envs: int, obs_size: int,
                 action_size: int,
                 extras: Mapping[str, Any]) -> RolloutState:
  """Allocates empty storage for a [T, B] rollout.

  Args:
    length: T, steps per env in one rollout.
    num_envs: B.
    obs_size: O.
    action_size: A.
    extras: an example of one step's extras ([B, ...] arrays or
      `jax.ShapeDtypeStruct`s): their shapes and dtypes size the storage.

  Returns:
    A `RolloutState` of zeros.
  """
  if length < 1:
    raise ValueError(f'length must be positive, got {length}.')
  for name, value in extras.items():
    if tuple(value.shape[:1]) != (num_envs,):
      raise ValueError(f'extras[{name!r}] must have leading axis {num_envs}, '
                       f'got shape {tuple(value.shape)}.')
  rows = lambda *shape, dtype=jnp.float32: jnp.zeros((length,) + shape, dtype)
  return RolloutState(
      obs=rows(num_envs, obs_size),
      action=rows(num_envs, action_size),
      reward=rows(num_envs),
      terminated=rows(num_envs, dtype=bool),
      truncated=rows(num_envs, dtype=bool),
      final_obs=rows(num_envs, obs_size),
      extras={k: rows(*v.shape, dtype=v.dtype) for k, v in extras.items()},
      last_obs=jnp.zeros((num_envs, obs_size), jnp.float32),
      step=jnp.zeros((), jnp.int32))


def rollout_add(state: RolloutState, obs: Array, action: Array,
                timestep: types.TimeStep,
                extras: Mapping[str, Array]) -> RolloutState:
  """Stores one step of B envs in row `step mod T`.

  Args:
    state: the storage.
    obs: [B, O] observations acted on.
    action: [B, A] actions taken.
    timestep: the `TimeStep` the environment returned for them.
    extras: [B, ...] arrays that `act` returned, with the keys given to
      `rollout_init`.

  Returns:
    The storage with the step written. After T adds it is full
    (`rollout_is_full`); the next add starts a new chunk at row 0.
  """
  chex.assert_equal_shape([obs, state.obs[0]])
  chex.assert_equal_shape([action, state.action[0]])
  if set(extras) != set(state.extras):
    raise ValueError(f'extras keys {sorted(extras)} differ from the stored '
                     f'{sorted(state.extras)}.')
  row = state.step % state.obs.shape[0]  # T wraps to 0: a new chunk.

  def write(store, value):
    chex.assert_equal_shape([value, store[0]])
    return jax.lax.dynamic_update_index_in_dim(
        store, jnp.asarray(value).astype(store.dtype), row, axis=0)

  return RolloutState(
      obs=write(state.obs, obs),
      action=write(state.action, action),
      reward=write(state.reward, timestep.reward),
      terminated=write(state.terminated, timestep.terminated),
      truncated=write(state.truncated, timestep.truncated),
      final_obs=write(state.final_obs, timestep.final_obs),
      extras={k: write(v, extras[k]) for k, v in state.extras.items()},
      last_obs=timestep.obs.astype(state.last_obs.dtype),
      step=row + 1)


def rollout_is_full(state: RolloutState) -> Array:
  """[] bool: whether all T rows of the current chunk are written."""
  return state.step == state.obs.shape[0]


def rollout_get(state: RolloutState) -> types.Rollout:
  """Returns the stored chunk as a `Rollout` (meaningful once full).

  Read it between the T-th add and the next, which starts a new chunk over
  the old rows.
  """
  return types.Rollout(
      obs=state.obs, action=state.action, reward=state.reward,
      terminated=state.terminated, truncated=state.truncated,
      final_obs=state.final_obs, extras=dict(state.extras),
      last_obs=state.last_obs)

