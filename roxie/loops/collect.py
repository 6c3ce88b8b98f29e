"""Scanned collectors: act, step the environment, keep episode statistics.

A collector is a pure function `(carry, key) -> (carry, outputs)` run under
`lax.scan`; it works with any backend behind the `roxie.types.Env` protocol.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from roxie.types import Array, EnvState, PRNGKey, TimeStep


class EpisodeStats(NamedTuple):
  """Running episode statistics for a batch of environments."""
  episode_return: Array  # [B] return of the episode in progress.
  episode_length: Array  # [B] int32 steps of the episode in progress.
  completed: Array  # [] int32 episodes finished since the last reset of stats.
  completed_return: Array  # [] float32 sum of their returns.
  completed_length: Array  # [] float32 sum of their lengths.
  clipped: Array  # [] int32 action dims clipped by the environment.
  diverged: Array  # [] int32 environments reset after diverging physics.


def init_stats(num_envs: int) -> EpisodeStats:
  zi, zf = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)
  return EpisodeStats(
      episode_return=jnp.zeros((num_envs,), jnp.float32),
      episode_length=jnp.zeros((num_envs,), jnp.int32),
      completed=zi, completed_return=zf, completed_length=zf,
      clipped=zi, diverged=zi)


def clear_completed(stats: EpisodeStats) -> EpisodeStats:
  """Zeroes the per-call counters, keeping the episodes in progress.

  Counters keep their shape (per-device counters of a sharded loop are [D]).
  """
  z = jnp.zeros_like
  return stats._replace(completed=z(stats.completed),
                        completed_return=z(stats.completed_return),
                        completed_length=z(stats.completed_length),
                        clipped=z(stats.clipped), diverged=z(stats.diverged))


def update_stats(stats: EpisodeStats, ts: TimeStep) -> EpisodeStats:
  """Adds one step's rewards and closes the episodes that ended on it."""
  ret = stats.episode_return + ts.reward
  length = stats.episode_length + 1
  done = jnp.logical_or(ts.terminated, ts.truncated)
  donef = done.astype(jnp.float32)
  info = ts.info
  clipped = jnp.sum(info['clipped']).astype(jnp.int32) if 'clipped' in info else 0
  diverged = (jnp.sum(info['diverged']).astype(jnp.int32)
              if 'diverged' in info else 0)
  return EpisodeStats(
      episode_return=jnp.where(done, 0.0, ret),
      episode_length=jnp.where(done, 0, length),
      completed=stats.completed + jnp.sum(done).astype(jnp.int32),
      completed_return=stats.completed_return + jnp.sum(ret * donef),
      completed_length=stats.completed_length + jnp.sum(
          length.astype(jnp.float32) * donef),
      clipped=stats.clipped + clipped,
      diverged=stats.diverged + diverged)


def uniform_actions(key: PRNGKey, num_envs: int, action_size: int) -> Array:
  """Uniform random actions in [-1, 1], for warm-up."""
  return jax.random.uniform(key, (num_envs, action_size), jnp.float32,
                            -1.0, 1.0)


class Step(NamedTuple):
  """What one collector step saw and did, for storage."""
  obs: Array  # [B, O] the observation acted on.
  action: Array  # [B, A]
  timestep: TimeStep  # the environment's answer.
  extras: Mapping[str, Array]  # what the policy returned besides the action.


def make_env_step(env, policy: Callable[[Array, PRNGKey], Tuple[Array, Any]]):
  """One scanned step: `((env_state, stats), key) -> ((...), Step)`.

  Args:
    env: a `roxie.types.Env`.
    policy: `policy(obs [B, O], key) -> (action [B, A], extras)`.

  Returns:
    A function to use as the body of `lax.scan`.
  """
  def step(carry: Tuple[EnvState, EpisodeStats], key: PRNGKey):
    env_state, stats = carry
    action, extras = policy(env_state.obs, key)
    new_env_state, ts = env.step(env_state, action)
    stats = update_stats(stats, ts)
    return (new_env_state, stats), Step(env_state.obs, action, ts, extras)
  return step
