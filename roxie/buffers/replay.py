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

Dict observations (pixels). With `obs_shapes`, observations are dicts (see
`roxie.types.EnvSpec.obs_shapes`) whose image entries (uint8 [H, W, C * S]:
'pixels', 'depth') stack S frames along channels, oldest first. Consecutive
stacks of one episode share S - 1 frames, so a row keeps only the newest
frame of each image entry (uint8 [H, W, C]), the vector entries whole, and a
uint8 counter of the steps since its episode began. `replay_sample` rebuilds
a stack from the rows before it in the same env: frame j back (j < S) comes
from row t - min(j, episode_step[t]), which repeats the episode's first frame
before its start, as environments fill the stack on reset. The side store
keeps the newest frame of a truncation's final stack; its older frames are
the newest S - 1 frames of the stack at the truncated row. Once the ring has
wrapped, its oldest S - 1 rows may have lost the rows they need, and are not
sampled. Per stored step this costs one frame per image entry plus the
vectors and 1 byte; flat observations keep the layout above unchanged.

Resizing. `replay_resize` converts a ring of dict observations to another
image resolution (a run's resolution schedule, see `roxie.run`): every
stored frame, and the side store's, is resized by `resize_images` (linear
interpolation, antialiased when shrinking, rounded and clipped back to
uint8), a bounded number of rows at a time; everything else (vectors,
actions, rewards, flags, episode counters, cursors) is kept, so sampling
rebuilds the same stacks, resized.

Every function here except `replay_resize` is pure and jit/scan friendly
with static shapes; `add` writes in place under
`jax.jit(..., donate_argnums=0)`.
"""

import dataclasses
import math
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import chex
import jax
import jax.numpy as jnp

import numpy as np

from roxie import types
from roxie.losses import multistep

Array = chex.Array
# The counter of steps since the episode start saturates here (uint8); only
# min(counter, S - 1) is ever used.
_MAX_EPISODE_STEP = 255


@dataclasses.dataclass(frozen=True)
class FrameStore:
  """Dict observations in the ring: image entries keep their newest frame.

  A pytree (`frame_stack` is static); it takes the place of the [R, B, O]
  observation array in `ReplayState.obs`.
  """
  # [R, B, H, W, C] newest frame of each image entry; [R, B, ...] the others.
  obs: Dict[str, Array]
  episode_step: Array  # [R, B] uint8 steps since the episode's first row.
  frame_stack: int = 1  # S, frames per stacked image entry (static).


jax.tree_util.register_dataclass(FrameStore, data_fields=['obs',
                                                          'episode_step'],
                                 meta_fields=['frame_stack'])


class ReplayState(NamedTuple):
  """The ring's arrays. R rows (time) by B envs; S side-store slots.

  With dict observations `obs` is a `FrameStore` and `final_obs` a dict of
  [S, B, ...] entries (the newest frame of image entries).
  """
  obs: Any  # [R, B, O] observation acted on at each row (or a FrameStore).
  action: Array  # [R, B, A] action taken there.
  reward: Array  # [R, B] float32 reward of that step.
  terminated: Array  # [R, B] bool: the step reached a terminal state.
  truncated: Array  # [R, B] bool: the step hit the time limit.
  final_obs: Any  # [S, B, O] true next observation of truncated rows.
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


def _is_image(shape: Sequence[int], dtype: Any) -> bool:
  # As roxie.networks.is_image (not imported: buffers do not need haiku).
  return len(tuple(shape)) == 3 and np.dtype(dtype) == np.uint8


def _frame_shape(key: str, shape: Tuple[int, ...], frame_stack: int):
  if shape[-1] % frame_stack:
    raise ValueError(
        f'Observation {key!r} of shape {shape} does not stack {frame_stack} '
        'frames along its last axis.')
  return shape[:-1] + (shape[-1] // frame_stack,)


def replay_init(*,
                capacity: int,
                num_envs: int,
                obs_size: int,
                action_size: int,
                episode_length: int,
                obs_dtype: jnp.dtype = jnp.float32,
                action_dtype: jnp.dtype = jnp.float32,
                obs_shapes: Optional[Sequence[Tuple[str, Tuple[int, ...],
                                                    str]]] = None,
                frame_stack: int = 1) -> ReplayState:
  """Allocates an empty replay ring.

  Args:
    capacity: transitions to hold, all envs together; the ring keeps
      R = capacity // num_envs rows.
    num_envs: B, the number of parallel environments that each `add` writes.
    obs_size: O (ignored with `obs_shapes`).
    action_size: A.
    episode_length: the time limit L. Truncations of one env must be at least
      L steps apart (true for a time limit, whatever the terminations); it
      sizes the side store.
    obs_dtype: storage dtype of flat observations.
    action_dtype: storage dtype of actions.
    obs_shapes: for dict observations, the env spec's ((key, per-env shape,
      dtype name), ...); image entries (uint8 [H, W, C * S]) store one frame
      per row (see the module docstring). None: flat [O] observations.
    frame_stack: S, the frames stacked in each image entry.

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
  if obs_shapes is None:
    obs = jnp.zeros((rows, num_envs, obs_size), obs_dtype)
    final_obs = jnp.zeros((num_slots, num_envs, obs_size), obs_dtype)
  else:
    if not 1 <= frame_stack <= _MAX_EPISODE_STEP:
      raise ValueError(f'frame_stack must be in 1..{_MAX_EPISODE_STEP}, got '
                       f'{frame_stack}.')
    entries, side = {}, {}
    for key, shape, dtype in obs_shapes:
      shape = tuple(int(d) for d in shape)
      if _is_image(shape, dtype):
        shape = _frame_shape(key, shape, frame_stack)
      entries[key] = jnp.zeros((rows, num_envs) + shape, dtype)
      side[key] = jnp.zeros((num_slots, num_envs) + shape, dtype)
    if not entries:
      raise ValueError('obs_shapes is empty.')
    obs = FrameStore(obs=entries,
                     episode_step=jnp.zeros((rows, num_envs), jnp.uint8),
                     frame_stack=int(frame_stack))
    final_obs = side
  return ReplayState(
      obs=obs,
      action=jnp.zeros((rows, num_envs, action_size), action_dtype),
      reward=jnp.zeros((rows, num_envs), jnp.float32),
      terminated=jnp.zeros((rows, num_envs), bool),
      truncated=jnp.zeros((rows, num_envs), bool),
      final_obs=final_obs,
      cursor=jnp.zeros((), jnp.int32),
      size=jnp.zeros((), jnp.int32),
      clock=jnp.zeros((), jnp.int32))


def _newest_frames(store: FrameStore, obs: Any, what: str) -> Dict[str, Array]:
  """A dict observation [B, ...] as a row stores it (images: newest frame)."""
  if not isinstance(obs, dict) and not hasattr(obs, 'keys'):
    raise ValueError(f'replay_add: this ring stores dict observations; {what} '
                     f'is a {type(obs).__name__}.')
  if set(obs.keys()) != set(store.obs):
    raise ValueError(f'replay_add: {what} has keys {sorted(obs.keys())}, the '
                     f'ring stores {sorted(store.obs)}.')
  out = {}
  for key, stored in store.obs.items():
    x = jnp.asarray(obs[key])
    per_row = stored.shape[1:]
    image = _is_image(stored.shape[2:], stored.dtype)
    frame = per_row[-1]
    expected = (per_row[:-1] + (frame * store.frame_stack,) if image
                else per_row)
    if x.shape != expected:
      raise ValueError(
          f'replay_add: {what}[{key!r}] has shape {x.shape}, expected '
          f'{expected}.')
    out[key] = x[..., -frame:] if image else x
  return out


def _write_side(side, slot, value, truncated):
  """Overwrites slot `slot` of side-store leaves, only where truncated."""
  def one(store, new):
    kept = jax.lax.dynamic_index_in_dim(store, slot, keepdims=False)
    mask = jnp.reshape(truncated, truncated.shape + (1,) * (kept.ndim - 1))
    merged = jnp.where(mask, new.astype(kept.dtype), kept)
    return jax.lax.dynamic_update_index_in_dim(store, merged, slot, axis=0)
  return jax.tree.map(one, side, value)


def replay_add(state: ReplayState, obs: Any, action: Array,
               timestep: types.TimeStep) -> ReplayState:
  """Writes one row: B envs' observations, actions and the step they led to.

  Args:
    state: the ring.
    obs: [B, O] the observations the actions were taken from (the previous
      `TimeStep.obs`, or the reset observations); a dict of [B, ...] entries
      for a ring of dict observations.
    action: [B, A] the actions taken.
    timestep: what the environment's `step` returned for these actions; its
      reward, flags and (where truncated) `final_obs` are stored.

  Returns:
    The updated ring; the oldest row is overwritten once it is full.
  """
  rows, num_envs, action_size = state.action.shape
  chex.assert_shape(action, (num_envs, action_size))
  chex.assert_shape([timestep.reward, timestep.terminated, timestep.truncated],
                    (num_envs,))

  def write(store, row, value):
    return jax.lax.dynamic_update_index_in_dim(
        store, value.astype(store.dtype), row, axis=0)

  row = state.cursor
  truncated = timestep.truncated.astype(bool)
  if isinstance(state.obs, FrameStore):
    store = state.obs
    new = _newest_frames(store, obs, 'obs')
    final = _newest_frames(store, timestep.final_obs, 'timestep.final_obs')
    for key, x in new.items():
      chex.assert_shape([x, final[key]], store.obs[key].shape[1:])
    # Steps since the episode began: 0 on the ring's first row and after a
    # row whose step ended the episode (the env reset inside `step`).
    prev = (row - 1) % rows
    prev_ended = state.terminated[prev] | state.truncated[prev]
    prev_step = store.episode_step[prev].astype(jnp.int32)
    episode_step = jnp.where(
        (state.size == 0) | prev_ended, 0,
        jnp.minimum(prev_step + 1, _MAX_EPISODE_STEP))
    new_obs = FrameStore(
        obs={k: write(store.obs[k], row, new[k]) for k in store.obs},
        episode_step=write(store.episode_step, row, episode_step),
        frame_stack=store.frame_stack)
  else:
    obs_size = state.obs.shape[-1]
    chex.assert_shape(obs, (num_envs, obs_size))
    chex.assert_shape(timestep.final_obs, (num_envs, obs_size))
    new_obs = write(state.obs, row, obs)
    final = timestep.final_obs

  num_slots = jax.tree.leaves(state.final_obs)[0].shape[0]
  block, period = _side_store_geometry(rows, num_slots)
  slot = state.clock // block
  # Only truncated envs overwrite their slot; the others keep what is there,
  # which a live truncated row of theirs may still need.
  return ReplayState(
      obs=new_obs,
      action=write(state.action, row, action),
      reward=write(state.reward, row, timestep.reward),
      terminated=write(state.terminated, row, timestep.terminated),
      truncated=write(state.truncated, row, truncated),
      final_obs=_write_side(state.final_obs, slot, final, truncated),
      cursor=(row + 1) % rows,
      size=jnp.minimum(state.size + 1, rows),
      clock=(state.clock + 1) % period)


def replay_size(state: ReplayState) -> Array:
  """[] int32 transitions stored, all envs together (at most R * B).

  Sampling needs more than the newest n rows of every env: test with
  `replay_can_sample`, not with this count.
  """
  return state.size * state.action.shape[1]


def _history(state: ReplayState) -> Array:
  """[] int32 oldest rows that cannot be sampled: their stacks' rows are gone."""
  if not isinstance(state.obs, FrameStore):
    return jnp.zeros((), jnp.int32)
  rows = state.action.shape[0]
  # Before the ring wraps, its oldest row is the stream's first (a reset).
  return jnp.where(state.size >= rows, state.obs.frame_stack - 1,
                   0).astype(jnp.int32)


def replay_num_sampleable(state: ReplayState, *, n_step: int) -> Array:
  """[] int32 rows per env that start a complete n-step window.

  The newest n rows are excluded: the observation n rows after them is not in
  the ring yet. With dict observations, so are the oldest S - 1 rows once the
  ring has wrapped (their frame stacks reach into overwritten rows).
  `replay_sample` needs this to be at least 1.
  """
  return jnp.maximum(state.size - n_step - _history(state), 0)


def replay_can_sample(state: ReplayState, *, n_step: int) -> Array:
  """[] bool: whether `replay_sample` with this n_step returns real data."""
  return replay_num_sampleable(state, n_step=n_step) > 0


def _stack_frames(frames: Array, rows: Array, env: Array, back: Array):
  """Gathers [N, S] frames (rows - back) and stacks them along channels.

  Args:
    frames: [R, B, H, W, C] stored frames.
    rows: [N] the row of the newest frame.
    env: [N] envs.
    back: [N, S] steps back of each frame, oldest first.

  Returns:
    [N, H, W, S * C], frame j's channels at j * C .. (j + 1) * C - 1.
  """
  num_rows = frames.shape[0]
  src = (rows[:, None] - back) % num_rows
  picked = frames[src, env[:, None]]  # [N, S, H, W, C]
  n, s = picked.shape[:2]
  picked = jnp.moveaxis(picked, 1, -2)  # [N, H, W, S, C]
  return jnp.reshape(picked, (n,) + picked.shape[1:-2] + (s * picked.shape[-1],))


def _stacked_obs(store: FrameStore, row: Array, env: Array) -> Dict[str, Array]:
  """The dict observation of rows [N] of envs [N], image stacks rebuilt."""
  s = store.frame_stack
  steps = store.episode_step[row, env].astype(jnp.int32)
  back = jnp.minimum(jnp.arange(s - 1, -1, -1)[None, :], steps[:, None])
  out = {}
  for key, stored in store.obs.items():
    if _is_image(stored.shape[2:], stored.dtype) and s > 1:
      out[key] = _stack_frames(stored, row, env, back)
    else:
      out[key] = stored[row, env]
  return out


def _next_stacked_obs(store: FrameStore, side: Dict[str, Array], row: Array,
                      env: Array, slot: Array,
                      truncated: Array) -> Dict[str, Array]:
  """The observation after rows [N]: the next row's, or the truncation's.

  Both stacks' older S - 1 frames are the newest S - 1 frames of the stack at
  `row` (the next row continues its episode); only the newest frame differs:
  the next row's, or the side store's where the step truncated. (After a
  termination this gives a finite stack that is never bootstrapped from.)
  """
  s = store.frame_stack
  rows = store.episode_step.shape[0]
  next_row = (row + 1) % rows
  steps = store.episode_step[row, env].astype(jnp.int32)
  # Frames 1..S-1 back from the next step: 0..S-2 back from `row`.
  back = jnp.minimum(jnp.arange(s - 2, -1, -1)[None, :], steps[:, None])
  out = {}
  for key, stored in store.obs.items():
    mask = jnp.reshape(truncated, truncated.shape + (1,) *
                       (stored.ndim - 2))
    newest = jnp.where(mask, side[key][slot, env], stored[next_row, env])
    if _is_image(stored.shape[2:], stored.dtype) and s > 1:
      older = _stack_frames(stored, row, env, back)
      out[key] = jnp.concatenate([older, newest], axis=-1)
    else:
      out[key] = newest
  return out


def replay_sample(state: ReplayState, key: chex.PRNGKey, *, batch_size: int,
                  n_step: int, discount: float) -> types.Transition:
  """Samples n-step transitions uniformly over (row, env) pairs.

  Each sample starts at a row with a complete window of n steps after it and
  folds the window with `roxie.losses.multistep.n_step_transition`: the window
  stops at the first episode end, the reward is the discounted sum up to
  there, and the bootstrap discount is gamma^k (0 after a termination). The
  bootstrap observation is the next row's observation, the stored final
  observation when the window ended on a truncation, and the (finite, unused)
  reset observation when it ended on a termination. Dict observations come
  back as dicts of [N, ...] entries with their frame stacks rebuilt.

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
  rows, num_envs, _ = state.action.shape
  num_slots = jax.tree.leaves(state.final_obs)[0].shape[0]
  block, period = _side_store_geometry(rows, num_slots)

  row_key, env_key = jax.random.split(key)
  num_valid = replay_num_sampleable(state, n_step=n_step)
  # Age 0 is the oldest stored row; ages [history, history + num_valid)
  # start whole windows.
  age = _history(state) + jax.random.randint(row_key, (batch_size,), 0,
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
  first_row = (oldest + age) % rows
  if isinstance(state.obs, FrameStore):
    obs = _stacked_obs(state.obs, first_row, env)
    next_obs = _next_stacked_obs(state.obs, state.final_obs, last_row, env,
                                 slot, truncated_last)
  else:
    obs = state.obs[first_row, env]
    next_obs = jnp.where(truncated_last[:, None], state.final_obs[slot, env],
                         state.obs[(last_row + 1) % rows, env])
  return types.Transition(
      obs=obs,
      action=state.action[first_row, env],
      reward=folded.reward,
      discount=folded.discount,
      next_obs=next_obs)


# --- resizing (resolution schedules) -----------------------------------------


def resize_images(images: Array, height: int, width: int) -> Array:
  """uint8 images [..., H, W, C] -> uint8 [..., height, width, C].

  Linear interpolation (`jax.image.resize`, antialiased when shrinking, so
  it averages like an area filter), rounded and clipped back to 0..255.
  Channels are resized independently, so a frame stack [..., H, W, C * S]
  is resized frame by frame. A constant image stays the same constant.
  """
  images = jnp.asarray(images)
  if images.ndim < 3:
    raise ValueError(f'resize_images: images must be [..., H, W, C], got '
                     f'shape {images.shape}.')
  shape = images.shape[:-3] + (int(height), int(width), images.shape[-1])
  if shape == images.shape:
    return images
  out = jax.image.resize(images.astype(jnp.float32), shape, method='linear',
                         antialias=True)
  return jnp.round(jnp.clip(out, 0., 255.)).astype(jnp.uint8)


def resize_observation(obs: Any, height: int, width: int) -> Any:
  """A dict observation with its image entries (uint8, [..., H, W, C]) resized.

  Other entries, and flat (non-dict) observations, are returned as they are.
  """
  if not hasattr(obs, 'keys'):
    return obs
  out = {}
  for key in obs.keys():
    x = obs[key]
    if np.dtype(x.dtype) == np.uint8 and jnp.ndim(x) >= 3:
      out[key] = resize_images(x, height, width)
    else:
      out[key] = x
  return type(obs)(out) if isinstance(obs, dict) else out


_resize_jit = jax.jit(resize_images, static_argnums=(1, 2))


def _resize_rows(stored: Array, height: int, width: int,
                 max_bytes: int) -> Array:
  """Resizes [N, ...images] along its first axis in chunks of <= max_bytes."""
  n = stored.shape[0]
  per_row = 4 * max(int(np.prod(stored.shape[1:])), int(np.prod(
      stored.shape[1:-3] + (height, width, stored.shape[-1]))))
  chunk = int(max(1, min(n, max_bytes // max(per_row, 1))))
  host = np.asarray(jax.device_get(stored))
  out = np.empty((n,) + stored.shape[1:-3] + (height, width, stored.shape[-1]),
                 np.uint8)
  for start in range(0, n, chunk):
    # Every chunk has the same shape (the last one overlaps the one before),
    # so the resize compiles once.
    lo = min(start, n - chunk)
    out[lo:lo + chunk] = np.asarray(_resize_jit(host[lo:lo + chunk], height,
                                                width))
  return jnp.asarray(out)


def replay_resize(state: ReplayState, height: int, width: int, *,
                  max_chunk_bytes: int = 64 << 20) -> ReplayState:
  """The ring with its stored frames resized to height x width.

  For a ring of dict observations (a `FrameStore`): every image entry's
  frames [R, B, H, W, C] and the side store's [S, B, H, W, C] are resized
  with `resize_images`, at most `max_chunk_bytes` of float32 work at a time
  (on the host between chunks, so the extra memory is the new ring plus one
  chunk). Vector entries, actions, rewards, flags, episode counters and the
  cursors are kept, so `replay_sample` rebuilds the same frame stacks,
  resized. Not traced: call it between compiled calls.

  Args:
    state: the ring.
    height: the new image height.
    width: the new image width.
    max_chunk_bytes: bound of the float32 intermediates of one chunk.

  Returns:
    The converted ring (the input is not modified).

  Raises:
    ValueError: a ring of flat observations (nothing to resize) or a bad
      size.
  """
  if not isinstance(state.obs, FrameStore):
    raise ValueError('replay_resize: this ring stores flat observations; '
                     'only dict observations have images to resize.')
  if int(height) < 1 or int(width) < 1:
    raise ValueError(f'replay_resize: bad size {height}x{width}.')
  store = state.obs
  height, width = int(height), int(width)

  def convert(entries, lead):
    out = {}
    for key, stored in entries.items():
      if _is_image(stored.shape[lead:], stored.dtype):
        out[key] = _resize_rows(stored, height, width, max_chunk_bytes)
      else:
        out[key] = stored
    return out

  return state._replace(
      obs=FrameStore(obs=convert(store.obs, 2),
                     episode_step=store.episode_step,
                     frame_stack=store.frame_stack),
      final_obs=convert(state.final_obs, 2))
