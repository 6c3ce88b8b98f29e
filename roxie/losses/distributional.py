"""Categorical (C51-style) distributional critics on a fixed support.

A critic outputs logits over K fixed atoms. The Bellman target shifts and
scales the atoms by the reward and discount and projects the result back onto
the support (`rlax.categorical_l2_project`); the critic is trained with the
cross-entropy to that projected distribution. For twin distributional critics
(TD4-style) the target distribution is the one of the head with the lower mean.
Functions take one unbatched example; batch with `jax.vmap`.

Argument convention: the per-example arrays come first, positionally, in time
order (logits or probabilities, then `r_t`, `discount_t`, `probs_t`); the fixed
support `atoms` is keyword-only in every function. Logits and atoms are both
[K] floats, so a positional swap would pass every shape check and silently
compute nonsense; naming `atoms` makes that swap impossible. To batch with a
shared support, close over it: `jax.vmap(functools.partial(f, atoms=atoms))`.
"""

import chex
import jax
import jax.numpy as jnp
import rlax

Array = chex.Array
Numeric = chex.Numeric


def categorical_mean(x: Array, *, atoms: Array,
                     from_logits: bool = True) -> Array:
  """Computes the mean of a categorical distribution over `atoms`.

  Args:
    x: [K] float logits (if `from_logits`) or probabilities.
    atoms: [K] float support (keyword-only).
    from_logits: whether `x` holds logits rather than probabilities.

  Returns:
    [] float mean, sum_k p_k atoms_k.
  """
  chex.assert_rank([x, atoms], 1)
  chex.assert_type([x, atoms], float)
  chex.assert_equal_shape([x, atoms])
  probs = jax.nn.softmax(x) if from_logits else x
  return jnp.sum(probs * atoms)


def categorical_td_target(
    r_t: Numeric,
    discount_t: Numeric,
    probs_t: Array,
    *,
    atoms: Array,
    stop_target_gradients: bool = True,
) -> Array:
  """Projects the distributional Bellman target onto the fixed support.

  The next-state distribution puts mass `probs_t[k]` on `r_t + discount_t *
  atoms[k]`; this function spreads each mass over the two neighbouring atoms
  (the projection that minimises the Cramer distance), clipping to the
  support's range. After a termination (discount 0) all mass lands on r_t.

  See "A Distributional Perspective on Reinforcement Learning", Bellemare et
  al., 2017 (https://arxiv.org/abs/1707.06887).

  Args:
    r_t: [] float reward (or folded n-step reward).
    discount_t: [] float discount, 0 after a termination.
    probs_t: [K] float probabilities of the next-state distribution.
    atoms: [K] float support, increasing (keyword-only).
    stop_target_gradients: whether to stop gradients through the target.

  Returns:
    [K] float target probabilities on `atoms`.
  """
  chex.assert_rank([atoms, r_t, discount_t, probs_t], [1, 0, 0, 1])
  chex.assert_type([atoms, r_t, discount_t, probs_t], float)
  chex.assert_equal_shape([atoms, probs_t])
  target = rlax.categorical_l2_project(r_t + discount_t * atoms, probs_t, atoms)
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def categorical_td_loss(
    logits_tm1: Array,
    r_t: Numeric,
    discount_t: Numeric,
    probs_t: Array,
    *,
    atoms: Array,
    stop_target_gradients: bool = True,
) -> Array:
  """Cross-entropy of a categorical critic to its projected Bellman target.

  Equals `rlax.categorical_td_learning` with `v_logits_t = log(probs_t)` and
  the same atoms at both times; taking probabilities lets the caller build
  the target from any head (e.g. `twin_categorical_target`).

  See "A Distributional Perspective on Reinforcement Learning", Bellemare et
  al., 2017 (https://arxiv.org/abs/1707.06887).

  Args:
    logits_tm1: [K] float logits of the critic being trained.
    r_t: [] float reward (or folded n-step reward).
    discount_t: [] float discount, 0 after a termination.
    probs_t: [K] float target probabilities at the next state.
    atoms: [K] float support shared by both times (keyword-only).
    stop_target_gradients: whether to stop gradients through the target.

  Returns:
    [] float cross-entropy loss.
  """
  chex.assert_rank([logits_tm1, atoms, r_t, discount_t, probs_t],
                   [1, 1, 0, 0, 1])
  chex.assert_type([logits_tm1, atoms, r_t, discount_t, probs_t], float)
  chex.assert_equal_shape([logits_tm1, atoms, probs_t])
  target = categorical_td_target(
      r_t, discount_t, probs_t, atoms=atoms,
      stop_target_gradients=stop_target_gradients)
  return -jnp.sum(target * jax.nn.log_softmax(logits_tm1))


def twin_categorical_target(
    logits1_t: Array,
    logits2_t: Array,
    *,
    atoms: Array,
    blend: Numeric = 0.,
    stop_target_gradients: bool = True,
) -> Array:
  """Picks the next-state distribution of the twin head with the lower mean.

  The distributional analogue of clipped double Q: rather than a per-atom
  minimum (which is not a distribution), the whole distribution of the more
  pessimistic head is used, `(1 - blend) * p_low + blend * p_high`. `blend = 0`
  is pure selection; `blend = 0.5` averages the heads. Ties select head 1.
  Feed the result to `categorical_td_loss` as `probs_t`.

  See "Addressing Function Approximation Error in Actor-Critic Methods",
  Fujimoto et al., 2018 (https://arxiv.org/abs/1802.09477), and for the
  categorical critic "Distributed Distributional Deterministic Policy
  Gradients", Barth-Maron et al., 2018 (https://arxiv.org/abs/1804.08617).

  Args:
    logits1_t: [K] float logits of the first target head.
    logits2_t: [K] float logits of the second target head.
    atoms: [K] float support shared by both heads (keyword-only).
    blend: weight in [0, 1] of the higher-mean head's distribution.
    stop_target_gradients: whether to stop gradients through the target.

  Returns:
    [K] float target probabilities on `atoms`.
  """
  chex.assert_rank([logits1_t, logits2_t, atoms, blend], [1, 1, 1, 0])
  chex.assert_type([logits1_t, logits2_t, atoms], float)
  chex.assert_equal_shape([logits1_t, logits2_t, atoms])
  probs1 = jax.nn.softmax(logits1_t)
  probs2 = jax.nn.softmax(logits2_t)
  first_is_low = (categorical_mean(probs1, atoms=atoms, from_logits=False) <=
                  categorical_mean(probs2, atoms=atoms, from_logits=False))
  low = jnp.where(first_is_low, probs1, probs2)
  high = jnp.where(first_is_low, probs2, probs1)
  target = (1. - blend) * low + blend * high
  return jax.lax.stop_gradient(target) if stop_target_gradients else target
