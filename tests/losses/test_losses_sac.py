"""Tests for roxie.losses.sac."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie.losses import sac
from roxie.losses import value_learning


def test_critic_target_hand_case_and_vmap():
  r = jnp.array([1., 2.])
  d = jnp.array([.9, 0.])  # The second one terminated.
  q = jnp.array([3., 50.])
  log_prob = jnp.array([-1., 4.])
  out = jax.jit(jax.vmap(functools.partial(sac.sac_critic_target, alpha=.2)))(
      r, d, q, log_prob)
  np.testing.assert_allclose(out, [1. + .9 * (3. + .2), 2.], rtol=1e-6)


def test_critic_target_alpha_zero_is_td_target():
  args = (jnp.array(.5), jnp.array(.9), jnp.array(2.), jnp.array(-3.))
  np.testing.assert_allclose(
      sac.sac_critic_target(*args, alpha=0.),
      value_learning.td_target(*args[:3]))


def test_critic_target_stops_all_gradients():
  grads = jax.grad(
      lambda q, lp, a: sac.sac_critic_target(jnp.array(1.), jnp.array(.9), q,
                                             lp, alpha=a),
      argnums=(0, 1, 2))(jnp.array(2.), jnp.array(-1.), jnp.array(.3))
  assert grads == (0., 0., 0.)


def test_actor_loss_value_and_gradients():
  loss_fn = functools.partial(sac.sac_actor_loss)
  np.testing.assert_allclose(
      loss_fn(jnp.array(3.), jnp.array(-2.), alpha=jnp.array(.5)), -4.)
  g_q, g_lp, g_alpha = jax.grad(
      lambda q, lp, a: loss_fn(q, lp, alpha=a), argnums=(0, 1, 2))(
          jnp.array(3.), jnp.array(-2.), jnp.array(.5))
  assert (g_q, g_lp, g_alpha) == (-1., .5, 0.)


@pytest.mark.parametrize('log_prob, alpha_grows', [(5., True), (-1., False)],
                         ids=['entropy_too_low', 'entropy_too_high'])
def test_temperature_loss_moves_alpha_toward_target(log_prob, alpha_grows):
  # Target entropy -2; entropy estimate is -log_prob.
  loss = functools.partial(sac.sac_temperature_loss, target_entropy=-2.)
  g = jax.grad(loss)(jnp.log(.1), jnp.array(log_prob))
  assert (g < 0.) == alpha_grows  # Descent raises alpha iff g < 0.
  np.testing.assert_allclose(loss(jnp.log(.1), jnp.array(log_prob)),
                             .1 * (-log_prob + 2.), rtol=1e-6)


def test_temperature_loss_has_no_gradient_to_log_prob_and_vmaps():
  loss = functools.partial(sac.sac_temperature_loss, target_entropy=-3.)
  assert jax.grad(loss, argnums=1)(jnp.array(0.), jnp.array(1.)) == 0.
  out = jax.jit(jax.vmap(loss, in_axes=(None, 0)))(
      jnp.array(0.), jnp.array([1., 2.]))
  np.testing.assert_allclose(out, [2., 1.])


@pytest.mark.parametrize(
    'fn, args, kwargs',
    [(sac.sac_critic_target, (jnp.ones(()),) * 3 + (jnp.ones(2),),
      dict(alpha=.1)),
     (sac.sac_actor_loss, (jnp.ones(2), jnp.ones(2)), dict(alpha=.1)),
     (sac.sac_temperature_loss, (jnp.ones(()), jnp.ones(3)),
      dict(target_entropy=-1.))],
    ids=['critic', 'actor', 'temperature'])
def test_rank_checks(fn, args, kwargs):
  with pytest.raises(AssertionError, match='rank'):
    fn(*args, **kwargs)
