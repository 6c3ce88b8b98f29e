"""A uniform replay ring that stores each observation once, with n-step windows.

Layout. The ring holds R rows of B parallel environments: row t holds, for
every env, the observation o_t the agent acted on, the action a_t, and the
reward r_t and the terminated/truncated flags of the step that action led to.
The next observation of a step is the observation of the following row, so
no observation is stored twice. The one exception is an episode end:
environments reset inside `step`, so row t + 1 then holds the first
observation of the next episode.
After a termination that does not matter (the bootstrap weight is 0). After
a truncation (time limit) the target must bootstrap from the observation the
step really reached, `TimeStep.final_obs`, so `replay_add` copies it into a
small side store.

Side store. A time limit of L steps truncates one env at most once every L
rows, so at most ceil(R / L) truncated rows of one env are live in the ring
at once. If R <= L that is one, and the side store is a single [B, O] slot
that each env overwrites at its next truncation. Otherwise it has
S = ceil(R / L) + 1 slots of [B, O]; the final observation of a truncated row
with absolute index t goes to slot (t // D) mod S with D = ceil(R / (S - 1))
<= L: two live truncations of one env are between L and R - 1 rows apart, so
their blocks t // D differ by 1 to S - 1 and never share a slot. For 1000-step
episodes and R = 10^5 rows that is 101 slots, about 0.1% of the ring. All
envs write the same slot on a given row, each only where it truncated, so no
per-row index is stored, and the slot of a row follows from its position.

Every function here is pure and jit/scan friendly with static shapes; `add`
writes in place under `jax.jit(..., donate_argnums=0)`.
"""

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from roxie import types
from roxie.losses import multistep

Array = chex.Array


class ReplayState(NamedTuple):
  """The ring's arrays. R rows (time) by B envs; S side-store slots."""
  obs: Array  # [R, B, O] observation acted on at each row.
  action: Array  # [R, B, A] action taken there.
  reward: Array  # [R, B] float32 reward of that step.
  terminated: Array  # [R, B] bool: the step reached a terminal state.
  truncated: Array  # [R, B] bool: the step hit the time limit.
  final_obs: Array  # [S, B, O] true next observation of truncated rows.
  cursor: Array  # [] int32 row the next `add` writes (rows written mod R).
  size: Array  # [] int32 rows holding data, at most R.
  clock: Array  # [] int32 rows written mod (D * S): picks side-store slots.


def _num_slots(rows: int, episode_length: int) -> int:
  # See the module docstring for why these suffice.
  if rows <= episode_length:
    return 1
  return math.ceil(rows / episode_length) + 1


def _side_store_geometry(rows: int, num_slots: int):
  """(D, D * S): rows sharing one slot, and the period of the slot pattern."""
  if num_slots == 1:
    return rows, rows
  block = -(-rows // (num_slots - 1))
  return block, block * num_slots


def replay_init(*,
                capacity: int,
                num_envs: int,
                obs_size: int,
                action_size: int,
                episode_length: int,
                obs_dtype: jnp.dtype = jnp.float32,
                action_dtype: jnp.dtype = jnp.float32) -> ReplayState:
  """Allocates an empty replay ring.

  Args:
    capacity: transitions to hold, all envs together; the ring keeps
      R = capacity // num_envs rows.
    num_envs: B, the number of parallel environments that each `add` writes.
    obs_size: O.
    action_size: A.
    episode_length: the time limit L. Truncations of one env must be at least
      L steps apart (true for a time limit, whatever the terminations); it
      sizes the side store.
    obs_dtype: storage dtype of observations.
    action_dtype: storage dtype of actions.

  Returns:
    A `ReplayState` of zeros.
  """
  rows = capacity // num_envs
  if rows < 2:
    raise ValueError(
        f'capacity {capacity} gives {rows} rows for {num_envs} envs; need at '
        'least 2.')
  if episode_length < 1:
    raise ValueError(f'episode_length must be positive, got {episode_length}.')
  num_slots = _num_slots(rows, episode_length)
  return ReplayState(
      obs=jnp.zeros((rows, num_envs, obs_size), obs_dtype),
      action=jnp.zeros((rows, num_envs, action_size), action_dtype),
      reward=jnp.zeros((rows, num_envs), jnp.float32),
      terminated=jnp.zeros((rows, num_envs), bool),
      truncated=jnp.zeros((rows, num_envs), bool),
      final_obs=jnp.zeros((num_slots, num_envs, obs_size), obs_dtype),
      cursor=jnp.zeros((), jnp.int32),
      size=jnp.zeros((), jnp.int32),
      clock=jnp.zeros((), jnp.int32))


def replay_add(state: ReplayState, obs: Array, action: Array,
               timestep: types.TimeStep) -> ReplayState:
  """Writes one row: B envs' observations, actions and the step they led to.

  Args:
    state: the ring.
    obs: [B, O] the observations the actions were taken from (the previous
      `TimeStep.obs`, or the reset observations).
    action: [B, A] the actions taken.
    timestep: what the environment's `step` returned for these actions; its
      reward, flags and (where truncated) `final_obs` are stored.

  Returns:
    The updated ring; the oldest row is overwritten once it is full.
  """
  rows, num_envs, obs_size = state.obs.shape
  action_size = state.action.shape[-1]
  chex.assert_shape(obs, (num_envs, obs_size))
  chex.assert_shape(action, (num_envs, action_size))
  chex.assert_shape([timestep.reward, timestep.terminated, timestep.truncated],
                    (num_envs,))
  chex.assert_shape(timestep.final_obs, (num_envs, obs_size))

  def write(store, row, value):
    return jax.lax.dynamic_update_index_in_dim(
        store, value.astype(store.dtype), row, axis=0)

  num_slots = state.final_obs.shape[0]
  block, period = _side_store_geometry(rows, num_slots)
  slot = state.clock // block
  truncated = timestep.truncated.astype(bool)
  # Only truncated envs overwrite their slot; the others keep what is there,
  # which a live truncated row of theirs may still need.
  kept = jax.lax.dynamic_index_in_dim(state.final_obs, slot, keepdims=False)
  side = jnp.where(truncated[:, None], timestep.final_obs.astype(kept.dtype),
                   kept)
  row = state.cursor
  return ReplayState(
      obs=write(state.obs, row, obs),
      action=write(state.action, row, action),
      reward=write(state.reward, row, timestep.reward),
      terminated=write(state.terminated, row, timestep.terminated),
      truncated=write(state.truncated, row, truncated),
      final_obs=write(state.final_obs, slot, side),
      cursor=(row + 1) % rows,
      size=jnp.minimum(state.size + 1, rows),
      clock=(state.clock + 1) % period)


def replay_size(state: ReplayState) -> Array:
  """[] int32 transitions stored, all envs together (at most R * B).

  Sampling needs more than the newest n rows of every env: test with
  `replay_can_sample`, not with this count.
  """
  return state.size * state.obs.shape[1]


def replay_num_sampleable(state: ReplayState, *, n_step: int) -> Array:
  """[] int32 rows per env that start a complete n-step window.

  The newest n rows are excluded: the observation n rows after them is not in
  the ring yet. `replay_sample` needs this to be at least 1.
  """
  return jnp.maximum(state.size - n_step, 0)


def replay_can_sample(state: ReplayState, *, n_step: int) -> Array:
  """[] bool: whether `replay_sample` with this n_step returns real data."""
  return replay_num_sampleable(state, n_step=n_step) > 0


def replay_sample(state: ReplayState, key: chex.PRNGKey, *, batch_size: int,
                  n_step: int, discount: float) -> types.Transition:
  """Samples n-step transitions uniformly over (row, env) pairs.

  Each sample starts at a row with a complete window of n steps after it and
  folds the window with `roxie.losses.multistep.n_step_transition`: the window
  stops at the first episode end, the reward is the discounted sum up to
  there, and the bootstrap discount is gamma^k (0 after a termination). The
  bootstrap observation is the next row's observation, the stored final
  observation when the window ended on a truncation, and the (finite, unused)
  reset observation when it ended on a termination.

  Requires `replay_can_sample(state, n_step=n_step)`; before that, rows of
  zeros come back.

  Args:
    state: the ring.
    key: PRNG key.
    batch_size: N, the number of transitions.
    n_step: window length n >= 1 (static).
    discount: per-step gamma.

  Returns:
    A `Transition` with [N, ...] fields.
  """
  if n_step < 1:
    raise ValueError(f'n_step must be at least 1, got {n_step}.')
  rows, num_envs, _ = state.obs.shape
  num_slots = state.final_obs.shape[0]
  block, period = _side_store_geometry(rows, num_slots)

  row_key, env_key = jax.random.split(key)
  num_valid = replay_num_sampleable(state, n_step=n_step)
  # Age 0 is the oldest stored row; ages [0, num_valid) start whole windows.
  age = jax.random.randint(row_key, (batch_size,), 0,
                           jnp.maximum(num_valid, 1))
  env = jax.random.randint(env_key, (batch_size,), 0, num_envs)
  oldest = state.cursor - state.size  # Row of age 0 (mod R).
  window = age[:, None] + jnp.arange(n_step)[None, :]  # [N, n] ages.
  window_rows = (oldest + window) % rows
  env_n = jnp.broadcast_to(env[:, None], window_rows.shape)

  reward = state.reward[window_rows, env_n]
  terminated = state.terminated[window_rows, env_n]
  truncated = state.truncated[window_rows, env_n]
  discount_t = jnp.asarray(discount, jnp.float32) * (1. - terminated.astype(
      jnp.float32))
  folded = jax.vmap(multistep.n_step_transition)(reward, discount_t,
                                                 terminated | truncated)

  last_age = age + folded.last
  last_row = (oldest + last_age) % rows
  truncated_last = state.truncated[last_row, env]
  # Absolute row index mod (D * S) of the last step gives its side slot.
  slot = ((state.clock - state.size + last_age) % period) // block
  next_obs = jnp.where(truncated_last[:, None], state.final_obs[slot, env],
                       state.obs[(last_row + 1) % rows, env])
  first_row = (oldest + age) % rows
  return types.Transition(
      obs=state.obs[first_row, env],
      action=state.action[first_row, env],
      reward=folded.reward,
      discount=folded.discount,
      next_obs=next_obs)
