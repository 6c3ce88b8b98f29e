"""Tests for roxie.losses.dpg."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from roxie.losses import dpg


def test_dpg_loss_matches_rlax_summed_and_under_vmap():
  rng = np.random.default_rng(0)
  a, dqda = rng.normal(size=(2, 4, 3)).astype(np.float32)
  ours = jax.jit(jax.vmap(dpg.dpg_loss))(a, dqda)
  theirs = jax.vmap(rlax.dpg_loss)(a, dqda).sum(-1)
  np.testing.assert_allclose(ours, theirs, rtol=1e-6)
  np.testing.assert_allclose(ours, .5 * (dqda ** 2).sum(-1), rtol=1e-5)


def test_dpg_loss_gradient_is_minus_dqda():
  a = jnp.array([.1, -.2])
  dqda = jnp.array([3., 4.])
  np.testing.assert_allclose(jax.grad(dpg.dpg_loss)(a, dqda), -dqda)
  # Norm 5 clipped to 1.
  clipped = jax.grad(functools.partial(dpg.dpg_loss, dqda_clipping=1.))(a, dqda)
  np.testing.assert_allclose(clipped, -dqda / 5., rtol=1e-6)
  # Without stopping, target and action cancel: no gradient at all.
  free = jax.grad(functools.partial(dpg.dpg_loss, stop_action_gradients=False))
  np.testing.assert_allclose(free(a, dqda), 0.)


def test_dpg_actor_loss_gradient_equals_dpg_loss_gradient():
  # A toy critic Q(a) = -||a - 1||^2 and a linear actor a = w.
  def critic(a):
    return -jnp.sum((a - 1.) ** 2)

  w = jnp.array([.5, -.5, 2.])
  g_direct = jax.grad(lambda w: dpg.dpg_actor_loss(critic(w)))(w)
  dqda = jax.grad(critic)(w)
  g_dpg = jax.grad(lambda w: dpg.dpg_loss(w, dqda))(w)
  np.testing.assert_allclose(g_direct, g_dpg, rtol=1e-6)


@pytest.mark.parametrize(
    'pre_tanh, threshold, expected',
    [([0., 1.9, -1.9], 2., 0.), ([3., -2.5, 0.], 2., 1. + .25),
     ([1., -1.], .5, .5)],
    ids=['inside', 'outside', 'small_threshold'])
def test_saturation_penalty_hand_cases(pre_tanh, threshold, expected):
  out = jax.jit(functools.partial(dpg.saturation_penalty, threshold=threshold))(
      jnp.array(pre_tanh))
  np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_saturation_penalty_gradient_points_back_inside():
  g = jax.grad(dpg.saturation_penalty)(jnp.array([3., -3., 1.]))
  np.testing.assert_allclose(g, [2., -2., 0.])


def test_dpg_actor_loss_with_penalty_and_vmap():
  q = jnp.array([1., -2.])
  pre = jnp.array([[0., 3.], [0., 0.]])
  out = jax.jit(jax.vmap(functools.partial(dpg.dpg_actor_loss,
                                           saturation_weight=.1)))(q, pre)
  np.testing.assert_allclose(out, [-1. + .1, 2.], rtol=1e-6)
  np.testing.assert_allclose(dpg.dpg_actor_loss(jnp.array(1.5)), -1.5)


@pytest.mark.parametrize(
    'fn, args',
    [(dpg.dpg_loss, (jnp.ones((2, 3)), jnp.ones((2, 3)))),
     (dpg.dpg_actor_loss, (jnp.ones(3),)),
     (dpg.saturation_penalty, (jnp.ones(()),))],
    ids=['dpg_loss', 'actor_loss', 'penalty'])
def test_rank_checks(fn, args):
  with pytest.raises(AssertionError, match='rank'):
    fn(*args)


@pytest.mark.parametrize('clipping', [None, .5, 100.])
def test_dpg_loss_and_gradient_match_rlax_with_clipping(clipping):
  # roxie writes the loss itself (to keep rlax out of the import).
  rng = np.random.default_rng(1)
  a, dqda = rng.normal(size=(2, 5, 3)).astype(np.float32)
  dqda[0] = 0.  # A zero gradient: the norm clipping must not divide by 0.
  ours = functools.partial(dpg.dpg_loss, dqda_clipping=clipping)
  theirs = lambda a, q: rlax.dpg_loss(a, q, dqda_clipping=clipping).sum()
  np.testing.assert_allclose(jax.jit(jax.vmap(ours))(a, dqda),
                             jax.vmap(theirs)(a, dqda), rtol=1e-5, atol=1e-7)
  g_ours = jax.vmap(jax.grad(ours))(a, dqda)
  np.testing.assert_allclose(g_ours, jax.vmap(jax.grad(theirs))(a, dqda),
                             rtol=1e-5, atol=1e-7)
  assert np.all(np.isfinite(g_ours))
