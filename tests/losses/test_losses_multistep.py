"""Tests for roxie.losses.multistep."""

import functools

import chex
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from roxie.losses import multistep

GAMMA = 0.9
F = np.float32


def _np_window(r, d, end, start, n, seq_len):
  """Reference: walks one window, returns (reward, discount, last)."""
  reward, weight = 0., 1.
  k = start
  for k in range(start, min(start + n, seq_len)):
    reward += weight * r[k]
    weight *= d[k]
    if end[k]:
      break
  return reward, weight, k


def _np_n_step_returns(r, d, end, v, n):
  seq_len = len(r)
  out = np.zeros(seq_len)
  for t in range(seq_len):
    reward, weight, k = _np_window(r, d, end, t, n, seq_len)
    out[t] = reward + weight * v[k]
  return out


def _np_lambda_returns(r, d, end, v, lam):
  seq_len = len(r)
  out = np.zeros(seq_len)
  g = 0.
  for t in reversed(range(seq_len)):
    if end[t] or t == seq_len - 1:
      g = r[t] + d[t] * v[t]
    else:
      g = r[t] + d[t] * ((1 - lam) * v[t] + lam * g)
    out[t] = g
  return out


@st.composite
def episodes(draw, seq_len=8):
  """Random rewards, values and independent terminations and truncations."""
  seed = draw(st.integers(0, 2**31 - 1))
  p_term = draw(st.sampled_from([0., 0.2, 0.5]))
  p_trunc = draw(st.sampled_from([0., 0.2, 0.5]))
  rng = np.random.default_rng(seed)
  terminated = rng.random(seq_len) < p_term
  truncated = (rng.random(seq_len) < p_trunc) & ~terminated
  r = rng.normal(size=seq_len).astype(F)
  v = rng.normal(size=seq_len).astype(F)
  d = (GAMMA * (1. - terminated)).astype(F)
  end = terminated | truncated
  return r, d, end, v


# n_step_transition ----------------------------------------------------------


@pytest.mark.parametrize(
    'end, term, expected',
    [
        # No end: all four rewards, gamma^4.
        ([0, 0, 0, 0], [0, 0, 0, 0],
         (1. + .9 * 2. + .81 * 3. + .729 * 4., .6561, 3)),
        # Terminated at step 1: two rewards, no bootstrap.
        ([0, 1, 0, 0], [0, 1, 0, 0], (1. + .9 * 2., 0., 1)),
        # Truncated at step 1: two rewards, bootstrap with gamma^2.
        ([0, 1, 0, 0], [0, 0, 0, 0], (1. + .9 * 2., .81, 1)),
        # Episode ends on the first step; later ends are ignored.
        ([1, 0, 1, 0], [0, 0, 1, 0], (1., .9, 0)),
        ([1, 0, 0, 0], [1, 0, 0, 0], (1., 0., 0)),
        # Terminated on the last step.
        ([0, 0, 0, 1], [0, 0, 0, 1], (1. + .9 * 2. + .81 * 3. + .729 * 4., 0.,
                                      3)),
    ],
    ids=['no_end', 'terminated', 'truncated', 'trunc_first', 'term_first',
         'term_last'])
def test_n_step_transition_hand_cases(end, term, expected):
  r = jnp.array([1., 2., 3., 4.])
  d = GAMMA * (1. - jnp.array(term, jnp.float32))
  out = jax.jit(multistep.n_step_transition)(r, d, jnp.array(end, bool))
  np.testing.assert_allclose(out.reward, expected[0], rtol=1e-6)
  np.testing.assert_allclose(out.discount, expected[1], rtol=1e-6, atol=1e-7)
  assert out.last.dtype == jnp.int32
  assert int(out.last) == expected[2]
  chex.assert_shape([out.reward, out.discount, out.last], [(), (), ()])


def test_n_step_transition_ignores_next_episode():
  # Whatever happens after the first end must not change the output.
  r = jnp.array([1., 2., 3., 4.])
  d = jnp.array([.9, .9, .9, .9])
  end = jnp.array([False, True, False, False])
  base = multistep.n_step_transition(r, d, end)
  other = multistep.n_step_transition(
      r.at[2:].set(100.), d.at[2:].set(0.), end.at[3].set(True))
  chex.assert_trees_all_close(base, other)


def test_n_step_transition_vmap_matches_loop():
  rng = np.random.default_rng(0)
  r = rng.normal(size=(5, 3)).astype(F)
  term = rng.random((5, 3)) < 0.3
  end = term | (rng.random((5, 3)) < 0.3)
  d = (GAMMA * (1. - term)).astype(F)
  out = jax.jit(jax.vmap(multistep.n_step_transition))(r, d, end)
  for b in range(5):
    reward, discount, last = _np_window(r[b], d[b], end[b], 0, 3, 3)
    np.testing.assert_allclose(out.reward[b], reward, rtol=1e-5)
    np.testing.assert_allclose(out.discount[b], discount, rtol=1e-5)
    assert int(out.last[b]) == last


def test_n_step_transition_gradient_reaches_only_window_rewards():
  d = jnp.array([.9, .9, .9])
  end = jnp.array([False, True, False])
  grad = jax.grad(lambda r: multistep.n_step_transition(r, d, end).reward)(
      jnp.ones(3))
  np.testing.assert_allclose(grad, [1., .9, 0.])


@pytest.mark.parametrize(
    'args, match',
    [
        # The messages name the argument, not its position.
        ((jnp.ones((2, 3)), jnp.ones(3), jnp.zeros(3, bool)),
         '`r_t` must have rank 1, got rank 2'),
        ((jnp.ones(3), jnp.ones(()), jnp.zeros(3, bool)),
         '`discount_t` must have rank 1, got rank 0'),
        ((jnp.ones(3), jnp.ones(3), jnp.zeros(3)),
         '`end_t` must have a bool dtype, got dtype float32'),
        ((jnp.ones(3), jnp.ones(3), jnp.zeros(4, bool)), 'shape'),
    ],
    ids=['reward_rank', 'discount_rank', 'end_not_bool', 'length_mismatch'])
def test_n_step_transition_rejects_bad_inputs(args, match):
  with pytest.raises(AssertionError, match=match):
    jax.jit(multistep.n_step_transition)(*args)


@settings(max_examples=40, deadline=None)
@given(episodes(seq_len=5))
def test_n_step_transition_matches_numpy(episode):
  r, d, end, _ = episode
  out = _jit_transition(r, d, end)
  reward, discount, last = _np_window(r, d, end, 0, 5, 5)
  np.testing.assert_allclose(out.reward, reward, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out.discount, discount, rtol=1e-5, atol=1e-7)
  assert int(out.last) == last


_jit_transition = jax.jit(multistep.n_step_transition)


# n_step_returns -------------------------------------------------------------


def test_n_step_returns_hand_case():
  # Steps: 0, 1 (truncated), 2, 3 (terminated), 4. n = 2.
  r = jnp.array([1., 2., 3., 4., 5.])
  term = jnp.array([0., 0., 0., 1., 0.])
  end = jnp.array([False, True, False, True, False])
  d = GAMMA * (1. - term)
  v = jnp.array([10., 20., 30., 40., 50.])
  expected = [
      1. + .9 * 2. + .81 * 20.,  # window 0-1, truncated: bootstrap v[1].
      2. + .9 * 20.,  # window starts at the truncated step.
      3. + .9 * 4.,  # window 2-3, terminated: no bootstrap.
      4.,  # terminated immediately.
      5. + .9 * 50.,  # sequence end.
  ]
  out = jax.jit(functools.partial(multistep.n_step_returns, n=2))(r, d, end, v)
  np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_n_step_returns_one_step_is_td_target():
  rng = np.random.default_rng(1)
  r, v = rng.normal(size=(2, 6)).astype(F)
  d = np.full(6, GAMMA, F)
  end = rng.random(6) < 0.5
  out = multistep.n_step_returns(r, d, end, v, n=1)
  np.testing.assert_allclose(out, r + d * v, rtol=1e-6)


@pytest.mark.parametrize('n', [1, 2, 3, 6])
def test_n_step_returns_without_ends_match_rlax(n):
  rng = np.random.default_rng(n)
  r, v = rng.normal(size=(2, 6)).astype(F)
  d = rng.uniform(0., 1., size=6).astype(F)
  end = np.zeros(6, bool)
  out = multistep.n_step_returns(r, d, end, v, n=n)
  expected = rlax.n_step_bootstrapped_returns(r, d, v, n)
  np.testing.assert_allclose(out, expected, rtol=1e-5)


@pytest.mark.parametrize('n', [6, 9])
def test_n_step_returns_full_length_is_lambda_one_return(n):
  rng = np.random.default_rng(3)
  r, v = rng.normal(size=(2, 6)).astype(F)
  d = rng.uniform(0., 1., size=6).astype(F)
  out = multistep.n_step_returns(r, d, np.zeros(6, bool), v, n=n)
  expected = rlax.lambda_returns(r, d, v, lambda_=1.)
  np.testing.assert_allclose(out, expected, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(episodes(), st.sampled_from([1, 3, 8]))
def test_n_step_returns_match_numpy(episode, n):
  r, d, end, v = episode
  out = _jit_returns[n](r, d, end, v)
  np.testing.assert_allclose(
      out, _np_n_step_returns(r, d, end, v, n), rtol=1e-5, atol=1e-5)


_jit_returns = {
    n: jax.jit(functools.partial(multistep.n_step_returns, n=n))
    for n in (1, 3, 8)
}


@settings(max_examples=25, deadline=None)
@given(episodes())
def test_n_step_returns_agree_with_transitions(episode):
  # G_t is the transition folded from the window starting at t, bootstrapped
  # from v at its `last` step; windows are clipped at the sequence end.
  r, d, end, v = episode
  n, seq_len = 3, len(r)
  out = _jit_returns[n](r, d, end, v)
  for t in range(seq_len):
    stop = min(t + n, seq_len)
    window_end = end[t:stop].copy()
    window_end[-1] = True  # The sequence end cuts the window like an end.
    tr = _jit_transition(r[t:stop], d[t:stop], window_end)
    np.testing.assert_allclose(
        out[t], tr.reward + tr.discount * v[t + int(tr.last)],
        rtol=1e-5, atol=1e-5)


def test_n_step_returns_truncation_uses_final_obs_value_not_reset():
  # v_t at a truncated step is the final observation's value; a wrong
  # implementation that read the next step's value would see 1000.
  r = jnp.zeros(3)
  d = jnp.full(3, GAMMA)
  end = jnp.array([True, False, False])
  v = jnp.array([1., 1000., 1000.])
  out = multistep.n_step_returns(r, d, end, v, n=3)
  np.testing.assert_allclose(out[0], .9)


def test_n_step_returns_stop_gradient():
  r, d = jnp.ones(4), jnp.full(4, GAMMA)
  end = jnp.zeros(4, bool)

  def total(v, stop):
    return jnp.sum(multistep.n_step_returns(
        r, d, end, v, n=2, stop_target_gradients=stop))

  np.testing.assert_allclose(jax.grad(total)(jnp.ones(4), True), 0.)
  assert np.abs(jax.grad(total)(jnp.ones(4), False)).sum() > 0.


def test_n_step_returns_vmap():
  rng = np.random.default_rng(4)
  r, v = rng.normal(size=(2, 3, 5)).astype(F)
  d = np.full((3, 5), GAMMA, F)
  end = rng.random((3, 5)) < 0.3
  out = jax.jit(jax.vmap(functools.partial(multistep.n_step_returns, n=2)))(
      r, d, end, v)
  for b in range(3):
    np.testing.assert_allclose(
        out[b], _np_n_step_returns(r[b], d[b], end[b], v[b], 2), rtol=1e-5)


def test_n_step_returns_rejects_bad_inputs():
  with pytest.raises(AssertionError, match='rank'):
    multistep.n_step_returns(jnp.ones(3), jnp.ones(3), jnp.zeros(3, bool),
                             jnp.ones((3, 1)), n=2)
  with pytest.raises(ValueError, match='at least 1'):
    multistep.n_step_returns(jnp.ones(3), jnp.ones(3), jnp.zeros(3, bool),
                             jnp.ones(3), n=0)


# lambda_returns -------------------------------------------------------------


@pytest.mark.parametrize('lam', [0., 0.5, 1.])
def test_lambda_returns_without_ends_match_rlax(lam):
  rng = np.random.default_rng(5)
  r, v = rng.normal(size=(2, 6)).astype(F)
  d = rng.uniform(0., 1., size=6).astype(F)
  out = jax.jit(functools.partial(multistep.lambda_returns, lambda_=lam))(
      r, d, np.zeros(6, bool), v)
  np.testing.assert_allclose(out, rlax.lambda_returns(r, d, v, lambda_=lam),
                             rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(episodes(), st.sampled_from([0., 0.7, 1.]))
def test_lambda_returns_match_numpy(episode, lam):
  r, d, end, v = episode
  out = _jit_lambda(r, d, end, v, lambda_=F(lam))
  np.testing.assert_allclose(
      out, _np_lambda_returns(r, d, end, v, lam), rtol=1e-5, atol=1e-5)


_jit_lambda = jax.jit(multistep.lambda_returns)


@settings(max_examples=25, deadline=None)
@given(episodes())
def test_lambda_one_equals_n_step_returns_with_n_equal_length(episode):
  r, d, end, v = episode
  np.testing.assert_allclose(
      _jit_lambda(r, d, end, v, lambda_=F(1.)),
      _jit_returns[8](r, d, end, v), rtol=1e-5, atol=1e-5)


def test_lambda_returns_do_not_leak_non_finite_values_across_ends():
  r = jnp.zeros(3)
  d = jnp.array([0., GAMMA, GAMMA])  # Step 0 terminated.
  end = jnp.array([True, False, False])
  v = jnp.array([0., jnp.inf, 1.])
  out = multistep.lambda_returns(r, d, end, v, lambda_=.5)
  assert np.isfinite(out[0])


# Issue 14, item 14: a NaN bootstrap value at a terminated step ---------------


def _nan_at_termination():
  """Two episodes in one sequence; step 1 terminates with a NaN v_t there."""
  r = jnp.array([1., 2., 3., 4.])
  d = jnp.array([GAMMA, 0., GAMMA, GAMMA])
  end = jnp.array([False, True, False, False])
  v = jnp.array([5., jnp.nan, 6., 7.])
  return r, d, end, v


@pytest.mark.parametrize('fn, first_episode', [
    (functools.partial(multistep.n_step_returns, n=3),
     [1. + GAMMA * 2., 2.]),
    (functools.partial(multistep.lambda_returns, lambda_=F(.8)),
     [1. + GAMMA * (.2 * 5. + .8 * 2.), 2.]),
], ids=['n_step_returns', 'lambda_returns'])
def test_nan_value_at_a_terminated_step_is_ignored(fn, first_episode):
  # The terminated step's v_t has no role (its discount is 0); 0 * NaN used to
  # make the returns of the whole first episode NaN.
  r, d, end, v = _nan_at_termination()
  batch = jax.tree.map(lambda x: jnp.stack([x, x]), (r, d, end, v))
  out = jax.jit(jax.vmap(fn))(*batch)
  expected = fn(r, d, end, v.at[1].set(0.))
  assert np.all(np.isfinite(out))
  np.testing.assert_allclose(out, jnp.stack([expected, expected]), rtol=1e-6)
  np.testing.assert_allclose(out[0, :2], first_episode, rtol=1e-6)

