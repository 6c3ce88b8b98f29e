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


# Ensembles of critics -------------------------------------------------------


def test_ensemble_min_q_of_two_is_clipped_double_q():
  rng = np.random.default_rng(1)
  q1, q2 = rng.normal(size=(2, 16)).astype(np.float32)
  ours = jax.jit(jax.vmap(value_learning.ensemble_min_q))(
      jnp.stack([q1, q2], -1))
  np.testing.assert_array_equal(ours, value_learning.clipped_double_q(q1, q2))


def test_ensemble_q_target_of_two_is_twin_q_target():
  rng = np.random.default_rng(2)
  r, q1, q2 = rng.normal(size=(3, 16)).astype(np.float32)
  d = np.where(rng.random(16) < .3, 0., .99).astype(np.float32)
  ours = jax.jit(jax.vmap(value_learning.ensemble_q_target))(
      r, d, jnp.stack([q1, q2], -1))
  # Equal up to rounding (jit may fuse the multiply-add differently).
  np.testing.assert_allclose(
      ours, jax.vmap(value_learning.twin_q_target)(r, d, q1, q2), rtol=1e-6,
      atol=1e-7)


def test_ensemble_hand_cases():
  q = jnp.array([3., -1., 2., 5.])
  assert value_learning.ensemble_min_q(q) == -1.
  assert value_learning.ensemble_min_q(jnp.array([4.])) == 4.  # N = 1.
  # Subset of all N: no key needed, the plain minimum.
  assert value_learning.ensemble_min_q(q, subset_size=4) == -1.
  out = jax.jit(value_learning.ensemble_q_target)(
      jnp.array(1.), jnp.array(.9), q)
  np.testing.assert_allclose(out, 1. + .9 * -1., rtol=1e-6)
  # Terminated: no bootstrap at all.
  assert value_learning.ensemble_q_target(
      jnp.array(1.), jnp.array(0.), q) == 1.


def test_random_subset_has_the_given_size_and_excludes_every_member():
  # Distinct values: the minimum identifies the lowest member drawn. With
  # M = 2 of N = 4 the minimum is q[0] whenever member 0 is drawn
  # (probability 1/2), and never the highest member q[3]. Over keys every
  # member is sometimes excluded, e.g. member 0 (then the minimum is > q[0]).
  q = jnp.array([0., 1., 2., 3.])
  keys = jax.random.split(jax.random.PRNGKey(0), 400)
  mins = jax.jit(jax.vmap(functools.partial(
      value_learning.ensemble_min_q, q, subset_size=2)))(key=keys)
  mins = np.asarray(mins)
  assert set(np.unique(mins)) == {0., 1., 2.}
  # P(min = k) = C(3 - k, 1) / C(4, 2): 3/6, 2/6, 1/6.
  freq = np.array([np.mean(mins == k) for k in range(3)])
  np.testing.assert_allclose(freq, [.5, 1 / 3, 1 / 6], atol=.07)
  # The subset really has M members: with M = 3 the minimum is 0 or 1 only,
  # and 1 exactly when member 0 is the one left out (probability 1/4).
  mins3 = jax.vmap(functools.partial(
      value_learning.ensemble_min_q, q, subset_size=3))(key=keys)
  assert set(np.unique(np.asarray(mins3))) == {0., 1.}
  np.testing.assert_allclose(np.mean(np.asarray(mins3) == 1.), .25, atol=.06)


def test_every_member_is_sometimes_excluded():
  # Put a huge value at one member at a time: with M = 1 the minimum is that
  # member's value exactly when it is the one drawn, so each member is drawn
  # sometimes and excluded sometimes.
  keys = jax.random.split(jax.random.PRNGKey(1), 200)
  for member in range(5):
    q = jnp.zeros(5).at[member].set(-1.)
    mins = jax.vmap(functools.partial(value_learning.ensemble_min_q, q,
                                      subset_size=1))(key=keys)
    drawn = np.mean(np.asarray(mins) == -1.)
    assert 0. < drawn < 1., (member, drawn)


def test_ensemble_subset_is_shared_with_an_unbatched_key():
  # REDQ draws one subset per update: one key, in_axes=None, same members.
  q = jnp.array([[0., 1., 2., 3.], [10., 11., 12., 13.]])
  key = jax.random.PRNGKey(3)
  mins = jax.vmap(
      lambda q_t: value_learning.ensemble_min_q(q_t, subset_size=2, key=key))(q)
  assert mins[1] - mins[0] == 10.


def test_ensemble_gradient_goes_to_the_minimum_and_target_stops_it():
  q = jnp.array([3., -1., 2.])
  g = jax.grad(value_learning.ensemble_min_q)(q)
  np.testing.assert_array_equal(g, [0., 1., 0.])
  g_target = jax.grad(value_learning.ensemble_q_target, argnums=2)(
      jnp.array(1.), jnp.array(.9), q)
  np.testing.assert_array_equal(g_target, 0.)
  g_free = jax.grad(functools.partial(value_learning.ensemble_q_target,
                                      stop_target_gradients=False),
                    argnums=2)(jnp.array(1.), jnp.array(.9), q)
  np.testing.assert_allclose(g_free, [0., .9, 0.])


def test_ensemble_rejects_bad_inputs():
  with pytest.raises(AssertionError, match='rank'):
    value_learning.ensemble_min_q(jnp.ones((4, 2)))
  with pytest.raises(AssertionError, match='rank'):
    value_learning.ensemble_q_target(jnp.ones(2), jnp.ones(()), jnp.ones(3))
  with pytest.raises(AssertionError, match='rank'):
    value_learning.ensemble_q_target(jnp.ones(()), jnp.ones(()), jnp.ones(()))
  with pytest.raises(AssertionError, match='type'):
    value_learning.ensemble_min_q(jnp.ones(3, jnp.int32))
  with pytest.raises(ValueError, match='subset_size'):
    value_learning.ensemble_min_q(jnp.ones(3), subset_size=4,
                                  key=jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match='subset_size'):
    value_learning.ensemble_min_q(jnp.ones(3), subset_size=0,
                                  key=jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match='key'):
    value_learning.ensemble_min_q(jnp.ones(3), subset_size=2)
