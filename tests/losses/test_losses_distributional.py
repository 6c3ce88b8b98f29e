"""Tests for roxie.losses.distributional."""

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from roxie.losses import distributional

ATOMS = jnp.linspace(-2., 2., 5)  # -2, -1, 0, 1, 2.


def test_categorical_mean_hand_case():
  probs = jnp.array([0., .5, 0., 0., .5])
  np.testing.assert_allclose(
      distributional.categorical_mean(probs, atoms=ATOMS, from_logits=False),
      .5)
  logits = jnp.log(jnp.array([.1, .2, .3, .2, .2]))
  np.testing.assert_allclose(
      jax.jit(distributional.categorical_mean)(logits, atoms=ATOMS),
      -.2 - .2 + 0. + .2 + .4, rtol=1e-5, atol=1e-6)


def test_categorical_mean_rejects_mismatched_support():
  with pytest.raises(AssertionError, match='shape'):
    distributional.categorical_mean(jnp.zeros(4), atoms=ATOMS)


@pytest.mark.parametrize(
    'r, d, expected',
    [
        # Terminal: all mass at r = 0.5, split between atoms 0 and 1.
        (.5, 0., [0., 0., .5, .5, 0.]),
        # Mass on 1 and 2 shifted by 1 and halved: 1.5 and 2.0.
        (1., .5, [0., 0., 0., .25, .75]),
        # Beyond the support: clipped to the top atom.
        (5., 1., [0., 0., 0., 0., 1.]),
    ],
    ids=['terminal', 'shift_scale', 'clip'])
def test_categorical_td_target_hand_cases(r, d, expected):
  probs_t = jnp.array([0., 0., 0., .5, .5])
  out = jax.jit(distributional.categorical_td_target)(
      jnp.array(r), jnp.array(d), probs_t, atoms=ATOMS)
  np.testing.assert_allclose(out, expected, atol=1e-6)


def _random_logits(rng, *shape):
  return jnp.asarray(rng.normal(size=shape + (5,)).astype(np.float32))


def test_categorical_td_loss_matches_rlax():
  rng = np.random.default_rng(0)
  logits_tm1, logits_t = _random_logits(rng, 2, 6)
  r = jnp.asarray(rng.normal(size=6).astype(np.float32))
  d = jnp.asarray(rng.uniform(size=6).astype(np.float32))
  atoms = jnp.broadcast_to(ATOMS, (6, 5))
  ours = jax.jit(jax.vmap(distributional.categorical_td_loss))(
      logits_tm1, r, d, jax.nn.softmax(logits_t), atoms=atoms)
  theirs = jax.vmap(rlax.categorical_td_learning)(
      atoms, logits_tm1, r, d, atoms, logits_t)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_categorical_td_loss_gradient_is_softmax_minus_target():
  logits_tm1 = jnp.array([.1, -.3, .2, 0., .5])
  probs_t = jax.nn.softmax(jnp.array([1., 0., -1., 0., 2.]))
  r, d = jnp.array(.3), jnp.array(.9)
  grad = jax.grad(distributional.categorical_td_loss)(
      logits_tm1, r, d, probs_t, atoms=ATOMS)
  target = distributional.categorical_td_target(r, d, probs_t, atoms=ATOMS)
  np.testing.assert_allclose(grad, jax.nn.softmax(logits_tm1) - target,
                             atol=1e-6)
  # The target carries no gradient by default.
  g_probs = jax.grad(distributional.categorical_td_loss, argnums=3)(
      logits_tm1, r, d, probs_t, atoms=ATOMS)
  np.testing.assert_allclose(g_probs, 0.)


def test_categorical_td_loss_rejects_bad_ranks():
  with pytest.raises(AssertionError, match='rank'):
    distributional.categorical_td_loss(
        jnp.zeros(5), jnp.zeros(2), jnp.ones(()), jnp.ones(5) / 5,
        atoms=ATOMS)


def test_twin_target_with_equal_heads_is_that_head():
  logits = jnp.array([.3, -.1, .4, 1., -2.])
  out = jax.jit(distributional.twin_categorical_target)(
      logits, logits, atoms=ATOMS)
  np.testing.assert_allclose(out, jax.nn.softmax(logits), rtol=1e-6)
  blended = distributional.twin_categorical_target(
      logits, logits, atoms=ATOMS, blend=.3)
  np.testing.assert_allclose(blended, jax.nn.softmax(logits), rtol=1e-6)


def test_twin_target_picks_the_lower_mean_head_not_per_atom_min():
  low = jnp.log(jnp.array([.4, .3, .1, .1, .1]))  # Mean -0.8.
  high = jnp.log(jnp.array([.1, .1, .1, .3, .4]))  # Mean 0.8.
  for first, second in [(low, high), (high, low)]:
    out = distributional.twin_categorical_target(first, second, atoms=ATOMS)
    np.testing.assert_allclose(out, jax.nn.softmax(low), rtol=1e-6)
    np.testing.assert_allclose(jnp.sum(out), 1., rtol=1e-6)
  half = distributional.twin_categorical_target(high, low, atoms=ATOMS,
                                                blend=.25)
  np.testing.assert_allclose(
      half, .75 * jax.nn.softmax(low) + .25 * jax.nn.softmax(high), rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_twin_target_vmap_matches_numpy_selection(seed):
  rng = np.random.default_rng(seed)
  l1, l2 = np.asarray(_random_logits(rng, 2, 4))
  out = _twin_batched(l1, l2, atoms=jnp.broadcast_to(ATOMS, (4, 5)))
  p1 = np.exp(l1) / np.exp(l1).sum(-1, keepdims=True)
  p2 = np.exp(l2) / np.exp(l2).sum(-1, keepdims=True)
  atoms = np.asarray(ATOMS)
  pick1 = (p1 @ atoms <= p2 @ atoms)[:, None]
  np.testing.assert_allclose(out, np.where(pick1, p1, p2), rtol=1e-5,
                             atol=1e-6)
  # The selected target's mean is never above either head's mean.
  means = out @ atoms
  assert np.all(means <= np.minimum(p1 @ atoms, p2 @ atoms) + 1e-5)


_twin_batched = jax.jit(jax.vmap(distributional.twin_categorical_target))


def test_twin_target_composes_with_td_loss_under_vmap():
  rng = np.random.default_rng(3)
  l_tm1, l1, l2 = _random_logits(rng, 3, 2)
  atoms = jnp.broadcast_to(ATOMS, (2, 5))
  r, d = jnp.array([.1, -.2]), jnp.array([.9, 0.])

  def loss(l_tm1, l1, l2, atoms, r, d):
    probs_t = distributional.twin_categorical_target(l1, l2, atoms=atoms)
    return distributional.categorical_td_loss(l_tm1, r, d, probs_t,
                                              atoms=atoms)

  out = jax.jit(jax.vmap(loss))(l_tm1, l1, l2, atoms, r, d)
  assert out.shape == (2,) and np.all(np.isfinite(out))


def test_twin_target_stop_gradient_and_rank_check():
  logits = jnp.array([.3, -.1, .4, 1., -2.])
  high = jnp.array([-5., -5., -5., -5., 5.])  # Clearly the higher mean.

  def target_mean(l, stop):
    return jnp.sum(ATOMS * distributional.twin_categorical_target(
        l, high, atoms=ATOMS, stop_target_gradients=stop))

  np.testing.assert_allclose(jax.grad(target_mean)(logits, True), 0.)
  # Unblocking the gradient must produce one (the selected head is `l`).
  assert np.abs(jax.grad(target_mean)(logits, False)).sum() > 0.
  with pytest.raises(AssertionError, match='rank'):
    distributional.twin_categorical_target(
        jnp.zeros((2, 5)), jnp.zeros((2, 5)), atoms=ATOMS)


@pytest.mark.parametrize('fn, args', [
    (distributional.categorical_mean, (jnp.zeros(5), ATOMS)),
    (distributional.categorical_td_target,
     (ATOMS, jnp.array(.1), jnp.array(.9), jnp.ones(5) / 5)),
    (distributional.categorical_td_loss,
     (jnp.zeros(5), ATOMS, jnp.array(.1), jnp.array(.9), jnp.ones(5) / 5)),
    (distributional.twin_categorical_target,
     (jnp.zeros(5), jnp.zeros(5), ATOMS)),
], ids=['mean', 'td_target', 'td_loss', 'twin_target'])
def test_atoms_cannot_be_passed_positionally(fn, args):
  # Logits and atoms are both [K] floats: a positional swap used to pass every
  # check. With `atoms` keyword-only, passing it by position is a TypeError.
  with pytest.raises(TypeError):
    fn(*args)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_projection_matches_rlax_on_uneven_supports(seed):
  # roxie writes the Cramer projection itself (to keep rlax out of the
  # import); rlax.categorical_l2_project is the reference, on uneven atoms and
  # with masses beyond both ends of the support.
  rng = np.random.default_rng(seed)
  atoms = jnp.asarray(np.sort(rng.uniform(-3., 3., 6)).astype(np.float32))
  values = jnp.asarray(rng.uniform(-5., 5., 6).astype(np.float32))
  probs = jax.nn.softmax(jnp.asarray(rng.normal(size=6).astype(np.float32)))
  ours = jax.jit(distributional._project_onto_support)(values, probs, atoms)
  theirs = rlax.categorical_l2_project(values, probs, atoms)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(jnp.sum(ours), 1., rtol=1e-5)
