"""Resizing a replay of frames (a run's resolution schedule).

`replay_resize` must keep what the ring holds: resized frames, and the same
frame stacks rebuilt from them. The stream is test_replay_pixels's (random
frames, terminations and truncations, a wrapped ring).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import buffers

from test_replay_pixels import _fill, _stream  # pylint: disable=g-bad-import-order

NEW_H, NEW_W = 5, 4  # From test_replay_pixels's 3 x 2 frames.


def test_resize_images_keeps_constants_and_shapes():
  for value in (0, 1, 128, 255):
    x = jnp.full((2, 3, 8, 6, 9), value, jnp.uint8)
    for h, w in ((12, 9), (4, 3), (8, 6)):
      y = buffers.resize_images(x, h, w)
      assert y.shape == (2, 3, h, w, 9) and y.dtype == jnp.uint8
      assert np.all(np.asarray(y) == value)
  # Shrinking by 2 averages (antialiased linear ~ area): a 2x2 checkerboard
  # of 0 and 200 becomes about its mean everywhere (the borders, where the
  # kernel is cut, within 2).
  board = np.indices((8, 8)).sum(0) % 2 * 200
  y = buffers.resize_images(jnp.asarray(board[..., None], jnp.uint8), 4, 4)
  assert np.all(np.abs(np.asarray(y, int) - 100) <= 2)
  with pytest.raises(ValueError, match=r'\[\.\.\., H, W, C\]'):
    buffers.resize_images(jnp.zeros((4, 4), jnp.uint8), 2, 2)


def test_resize_observation_only_touches_images():
  obs = {'pixels': jnp.full((2, 4, 4, 6), 7, jnp.uint8),
         'state': jnp.ones((2, 3), jnp.float32)}
  out = buffers.resize_observation(obs, 6, 8)
  assert out['pixels'].shape == (2, 6, 8, 6) and np.all(out['pixels'] == 7)
  assert out['state'] is obs['state']
  flat = jnp.ones((2, 3))
  assert buffers.resize_observation(flat, 6, 8) is flat


def _data_and_ring(constant):
  data = _stream(3, num_envs=4, num_steps=120, episode_length=9,
                 p_terminate=0.08)
  if constant:
    for part in ('obs', 'final_obs', 'next_obs'):
      for key in ('pixels', 'depth'):
        data[part][key][...] = 77
  return data, _fill(data, capacity=4 * 37, episode_length=9)


def test_constant_frames_stay_constant_and_the_rest_is_kept():
  _, state = _data_and_ring(constant=True)
  resized = buffers.replay_resize(state, NEW_H, NEW_W)
  store = resized.obs
  assert store.obs['pixels'].shape == (37, 4, NEW_H, NEW_W, 3)
  assert store.obs['depth'].shape == (37, 4, NEW_H, NEW_W, 1)
  assert resized.final_obs['pixels'].shape[2:] == (NEW_H, NEW_W, 3)
  for x in (store.obs['pixels'], store.obs['depth']):
    assert x.dtype == jnp.uint8 and np.all(np.asarray(x) == 77)
  # Side-store slots never written hold zeros; each slot stays constant.
  for key in ('pixels', 'depth'):
    x, was = resized.final_obs[key], np.asarray(state.final_obs[key])
    assert x.dtype == jnp.uint8
    np.testing.assert_array_equal(
        x, np.broadcast_to(was[:, :, :1, :1], x.shape))
    assert (was == 77).any()
  # Everything but the frames is the same.
  for a, b in ((state.obs.obs['state'], store.obs['state']),
               (state.obs.episode_step, store.episode_step),
               (state.action, resized.action), (state.reward, resized.reward),
               (state.terminated, resized.terminated),
               (state.truncated, resized.truncated),
               (state.final_obs['state'], resized.final_obs['state']),
               (state.cursor, resized.cursor), (state.size, resized.size),
               (state.clock, resized.clock)):
    np.testing.assert_array_equal(a, b)
  assert store.frame_stack == state.obs.frame_stack
  assert resized.obs.obs['pixels'].shape != state.obs.obs['pixels'].shape


def test_sampled_stacks_after_a_resize_are_the_resized_stacks():
  _, state = _data_and_ring(constant=False)
  # A tiny chunk bound: one row per chunk; the result does not depend on it
  # (up to float rounding: XLA may fuse a differently shaped batch
  # differently, moving a value at x.5 by one).
  resized = buffers.replay_resize(state, NEW_H, NEW_W, max_chunk_bytes=1)
  whole = buffers.replay_resize(state, NEW_H, NEW_W)
  for a, b in zip(jax.tree.leaves(resized), jax.tree.leaves(whole)):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.max(np.abs(np.asarray(a, float) - np.asarray(b, float))) <= 1
  sample = jax.jit(lambda s, k: buffers.replay_sample(
      s, k, batch_size=256, n_step=2, discount=0.9))
  key = jax.random.PRNGKey(5)
  before, after = sample(state, key), sample(resized, key)
  # The same transitions, their stacks (obs and next obs, side store
  # included) rebuilt from resized frames: the resized original stacks, up
  # to float rounding of the resize (at most 1 of 255).
  np.testing.assert_array_equal(before.action, after.action)
  np.testing.assert_array_equal(before.obs['state'], after.obs['state'])
  for part in ('obs', 'next_obs'):
    for key_ in ('pixels', 'depth'):
      want = np.asarray(buffers.resize_images(getattr(before, part)[key_],
                                              NEW_H, NEW_W), int)
      got = np.asarray(getattr(after, part)[key_], int)
      assert got.shape == want.shape == (256, NEW_H, NEW_W,
                                         before.obs[key_].shape[-1])
      assert np.max(np.abs(got - want)) <= 1, (part, key_)


def test_resize_refuses_flat_rings():
  state = buffers.replay_init(capacity=8, num_envs=2, obs_size=3,
                              action_size=1, episode_length=5)
  with pytest.raises(ValueError, match='flat observations'):
    buffers.replay_resize(state, 4, 4)
