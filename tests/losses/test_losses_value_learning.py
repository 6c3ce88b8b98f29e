"""Tests for roxie.losses.value_learning."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from roxie.losses import value_learning


def test_td_target_hand_case():
  out = jax.jit(value_learning.td_target)(
      jnp.array(1.), jnp.array(.9), jnp.array(2.))
  np.testing.assert_allclose(out, 1. + .9 * 2.)


def test_td_target_matches_rlax_td_learning():
  rng = np.random.default_rng(0)
  v_tm1, r_t, v_t = rng.normal(size=(3, 7)).astype(np.float32)
  d_t = rng.uniform(size=7).astype(np.float32)
  target = jax.vmap(value_learning.td_target)(r_t, d_t, v_t)
  np.testing.assert_allclose(
      target - v_tm1, jax.vmap(rlax.td_learning)(v_tm1, r_t, d_t, v_t),
      rtol=1e-5, atol=1e-6)


def test_td_target_stop_gradient():
  def f(v, stop):
    return value_learning.td_target(
        jnp.array(1.), jnp.array(.9), v, stop_target_gradients=stop)
  assert jax.grad(f)(jnp.array(2.), True) == 0.
  np.testing.assert_allclose(jax.grad(f)(jnp.array(2.), False), .9)


def test_td_target_rejects_vectors():
  with pytest.raises(AssertionError, match='rank'):
    value_learning.td_target(jnp.ones(3), jnp.ones(()), jnp.ones(()))


@pytest.mark.parametrize(
    'weight, expected',
    [(1., [1., -2., 3.]), (0., [2., 5., 3.]), (.75, [1.25, -.25, 3.])],
    ids=['min', 'max', 'soft'])
def test_clipped_double_q_hand_cases(weight, expected):
  q1 = jnp.array([1., 5., 3.])
  q2 = jnp.array([2., -2., 3.])
  out = jax.jit(functools.partial(value_learning.clipped_double_q,
                                  weight=weight))(q1, q2)
  np.testing.assert_allclose(out, expected)


def test_clipped_double_q_gradient_goes_to_the_smaller_head():
  g1, g2 = jax.grad(value_learning.clipped_double_q, argnums=(0, 1))(
      jnp.array(1.), jnp.array(2.))
  assert (g1, g2) == (1., 0.)


def test_clipped_double_q_rejects_mismatched_shapes():
  with pytest.raises(AssertionError, match='shape'):
    value_learning.clipped_double_q(jnp.ones(3), jnp.ones(2))


def test_twin_q_target_hand_case_and_vmap():
  r = jnp.array([1., 0.])
  d = jnp.array([.9, 0.])  # The second transition terminated.
  q1 = jnp.array([4., 7.])
  q2 = jnp.array([3., 8.])
  out = jax.jit(jax.vmap(value_learning.twin_q_target))(r, d, q1, q2)
  np.testing.assert_allclose(out, [1. + .9 * 3., 0.])
  soft = jax.vmap(functools.partial(value_learning.twin_q_target, weight=.5))(
      r, d, q1, q2)
  np.testing.assert_allclose(soft, [1. + .9 * 3.5, 0.])


def test_twin_q_target_stops_gradients():
  grads = jax.grad(value_learning.twin_q_target, argnums=(2, 3))(
      jnp.array(1.), jnp.array(.9), jnp.array(4.), jnp.array(3.))
  assert grads == (0., 0.)


def test_twin_q_target_rejects_vectors():
  with pytest.raises(AssertionError, match='rank'):
    value_learning.twin_q_target(
        jnp.ones(()), jnp.ones(()), jnp.ones(2), jnp.ones(2))
