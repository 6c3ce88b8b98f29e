"""Tests for roxie.losses.ppo."""

import functools

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from roxie.losses import multistep
from roxie.losses import ppo

GAMMA = 0.9
F = np.float32
T = 8


@st.composite
def rollouts(draw):
  """A rollout chunk with random terminations and truncations.

  v_tm1[t + 1] equals v_t[t] wherever step t did not end the episode (the
  same observation); where it ended, obs[t + 1] is a reset observation with
  an unrelated value.
  """
  seed = draw(st.integers(0, 2**31 - 1))
  p_term = draw(st.sampled_from([0., 0.2, 0.5]))
  p_trunc = draw(st.sampled_from([0., 0.2, 0.5]))
  rng = np.random.default_rng(seed)
  terminated = rng.random(T) < p_term
  truncated = (rng.random(T) < p_trunc) & ~terminated
  end = terminated | truncated
  r = rng.normal(size=T).astype(F)
  v_t = rng.normal(size=T).astype(F)
  v_tm1 = np.concatenate([rng.normal(size=1), v_t[:-1]]).astype(F)
  reset_values = rng.normal(size=T).astype(F)
  v_tm1[1:] = np.where(end[:-1], reset_values[:-1], v_tm1[1:])
  d = (GAMMA * (1. - terminated)).astype(F)
  return r, d, end, v_tm1, v_t


def _np_gae(r, d, end, v_tm1, v_t, lam):
  adv = np.zeros(len(r))
  a = 0.
  for t in reversed(range(len(r))):
    delta = r[t] + d[t] * v_t[t] - v_tm1[t]
    a = delta + (0. if end[t] else d[t] * lam * a)
    adv[t] = a
  return adv


# GAE ------------------------------------------------------------------------


def test_gae_hand_case():
  # Step 1 truncates (bootstrap from its final obs value 5), step 2 starts a
  # new episode and terminates.
  r = jnp.array([1., 1., 2.])
  d = jnp.array([.9, .9, 0.])
  end = jnp.array([False, True, True])
  v_tm1 = jnp.array([0., 1., 7.])
  v_t = jnp.array([1., 5., 100.])
  out = jax.jit(functools.partial(ppo.gae_advantages, lambda_=.5))(
      r, d, end, v_tm1, v_t)
  d2 = 2. - 7.
  d1 = 1. + .9 * 5. - 1.
  d0 = 1. + .9 * 1. - 0.
  np.testing.assert_allclose(out.advantages, [d0 + .45 * d1, d1, d2],
                             rtol=1e-6)
  np.testing.assert_allclose(out.returns, out.advantages + v_tm1, rtol=1e-6)


@pytest.mark.parametrize('lam', [0., .95, 1.])
def test_gae_without_ends_matches_rlax(lam):
  rng = np.random.default_rng(0)
  r = rng.normal(size=T).astype(F)
  values = rng.normal(size=T + 1).astype(F)
  d = rng.uniform(size=T).astype(F)
  out = ppo.gae_advantages(r, d, np.zeros(T, bool), values[:-1], values[1:],
                           lambda_=lam)
  expected = rlax.truncated_generalized_advantage_estimation(
      r, d, lam, values)
  np.testing.assert_allclose(out.advantages, expected, rtol=1e-5, atol=1e-6)


def test_gae_lambda_one_is_discounted_return_minus_value():
  rng = np.random.default_rng(1)
  r = rng.normal(size=T).astype(F)
  values = rng.normal(size=T + 1).astype(F)
  d = np.full(T, GAMMA, F)
  out = ppo.gae_advantages(r, d, np.zeros(T, bool), values[:-1], values[1:],
                           lambda_=1.)
  expected = rlax.discounted_returns(r, d, values[1:]) - values[:-1]
  np.testing.assert_allclose(out.advantages, expected, rtol=1e-5, atol=1e-5)


def test_gae_with_lambda_zero_is_one_step_td_error():
  rng = np.random.default_rng(2)
  r, v_tm1, v_t = rng.normal(size=(3, T)).astype(F)
  d = np.full(T, GAMMA, F)
  end = rng.random(T) < .3
  out = ppo.gae_advantages(r, d, end, v_tm1, v_t, lambda_=0.)
  np.testing.assert_allclose(out.advantages, r + d * v_t - v_tm1, rtol=1e-5,
                             atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rollouts(), st.sampled_from([0., .8, 1.]))
def test_gae_matches_numpy(rollout, lam):
  out = _gae(*rollout, lambda_=F(lam))
  np.testing.assert_allclose(out.advantages, _np_gae(*rollout, lam),
                             rtol=1e-5, atol=1e-5)


_gae = jax.jit(ppo.gae_advantages)


@settings(max_examples=25, deadline=None)
@given(rollouts(), st.sampled_from([.5, 1.]))
def test_gae_returns_are_episodic_lambda_returns(rollout, lam):
  r, d, end, _, v_t = rollout
  out = _gae(*rollout, lambda_=F(lam))
  expected = multistep.lambda_returns(r, d, end, v_t, lambda_=F(lam))
  np.testing.assert_allclose(out.returns, expected, rtol=1e-5, atol=1e-5)


def test_gae_truncation_bootstraps_final_obs_not_reset():
  # Same data except the value of the reset observation after the truncation:
  # advantages before the truncation must not change.
  r = jnp.ones(4)
  d = jnp.full(4, GAMMA)
  end = jnp.array([False, True, False, False])
  v_t = jnp.array([1., 2., 3., 4.])
  v_tm1 = jnp.array([0., 1., -50., 3.])
  a = ppo.gae_advantages(r, d, end, v_tm1, v_t).advantages
  b = ppo.gae_advantages(r, d, end, v_tm1.at[2].set(50.), v_t).advantages
  np.testing.assert_allclose(a[:2], b[:2])
  assert a[2] != b[2]


def test_gae_vmap_and_stop_gradient():
  rng = np.random.default_rng(3)
  r, v_tm1, v_t = rng.normal(size=(3, 2, T)).astype(F)
  d = np.full((2, T), GAMMA, F)
  end = rng.random((2, T)) < .3
  out = jax.jit(jax.vmap(ppo.gae_advantages))(r, d, end, v_tm1, v_t)
  for b in range(2):
    np.testing.assert_allclose(
        out.advantages[b], _np_gae(r[b], d[b], end[b], v_tm1[b], v_t[b], .95),
        rtol=1e-5, atol=1e-5)
  g = jax.grad(lambda v: ppo.gae_advantages(
      r[0], d[0], end[0], v, v_t[0]).advantages.sum())(v_tm1[0])
  np.testing.assert_allclose(g, 0.)


def test_gae_rank_checks():
  args = [jnp.ones(4), jnp.ones(4), jnp.zeros(4, bool), jnp.ones(4),
          jnp.ones(4)]
  with pytest.raises(AssertionError, match='rank'):
    ppo.gae_advantages(*args[:4], jnp.ones((4, 1)))
  with pytest.raises(AssertionError, match='type'):
    ppo.gae_advantages(args[0], args[1], jnp.zeros(4), *args[3:])


def test_gae_does_not_leak_a_nan_of_the_next_episode():
  # Step 1 truncates; the next episode has a NaN reward and a NaN value. The
  # trace cut used to multiply the next episode's advantage by 0 (0 * NaN).
  r = jnp.array([1., 2., jnp.nan, 4.])
  d = jnp.full(4, GAMMA)
  end = jnp.array([False, True, False, False])
  v_tm1 = jnp.array([.5, 1., jnp.nan, 3.])
  v_t = jnp.array([1., 2., 3., 4.])
  out = jax.jit(jax.vmap(ppo.gae_advantages))(
      *[x[None] for x in (r, d, end, v_tm1, v_t)])
  expected = _np_gae(np.where(np.isnan(r), 0., r), d, end,
                     np.where(np.isnan(v_tm1), 0., v_tm1), v_t, .95)
  np.testing.assert_allclose(out.advantages[0, :2], expected[:2], rtol=1e-6)
  np.testing.assert_allclose(out.returns[0, :2], expected[:2] + v_tm1[:2],
                             rtol=1e-6)


def test_gae_ignores_a_nan_value_at_a_terminated_step():
  # Step 1 terminates (discount 0): its v_t is not bootstrapped, even if NaN.
  r = jnp.array([1., 2., 3., 4.])
  d = jnp.array([GAMMA, 0., GAMMA, GAMMA])
  end = jnp.array([False, True, False, False])
  v_tm1 = jnp.array([.5, 1., 2., 3.])
  v_t = jnp.array([1., jnp.nan, 3., 4.])
  out = jax.jit(jax.vmap(ppo.gae_advantages))(
      *[x[None] for x in (r, d, end, v_tm1, v_t)])
  expected = _np_gae(r, d, end, v_tm1, np.where(np.isnan(v_t), 0., v_t), .95)
  assert np.all(np.isfinite(out.advantages))
  np.testing.assert_allclose(out.advantages[0], expected, rtol=1e-5)
  np.testing.assert_allclose(out.advantages[0, 1], 2. - 1., rtol=1e-6)


def test_gae_returns_need_the_same_lambda_and_aligned_values():
  # The identity in the docstring, including its conditions: with v_t[t] =
  # v_tm1[t + 1] inside an episode and the SAME lambda the returns are
  # lambda-returns; misaligned values break it.
  r = jnp.array([1., -1., .5, 2.])
  d = jnp.array([GAMMA, GAMMA, 0., GAMMA])
  end = jnp.array([False, False, True, False])
  v_t = jnp.array([2., 3., 9., 5.])
  v_tm1 = jnp.array([1., 2., 3., -4.])  # v_tm1[3] is a reset observation's.
  lam = F(.7)
  gae = ppo.gae_advantages(r, d, end, v_tm1, v_t, lambda_=lam).returns
  np.testing.assert_allclose(
      gae, multistep.lambda_returns(r, d, end, v_t, lambda_=lam), rtol=1e-5)
  misaligned = ppo.gae_advantages(r, d, end, v_tm1.at[1].set(0.), v_t,
                                  lambda_=lam).returns
  assert not np.allclose(misaligned[0], gae[0])


# Policy and value losses ----------------------------------------------------


def test_policy_loss_matches_rlax_and_hand_stats():
  log_p = jnp.log(jnp.array([1., 1.5, .5, 1.1]))
  old = jnp.zeros(4)
  adv = jnp.array([1., 2., -1., -3.])
  out = jax.jit(ppo.ppo_policy_loss)(log_p, old, adv)
  expected = rlax.clipped_surrogate_pg_loss(jnp.exp(log_p), adv, .2)
  np.testing.assert_allclose(out.loss, expected, rtol=1e-6)
  # By hand: min(r A, clip(r) A) = 1, 2.4, -0.8, -3.3.
  np.testing.assert_allclose(out.loss, -(1. + 2.4 - .8 - 3.3) / 4., rtol=1e-5)
  np.testing.assert_allclose(out.clip_fraction, .5)
  ratio = np.array([1., 1.5, .5, 1.1])
  np.testing.assert_allclose(out.approx_kl,
                             np.mean(ratio - 1. - np.log(ratio)), rtol=1e-5)


@pytest.mark.parametrize('stop', [True, False])
def test_policy_loss_and_gradients_match_rlax(stop):
  # roxie writes the surrogate itself (to keep rlax out of the import).
  rng = np.random.default_rng(5)
  log_p, old, adv = (.3 * rng.normal(size=(3, 16))).astype(F)

  def ours(log_p, adv):
    return ppo.ppo_policy_loss(log_p, old, adv, epsilon=.1,
                               stop_advantage_gradients=stop).loss

  def theirs(log_p, adv):
    return rlax.clipped_surrogate_pg_loss(
        jnp.exp(log_p - old), adv, .1, use_stop_gradient=stop)

  np.testing.assert_allclose(jax.jit(ours)(log_p, adv), theirs(log_p, adv),
                             rtol=1e-6)
  for g_ours, g_theirs in zip(jax.grad(ours, argnums=(0, 1))(log_p, adv),
                              jax.grad(theirs, argnums=(0, 1))(log_p, adv)):
    np.testing.assert_allclose(g_ours, g_theirs, rtol=1e-5, atol=1e-7)


def test_policy_loss_gradients():
  log_p = jnp.log(jnp.array([1., 1.5]))
  adv = jnp.array([1., 2.])
  g_new, g_old, g_adv = jax.grad(
      lambda a, b, c: ppo.ppo_policy_loss(a, b, c).loss, argnums=(0, 1, 2))(
          log_p, jnp.zeros(2), adv)
  # Inside the trust region d/dlogp of -r A / T is -r A / T; clipped: 0.
  np.testing.assert_allclose(g_new, [-.5, 0.], atol=1e-6)
  np.testing.assert_allclose(g_old, 0.)
  np.testing.assert_allclose(g_adv, 0.)


def test_policy_loss_vmap_over_minibatches():
  rng = np.random.default_rng(4)
  log_p, old, adv = rng.normal(size=(3, 2, 5)).astype(F) * .1
  out = jax.vmap(ppo.ppo_policy_loss)(log_p, old, adv)
  for b in range(2):
    np.testing.assert_allclose(
        out.loss[b], ppo.ppo_policy_loss(log_p[b], old[b], adv[b]).loss,
        rtol=1e-6)


@pytest.mark.parametrize(
    'clip, expected',
    [(None, .5 * (4. + .25) / 2.),
     # Clipped predictions: 0.2 (error 1.8^2) and 1.2 (error 0.3^2).
     (.2, .5 * (max(4., 1.8 ** 2) + max(.25, .3 ** 2)) / 2.)],
    ids=['unclipped', 'clipped'])
def test_value_loss_hand_cases(clip, expected):
  v_pred = jnp.array([0., 1.])
  v_old = jnp.array([.5, 1.4])
  returns = jnp.array([2., 1.5])
  out = jax.jit(functools.partial(ppo.ppo_value_loss, clip_epsilon=clip))(
      v_pred, v_old, returns)
  np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_value_loss_clipping_can_dominate():
  # The prediction overshoots past the return; the clipped error is larger.
  v_pred, v_old, returns = jnp.array([3.]), jnp.array([0.]), jnp.array([2.])
  clipped = ppo.ppo_value_loss(v_pred, v_old, returns, clip_epsilon=.5)
  np.testing.assert_allclose(clipped, .5 * 1.5 ** 2)
  # Gradient then flows only through the clipped branch, which is flat in v.
  g = jax.grad(lambda v: ppo.ppo_value_loss(v, v_old, returns,
                                            clip_epsilon=.5))(v_pred)
  np.testing.assert_allclose(g, 0.)
  np.testing.assert_allclose(
      jax.grad(lambda v: ppo.ppo_value_loss(v, v_old, returns))(v_pred), 1.)


def test_losses_rank_checks():
  with pytest.raises(AssertionError, match='rank'):
    ppo.ppo_policy_loss(jnp.ones(()), jnp.ones(()), jnp.ones(()))
  with pytest.raises(AssertionError, match='rank'):
    ppo.ppo_value_loss(jnp.ones((2, 2)), jnp.ones(2), jnp.ones(2))
