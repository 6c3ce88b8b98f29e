"""Replay of dict (pixel) observations: frame stacks rebuilt from single frames.

The reference is a synthetic environment stream built exactly as roxie's
pixel environments emit it (`roxie.envs.pixels`): an episode's first stack
is its first frame repeated S times, every step shifts in one new frame
(oldest first, newest last), and where an episode ends `final_obs` is the
true final stack and `obs` the next episode's first stack.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import buffers
from roxie import types

H, W, S, ACT, STATE = 3, 2, 3, 1, 2
SHAPES = (('depth', (H, W, S), 'uint8'), ('pixels', (H, W, 3 * S), 'uint8'),
          ('state', (STATE,), 'float32'))


def _stream(seed, *, num_envs, num_steps, episode_length, p_terminate):
  """Auto-resetting envs with random frames; 'state' encodes (step, env).

  state[t, b] = (t + 1, b): the observation acted on at step t. The state of
  the final observation of a step that ended an episode is (t + 1.5, b).
  """
  rng = np.random.default_rng(seed)
  new_frame = lambda: (rng.integers(0, 256, (H, W, 3), np.uint8),
                       rng.integers(0, 256, (H, W, 1), np.uint8))
  shape = (num_steps, num_envs)
  obs = {'pixels': np.zeros(shape + (H, W, 3 * S), np.uint8),
         'depth': np.zeros(shape + (H, W, S), np.uint8),
         'state': np.zeros(shape + (STATE,), np.float32)}
  final = {k: np.zeros_like(v) for k, v in obs.items()}
  terminated = rng.uniform(size=shape) < p_terminate
  truncated = np.zeros(shape, bool)
  reward = rng.standard_normal(shape).astype(np.float32)
  action = rng.uniform(-1., 1., shape + (ACT,)).astype(np.float32)

  def reset():
    rgb, depth = new_frame()
    return np.concatenate([rgb] * S, -1), np.concatenate([depth] * S, -1)

  stacks = [reset() for _ in range(num_envs)]
  episode_step = np.zeros(num_envs, int)
  for t in range(num_steps):
    for b in range(num_envs):
      obs['pixels'][t, b], obs['depth'][t, b] = stacks[b]
      obs['state'][t, b] = (t + 1, b)
      episode_step[b] += 1
      truncated[t, b] = episode_step[b] >= episode_length
      rgb, depth = new_frame()
      shifted = (np.concatenate([stacks[b][0][..., 3:], rgb], -1),
                 np.concatenate([stacks[b][1][..., 1:], depth], -1))
      if terminated[t, b] or truncated[t, b]:
        final['pixels'][t, b], final['depth'][t, b] = shifted
        final['state'][t, b] = (t + 1.5, b)
        stacks[b] = reset()
        episode_step[b] = 0
      else:
        stacks[b] = shifted
        final['pixels'][t, b], final['depth'][t, b] = shifted
        final['state'][t, b] = (t + 2, b)
  next_obs = {k: np.concatenate([v[1:], v[-1:]], 0) for k, v in obs.items()}
  return dict(obs=obs, final_obs=final, next_obs=next_obs, action=action,
              reward=reward, terminated=terminated, truncated=truncated)


def _fill(data, *, capacity, episode_length):
  num_envs = data['action'].shape[1]
  state = buffers.replay_init(capacity=capacity, num_envs=num_envs,
                              obs_size=STATE, action_size=ACT,
                              episode_length=episode_length,
                              obs_shapes=SHAPES, frame_stack=S)
  timesteps = types.TimeStep(
      obs=data['next_obs'], reward=data['reward'],
      terminated=data['terminated'], truncated=data['truncated'],
      final_obs=data['final_obs'],
      info={'clipped': np.zeros(data['reward'].shape, np.int32)})

  @jax.jit
  def fill(state, xs):
    return jax.lax.scan(lambda s, x: (buffers.replay_add(s, *x), None),
                        state, xs)[0]
  return fill(state, (data['obs'], data['action'], timesteps))


def _expected(data, t, b, *, n_step, discount):
  """(reward, discount, next observation or None after a termination)."""
  reward, weight = 0., 1.
  for k in range(t, t + n_step):
    reward += weight * data['reward'][k, b]
    weight *= discount * (1. - data['terminated'][k, b])
    if data['terminated'][k, b]:
      return reward, weight, None
    if data['truncated'][k, b]:
      return reward, weight, {key: v[k, b]
                              for key, v in data['final_obs'].items()}
  return reward, weight, {key: v[t + n_step, b]
                          for key, v in data['obs'].items()}


@pytest.mark.parametrize('n_step,capacity,num_steps', [
    (1, 4 * 200, 150),  # Not wrapped.
    (3, 4 * 37, 300),  # Wrapped several times.
    (2, 4 * 6, 40),  # A ring shorter than an episode.
])
def test_sampled_stacks_equal_the_stacks_the_env_emitted(n_step, capacity,
                                                         num_steps):
  episode_length = 9
  data = _stream(0, num_envs=4, num_steps=num_steps,
                 episode_length=episode_length, p_terminate=0.08)
  assert data['truncated'].any() and data['terminated'].any()
  state = _fill(data, capacity=capacity, episode_length=episode_length)
  assert bool(buffers.replay_can_sample(state, n_step=n_step))
  batch = jax.device_get(jax.jit(
      lambda s, k: buffers.replay_sample(s, k, batch_size=1024, n_step=n_step,
                                         discount=0.9))(
                                             state, jax.random.PRNGKey(1)))
  rows = capacity // 4
  oldest = num_steps - min(num_steps, rows)
  seen = set()
  for i in range(1024):
    t, b = int(batch.obs['state'][i, 0]) - 1, int(batch.obs['state'][i, 1])
    seen.add((t, b))
    assert oldest <= t <= num_steps - n_step - 1
    for key in ('pixels', 'depth', 'state'):
      np.testing.assert_array_equal(batch.obs[key][i], data['obs'][key][t, b],
                                    err_msg=f'obs[{key!r}] of step {t}')
    np.testing.assert_array_equal(batch.action[i], data['action'][t, b])
    reward, discount, next_obs = _expected(data, t, b, n_step=n_step,
                                           discount=0.9)
    np.testing.assert_allclose(batch.reward[i], reward, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch.discount[i], discount, rtol=1e-6)
    if next_obs is not None:  # After a termination it is never used.
      for key in ('pixels', 'depth', 'state'):
        np.testing.assert_array_equal(
            batch.next_obs[key][i], next_obs[key],
            err_msg=f'next_obs[{key!r}] of step {t}')
  # Samples reach episode starts, truncations and the oldest usable rows.
  starts = {(t, b) for t in range(num_steps) for b in range(4)
            if t == 0 or data['terminated'][t - 1, b]
            or data['truncated'][t - 1, b]}
  assert seen & starts
  ended = {(t, b) for (t, b) in seen if data['truncated'][t, b]}
  assert ended
  if num_steps > rows:
    # Once wrapped, the oldest S - 1 rows are not sampled, the next one is.
    ages = {t - oldest for t, _ in seen}
    assert min(ages) == S - 1


def test_fresh_ring_samples_its_first_rows_and_counts_sampleable_rows():
  data = _stream(1, num_envs=2, num_steps=6, episode_length=50,
                 p_terminate=0.)
  state = _fill(data, capacity=2 * 100, episode_length=50)
  assert int(buffers.replay_num_sampleable(state, n_step=1)) == 5
  # The first stored row holds the reset stack: its first frame repeated.
  batch = buffers.replay_sample(state, jax.random.PRNGKey(0), batch_size=256,
                                n_step=1, discount=0.9)
  first = np.asarray(batch.obs['state'][:, 0]) == 1
  assert first.any()
  pix = np.asarray(batch.obs['pixels'])[first]
  np.testing.assert_array_equal(pix[..., :3], pix[..., 6:])
  # Wrapped: R rows minus n minus the S - 1 rows whose history is gone.
  data = _stream(2, num_envs=2, num_steps=30, episode_length=50,
                 p_terminate=0.)
  state = _fill(data, capacity=2 * 10, episode_length=50)
  assert int(buffers.replay_num_sampleable(state, n_step=2)) == 10 - 2 - (
      S - 1)


def test_flat_rings_are_unchanged_by_dict_support():
  state = buffers.replay_init(capacity=100, num_envs=2, obs_size=4,
                              action_size=1, episode_length=10)
  assert state.obs.shape == (50, 2, 4)
  assert state.final_obs.shape == (6, 2, 4)


def test_pixel_replay_memory_is_one_frame_per_step_plus_vectors():
  # A 64x64 RGB+depth ring of 10^5 transitions, 3 frames stacked,
  # 1000-step episodes: shapes only (nothing is allocated).
  shapes = (('depth', (64, 64, 3), 'uint8'), ('pixels', (64, 64, 9), 'uint8'),
            ('state', (5,), 'float32'))
  state = jax.eval_shape(lambda: buffers.replay_init(
      capacity=100_000, num_envs=8, obs_size=5, action_size=1,
      episode_length=1000, obs_shapes=shapes, frame_stack=3))
  total = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
              for x in jax.tree.leaves(state))
  per_step = total / (state.action.shape[0] * 8)
  one_frame = 64 * 64 * (3 + 1)
  vectors = 4 * 5 + 4 * 1 + 4 + 2  # state, action, reward, two flags.
  assert per_step <= 1.1 * (one_frame + vectors)
  # And well below storing the stacks.
  assert per_step < 0.4 * 64 * 64 * (9 + 3)


def test_add_rejects_mismatched_observations():
  state = buffers.replay_init(capacity=20, num_envs=2, obs_size=STATE,
                              action_size=ACT, episode_length=5,
                              obs_shapes=SHAPES, frame_stack=S)
  obs = {'pixels': jnp.zeros((2, H, W, 3 * S), jnp.uint8),
         'depth': jnp.zeros((2, H, W, S), jnp.uint8),
         'state': jnp.zeros((2, STATE))}
  ts = types.TimeStep(obs=obs, reward=jnp.zeros(2),
                      terminated=jnp.zeros(2, bool),
                      truncated=jnp.zeros(2, bool), final_obs=obs, info={})
  buffers.replay_add(state, obs, jnp.zeros((2, ACT)), ts)  # Fine.
  with pytest.raises(ValueError, match=r"keys \['pixels', 'state'\]"):
    buffers.replay_add(state, {'pixels': obs['pixels'], 'state': obs['state']},
                       jnp.zeros((2, ACT)), ts)
  bad = dict(obs, pixels=jnp.zeros((2, H, W, 3), jnp.uint8))
  with pytest.raises(ValueError, match=r"obs\['pixels'\] has shape"):
    buffers.replay_add(state, bad, jnp.zeros((2, ACT)), ts)
  with pytest.raises(ValueError, match='does not stack 2 frames'):
    buffers.replay_init(capacity=20, num_envs=2, obs_size=STATE,
                        action_size=ACT, episode_length=5, obs_shapes=SHAPES,
                        frame_stack=2)
