"""Tests for roxie.buffers.replay against a NumPy n-step reference."""

import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import buffers
from roxie import types

OBS, ACT = 3, 1


def _stream(seed, *, num_envs, num_steps, episode_length, p_terminate):
  """Simulates auto-resetting envs; observations encode (step, env).

  obs[t, b] = (t + 1, b, 0): the observation acted on at step t (never 0, so
  an unwritten row of zeros is recognisable). The true next observation of a
  step that ended an episode is (t + 1.5, b, 7), which differs from the reset
  observation obs[t + 1, b] = (t + 2, b, 0).
  """
  rng = np.random.default_rng(seed)
  steps = np.arange(num_steps, dtype=np.float32)[:, None]
  envs = np.arange(num_envs, dtype=np.float32)[None, :]
  shape = (num_steps, num_envs)
  obs = np.stack(np.broadcast_arrays(steps + 1, envs, 0 * envs), -1)
  action = rng.uniform(-1., 1., shape + (ACT,)).astype(np.float32)
  reward = rng.standard_normal(shape).astype(np.float32)
  terminated = rng.uniform(size=shape) < p_terminate
  truncated = np.zeros(shape, bool)
  episode_step = np.zeros(num_envs, int)
  for t in range(num_steps):
    episode_step += 1
    # A time limit can coincide with a terminal state; both flags are set.
    truncated[t] = episode_step >= episode_length
    episode_step[terminated[t] | truncated[t]] = 0
  ended = terminated | truncated
  next_obs = np.stack(np.broadcast_arrays(steps + 2, envs, 0 * envs), -1)
  ended_obs = np.stack(np.broadcast_arrays(steps + 1.5, envs, 7 + 0 * envs), -1)
  final_obs = np.where(ended[..., None], ended_obs, next_obs).astype(np.float32)
  return dict(obs=obs.astype(np.float32), action=action, reward=reward,
              terminated=terminated, truncated=truncated, final_obs=final_obs)


def _timesteps(data):
  """The TimeStep sequence an environment would have returned, stacked."""
  num_steps = data['obs'].shape[0]
  next_obs = np.concatenate([data['obs'][1:], data['obs'][-1:] + 1.], 0)
  return types.TimeStep(
      obs=jnp.asarray(next_obs), reward=jnp.asarray(data['reward']),
      terminated=jnp.asarray(data['terminated']),
      truncated=jnp.asarray(data['truncated']),
      final_obs=jnp.asarray(data['final_obs']),
      info={'clipped': jnp.zeros(data['reward'].shape, jnp.int32)})


def _reference(data, t, b, *, n_step, discount):
  """n-step transition starting at step t of env b, straight from the stream."""
  reward, weight = 0., 1.
  for k in range(t, t + n_step):
    reward += weight * data['reward'][k, b]
    weight *= discount * (1. - data['terminated'][k, b])
    if data['terminated'][k, b] or data['truncated'][k, b]:
      return reward, weight, data['final_obs'][k, b], data['terminated'][k, b]
  return reward, weight, data['obs'][t + n_step, b], False


@jax.jit
def _fill(state, obs, action, timesteps):
  def body(state, xs):
    return buffers.replay_add(state, *xs), None
  return jax.lax.scan(body, state, (obs, action, timesteps))[0]


def _filled(data, *, capacity, episode_length):
  num_envs = data['obs'].shape[1]
  state = buffers.replay_init(capacity=capacity, num_envs=num_envs,
                              obs_size=OBS, action_size=ACT,
                              episode_length=episode_length)
  return _fill(state, jnp.asarray(data['obs']), jnp.asarray(data['action']),
               _timesteps(data))


_sample = jax.jit(buffers.replay_sample,
                  static_argnames=('batch_size', 'n_step'))


def _check_against_reference(data, batch, *, rows, n_step, discount):
  num_steps = data['obs'].shape[0]
  oldest = max(0, num_steps - rows)
  steps = np.asarray(batch.obs[:, 0]).astype(int) - 1
  envs = np.asarray(batch.obs[:, 1]).astype(int)
  # Only written rows, and only rows with a whole window after them.
  assert np.all(steps >= oldest) and np.all(steps <= num_steps - 1 - n_step)
  for i, (t, b) in enumerate(zip(steps, envs)):
    reward, weight, next_obs, terminal = _reference(
        data, t, b, n_step=n_step, discount=discount)
    np.testing.assert_allclose(batch.obs[i], data['obs'][t, b])
    np.testing.assert_allclose(batch.action[i], data['action'][t, b])
    np.testing.assert_allclose(batch.reward[i], reward, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.discount[i], weight, rtol=1e-5, atol=1e-7)
    if terminal:
      assert batch.discount[i] == 0. and np.all(np.isfinite(batch.next_obs[i]))
    else:
      np.testing.assert_array_equal(batch.next_obs[i], next_obs)


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(
    seed=st.integers(0, 2**16),
    episode_length=st.integers(1, 9),
    p_terminate=st.sampled_from([0., 0.1, 0.4]),
    num_steps=st.integers(2, 30),
    n_step=st.integers(1, 4),
    discount=st.sampled_from([0.5, 0.99]))
def test_samples_match_numpy_reference(seed, episode_length, p_terminate,
                                       num_steps, n_step, discount):
  num_envs, rows = 2, 8
  hypothesis.assume(min(num_steps, rows) > n_step)
  data = _stream(seed, num_envs=num_envs, num_steps=num_steps,
                 episode_length=episode_length, p_terminate=p_terminate)
  state = _filled(data, capacity=rows * num_envs, episode_length=episode_length)
  assert int(state.size) == min(num_steps, rows)
  batch = _sample(state, jax.random.PRNGKey(seed), batch_size=64,
                  n_step=n_step, discount=discount)
  _check_against_reference(data, batch, rows=rows, n_step=n_step,
                           discount=discount)


def test_truncation_bootstraps_from_final_obs_after_many_wraps():
  # Episodes of 5 steps, no terminations, a ring of 7 rows, 40 steps: the
  # ring wraps five times and the side store's three slots are reused often.
  data = _stream(0, num_envs=3, num_steps=40, episode_length=5, p_terminate=0.)
  state = _filled(data, capacity=21, episode_length=5)
  assert state.final_obs.shape == (3, 3, OBS)  # ceil(7 / 5) + 1 slots.
  assert int(state.clock) == 40 % 12  # D = ceil(7 / 2) = 4 rows per slot.
  batch = _sample(state, jax.random.PRNGKey(0), batch_size=512, n_step=3,
                  discount=0.9)
  _check_against_reference(data, batch, rows=7, n_step=3, discount=0.9)
  # Some windows ended on a truncation; they bootstrap from the final obs
  # (third feature 7), never from the reset obs (third feature 0).
  ended = np.asarray(batch.next_obs[:, 2]) == 7.
  assert ended.any() and not ended.all()
  np.testing.assert_allclose(np.asarray(batch.discount)[ended] > 0., True)


def test_uniform_over_valid_rows_and_envs():
  data = _stream(1, num_envs=2, num_steps=6, episode_length=100,
                 p_terminate=0.)
  state = _filled(data, capacity=20, episode_length=100)  # Not yet full.
  batch = _sample(state, jax.random.PRNGKey(3), batch_size=6000, n_step=2,
                  discount=0.9)
  pairs = np.asarray(batch.obs[:, 0]) * 10 + np.asarray(batch.obs[:, 1])
  values, counts = np.unique(pairs, return_counts=True)
  # Steps 0..3 (obs 1..4) of each env start whole windows; 4 and 5 do not.
  np.testing.assert_array_equal(values, [10, 11, 20, 21, 30, 31, 40, 41])
  np.testing.assert_allclose(counts / 6000, 1 / 8, atol=0.02)


def test_can_sample_and_empty_ring():
  state = buffers.replay_init(capacity=8, num_envs=2, obs_size=OBS,
                              action_size=ACT, episode_length=10)
  assert not buffers.replay_can_sample(state, n_step=1)
  data = _stream(0, num_envs=2, num_steps=2, episode_length=10, p_terminate=0.)
  state = _filled(data, capacity=8, episode_length=10)
  assert buffers.replay_can_sample(state, n_step=1)
  assert not buffers.replay_can_sample(state, n_step=2)
  assert int(buffers.replay_num_sampleable(state, n_step=1)) == 1
  assert int(buffers.replay_size(state)) == 4  # 2 rows of 2 envs.


def test_add_under_jit_with_donation_and_scan():
  data = _stream(2, num_envs=2, num_steps=12, episode_length=4, p_terminate=0.2)
  timesteps = _timesteps(data)
  state = buffers.replay_init(capacity=10, num_envs=2, obs_size=OBS,
                              action_size=ACT, episode_length=4)
  add = jax.jit(buffers.replay_add, donate_argnums=0)
  for t in range(12):
    state = add(state, data['obs'][t], data['action'][t],
                jax.tree.map(lambda x, t=t: x[t], timesteps))
  scanned = _filled(data, capacity=10, episode_length=4)
  jax.tree.map(np.testing.assert_array_equal, state, scanned)
  # Rows 7..11 survive in a ring of 5 rows; row 12 % 5 = 2 is next.
  assert int(state.cursor) == 2 and int(state.size) == 5
  np.testing.assert_array_equal(state.obs[:, 0, 0],
                                [11., 12., 8., 9., 10.])


def test_shapes_and_dtypes():
  state = buffers.replay_init(capacity=1000 * 4, num_envs=4, obs_size=5,
                              action_size=2, episode_length=1000)
  assert state.obs.shape == (1000, 4, 5) and state.action.shape == (1000, 4, 2)
  # A ring no longer than an episode holds at most one truncation per env.
  assert state.final_obs.shape == (1, 4, 5)
  assert state.terminated.dtype == bool and state.reward.dtype == jnp.float32
  batch = _sample(state, jax.random.PRNGKey(0), batch_size=7, n_step=3,
                  discount=0.99)
  assert batch.obs.shape == batch.next_obs.shape == (7, 5)
  assert batch.action.shape == (7, 2)
  assert batch.reward.shape == batch.discount.shape == (7,)


def test_init_rejects_bad_sizes():
  with pytest.raises(ValueError, match='rows'):
    buffers.replay_init(capacity=3, num_envs=2, obs_size=1, action_size=1,
                        episode_length=10)
  with pytest.raises(ValueError, match='episode_length'):
    buffers.replay_init(capacity=30, num_envs=2, obs_size=1, action_size=1,
                        episode_length=0)
