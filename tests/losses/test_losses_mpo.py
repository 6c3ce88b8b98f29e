"""Tests for roxie.losses.mpo."""

import functools
import math

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from roxie.losses import distributions
from roxie.losses import mpo

N, A = 6, 2


def _state(seed):
  """Random policy parameters, sampled actions and Q-values at one state."""
  rng = np.random.default_rng(seed)
  f = lambda *s: jnp.asarray(rng.normal(size=s).astype(np.float32))
  u = lambda lo, hi, *s: jnp.asarray(rng.uniform(lo, hi, s).astype(np.float32))
  target_mean, target_std = f(A), u(.3, 1.5, A)
  return dict(
      q_values=f(N) * 3.,
      actions=target_mean[None] + target_std[None] * f(N, A),
      online_mean=target_mean + .3 * f(A),
      online_std=target_std * u(.7, 1.4, A),
      target_mean=target_mean,
      target_std=target_std,
      log_temperature=jnp.array(rng.normal(), jnp.float32),
  )


# E-step ---------------------------------------------------------------------


def test_e_step_uniform_q_gives_uniform_weights():
  out = jax.jit(mpo.mpo_e_step)(jnp.full(4, 2.), jnp.log(.5))
  np.testing.assert_allclose(out.weights, .25, rtol=1e-6)
  # log-mean-exp of a constant is q / eta, so the dual is eta * eps + q.
  np.testing.assert_allclose(out.temperature_loss, .5 * .1 + 2., rtol=1e-6)
  np.testing.assert_allclose(out.temperature, .5, rtol=1e-6)


def test_e_step_weights_are_softmax_over_temperature():
  q = jnp.array([0., 1., 2.])
  out = mpo.mpo_e_step(q, jnp.log(2.), epsilon=.2)
  expected = np.exp(np.array([0., .5, 1.]))
  np.testing.assert_allclose(out.weights, expected / expected.sum(), rtol=1e-6)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([.01, .1, 1.]))
def test_e_step_matches_rlax(seed, epsilon):
  s = _state(seed)
  ours = _e_step(s['q_values'], s['log_temperature'], epsilon=epsilon)
  loss, weights, n = rlax.mpo_compute_weights_and_temperature_loss(
      s['q_values'], rlax.LagrangePenalty(s['log_temperature'], epsilon),
      jnp.exp)
  assert n == N
  np.testing.assert_allclose(ours.weights, weights, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(ours.temperature_loss, loss, rtol=1e-5,
                             atol=1e-6)


_e_step = jax.jit(mpo.mpo_e_step)


def test_e_step_gradients_only_reach_the_temperature():
  q, log_t = jnp.array([0., 1., 3.]), jnp.array(0.)
  g_q, g_t = jax.grad(lambda q, t: mpo.mpo_e_step(q, t).temperature_loss,
                      argnums=(0, 1))(q, log_t)
  np.testing.assert_allclose(g_q, 0.)
  assert g_t != 0.
  g_w = jax.grad(lambda q, t: mpo.mpo_e_step(q, t).weights[2],
                 argnums=(0, 1))(q, log_t)
  np.testing.assert_allclose(g_w[0], 0.)
  assert g_w[1] == 0.


def test_e_step_temperature_dual_minimiser_meets_the_bound():
  # At the optimum of the dual, KL(weights || uniform) equals epsilon.
  q, eps = jnp.array([0., 1., 2., 5.]), .3
  dual = lambda t: mpo.mpo_e_step(q, t, epsilon=eps).temperature_loss
  descend = lambda _, t: t - .05 * jax.grad(dual)(t)
  log_t = jax.jit(lambda t: jax.lax.fori_loop(0, 3000, descend, t))(
      jnp.array(0.))
  w = mpo.mpo_e_step(q, log_t).weights
  kl = jnp.sum(w * jnp.log(w * 4.))
  np.testing.assert_allclose(kl, eps, rtol=1e-2)


def test_e_step_softplus_parametrisation():
  out = mpo.mpo_e_step(jnp.zeros(3), jnp.array(0.),
                       positive_fn=jax.nn.softplus)
  np.testing.assert_allclose(out.temperature, math.log(2.), rtol=1e-6)


# M-step ---------------------------------------------------------------------


def test_m_step_kls_of_identical_policies_are_zero():
  s = _state(0)
  out = mpo.mpo_m_step(
      s['target_mean'], s['target_std'], s['target_mean'], s['target_std'],
      s['actions'], jnp.full(N, 1. / N), jnp.array(0.), jnp.array(0.))
  np.testing.assert_allclose(out.kl_mean, 0., atol=1e-6)
  np.testing.assert_allclose(out.kl_std, 0., atol=1e-6)
  np.testing.assert_allclose(out.kl_loss_mean + out.kl_loss_std, 0., atol=1e-6)
  # With KL 0 the multiplier loss is alpha * epsilon.
  np.testing.assert_allclose(out.alpha_loss_mean, 1e-3, rtol=1e-5)
  np.testing.assert_allclose(out.alpha_loss_std, 1e-5, rtol=1e-5)


def test_m_step_decoupled_kls_hand_case():
  mean, std = jnp.array([1., 0.]), jnp.array([1., 2.])
  t_mean, t_std = jnp.array([0., 0.]), jnp.array([1., 1.])
  out = mpo.mpo_m_step(mean, std, t_mean, t_std, jnp.zeros((1, 2)),
                       jnp.ones(1), jnp.array(0.), jnp.array(0.))
  # Mean part: N(mean, target_std) differs only in dim 0 by 1 (std 1).
  np.testing.assert_allclose(out.kl_mean, [.5, 0.], atol=1e-6)
  # Std part: N(target_mean, std) differs only in dim 1, scale 1 -> 2.
  np.testing.assert_allclose(out.kl_std, [0., math.log(2.) + 1 / 8 - .5],
                             atol=1e-6)
  # Policy parts: weighted NLL of a = 0 under each decoupled Gaussian.
  np.testing.assert_allclose(
      out.policy_loss_mean,
      -distributions.gaussian_log_prob(jnp.zeros(2), mean, t_std), rtol=1e-6)
  np.testing.assert_allclose(
      out.policy_loss_std,
      -distributions.gaussian_log_prob(jnp.zeros(2), t_mean, std), rtol=1e-6)


def test_m_step_decouples_the_gradients():
  s = _state(1)
  w = jax.nn.softmax(s['q_values'])

  def part(name, mean, std):
    out = mpo.mpo_m_step(mean, std, s['target_mean'], s['target_std'],
                         s['actions'], w, jnp.array(0.), jnp.array(0.))
    return getattr(out, name)

  for name, zero_arg in [('policy_loss_mean', 1), ('kl_loss_mean', 1),
                         ('policy_loss_std', 0), ('kl_loss_std', 0)]:
    grads = jax.grad(functools.partial(part, name), argnums=(0, 1))(
        s['online_mean'], s['online_std'])
    np.testing.assert_allclose(grads[zero_arg], 0.)
    assert np.abs(grads[1 - zero_arg]).sum() > 0.
  # Multiplier losses reach only the multipliers.
  g = jax.grad(lambda m: part('alpha_loss_mean', m, s['online_std']))(
      s['online_mean'])
  np.testing.assert_allclose(g, 0.)


@pytest.mark.parametrize('kl_above_bound', [True, False])
def test_m_step_multiplier_gradient_sign(kl_above_bound):
  mean = jnp.array([1., 0.]) if kl_above_bound else jnp.array([1e-3, 0.])
  grad = jax.grad(lambda a: mpo.mpo_m_step(
      mean, jnp.ones(2), jnp.zeros(2), jnp.ones(2), jnp.zeros((1, 2)),
      jnp.ones(1), a, jnp.array(0.)).alpha_loss_mean)(jnp.array(0.))
  # Descent raises alpha (grad < 0) exactly when the KL exceeds its bound.
  assert (grad < 0.) == kl_above_bound


def test_m_step_rejects_bad_shapes():
  s = _state(2)
  args = (s['online_mean'], s['online_std'], s['target_mean'],
          s['target_std'], s['actions'], jnp.ones(N) / N)
  with pytest.raises(AssertionError, match='rank'):
    mpo.mpo_m_step(*args, jnp.zeros(A), jnp.zeros(A))  # Scalars expected.
  with pytest.raises(AssertionError, match='rank'):
    mpo.mpo_m_step(*args, jnp.array(0.), jnp.array(0.), per_dimension=True)
  with pytest.raises(AssertionError, match='shape'):
    mpo.mpo_m_step(*args[:5], jnp.ones(N + 1), jnp.array(0.), jnp.array(0.))
  with pytest.raises(AssertionError, match='rank'):
    mpo.mpo_e_step(jnp.zeros((2, 3)), jnp.array(0.))


# Whole loss against rlax.mpo_loss -------------------------------------------


def _rlax_reference(params, s, per_dimension):
  """rlax.mpo_loss with the decoupled log-probs and KLs as its constraints."""
  mean, std, log_t, log_am, log_as = params
  log_probs = (
      jax.vmap(distributions.gaussian_log_prob, in_axes=(0, None, None))(
          s['actions'], mean, s['target_std']) +
      jax.vmap(distributions.gaussian_log_prob, in_axes=(0, None, None))(
          s['actions'], s['target_mean'], std))
  kl_mean = distributions.gaussian_kl(
      s['target_mean'], s['target_std'], mean, s['target_std'])
  kl_std = distributions.gaussian_kl(
      s['target_mean'], s['target_std'], s['target_mean'], std)
  if not per_dimension:
    kl_mean, kl_std = kl_mean.sum(), kl_std.sum()
  loss, _ = rlax.mpo_loss(
      log_probs, jax.lax.stop_gradient(s['q_values']),
      rlax.LagrangePenalty(log_t, .1),
      [(kl_mean, rlax.LagrangePenalty(log_am, 1e-3, per_dimension)),
       (kl_std, rlax.LagrangePenalty(log_as, 1e-5, per_dimension))],
      projection_operator=jnp.exp)
  return loss


def _ours(params, s, per_dimension):
  mean, std, log_t, log_am, log_as = params
  return mpo.gaussian_mpo_loss(
      s['q_values'], s['actions'], mean, std, s['target_mean'],
      s['target_std'], log_t, log_am, log_as,
      per_dimension=per_dimension).loss


@pytest.mark.parametrize('per_dimension', [False, True],
                         ids=['summed_kl', 'per_dimension_kl'])
def test_gaussian_mpo_loss_and_gradients_match_rlax(per_dimension):
  alpha_shape = (A,) if per_dimension else ()
  for seed in range(3):
    s = _state(seed)
    params = (s['online_mean'], s['online_std'], s['log_temperature'],
              jnp.full(alpha_shape, .5), jnp.full(alpha_shape, -1.))
    ours, g_ours = jax.jit(jax.value_and_grad(_ours), static_argnums=2)(
        params, s, per_dimension)
    theirs, g_theirs = jax.value_and_grad(_rlax_reference)(
        params, s, per_dimension)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_ours, g_theirs):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_gaussian_mpo_loss_vmaps_over_states():
  states = [_state(seed) for seed in range(3)]
  batch = jax.tree.map(lambda *x: jnp.stack(x), *states)
  keys = ('q_values', 'actions', 'online_mean', 'online_std', 'target_mean',
          'target_std', 'log_temperature')
  fn = lambda *a: mpo.gaussian_mpo_loss(*a, jnp.array(0.), jnp.array(0.))
  out = jax.jit(jax.vmap(fn))(*(batch[k] for k in keys))
  for i, s in enumerate(states):
    single = fn(*(s[k] for k in keys))
    np.testing.assert_allclose(out.loss[i], single.loss, rtol=1e-5)
    np.testing.assert_allclose(out.e_step.weights[i], single.e_step.weights,
                               rtol=1e-5)
  assert out.m_step.kl_mean.shape == (3, A)


# Issue 14, item 13: small temperatures under jit(vmap) ----------------------


def test_e_step_small_temperature_under_jit_vmap_is_finite():
  # max|q| / eta ~ 3e9: XLA used to fuse q * exp(-log_eta) - max into one FMA
  # that rounded differently from the max, so the largest shifted logit was
  # far from 0 and exp overflowed: weights [nan, 0], dual inf.
  q = jnp.array([[28.52589, -33.968567]] * 2)
  log_eta = jnp.log(jnp.full((2,), 1e-8, jnp.float32))
  out = jax.jit(jax.vmap(mpo.mpo_e_step))(q, log_eta)
  np.testing.assert_array_equal(out.weights, [[1., 0.], [1., 0.]])
  # eta * eps + eta * log(1/2 (exp(q_max / eta) + 0))
  #   = q_max + eta * (eps - log 2).
  np.testing.assert_allclose(out.temperature_loss, 28.52589, rtol=1e-6)
  eager = mpo.mpo_e_step(q[0], log_eta[0])
  np.testing.assert_allclose(out.temperature_loss[0], eager.temperature_loss,
                             rtol=1e-6)


@pytest.mark.parametrize('eta', [1e-10, 1e-8, 1e-6, 1e-3])
def test_e_step_tiny_temperatures_give_finite_weights_and_dual(eta):
  rng = np.random.default_rng(7)
  q = jnp.asarray(50. * rng.normal(size=(16, N)).astype(np.float32))
  log_eta = jnp.log(jnp.full((16,), eta, jnp.float32))
  out = _e_step_batched(q, log_eta)
  assert np.all(np.isfinite(out.weights))
  np.testing.assert_allclose(out.weights.sum(-1), 1., rtol=1e-6)
  # At such temperatures the weights put (almost) all mass on the best action
  # and the dual is max q up to eta * (epsilon + log(1/N sum_i ...)), a term
  # between eta * (0.1 - log N) and eta * 0.1.
  np.testing.assert_array_equal(np.argmax(out.weights, -1), np.argmax(q, -1))
  np.testing.assert_allclose(out.temperature_loss, q.max(-1), rtol=1e-6,
                             atol=2. * eta + 1e-5)
  g = jax.grad(lambda t: _e_step_batched(q, t).temperature_loss.sum())(log_eta)
  assert np.all(np.isfinite(g))


_e_step_batched = jax.jit(jax.vmap(mpo.mpo_e_step))
