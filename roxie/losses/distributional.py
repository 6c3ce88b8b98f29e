"""Categorical (C51-style) distributional critics on a fixed support.

A critic outputs logits over K fixed atoms. The Bellman target shifts and
scales the atoms by the reward and discount and projects the result back onto
the support (as `rlax.categorical_l2_project` does); the critic is trained
with the cross-entropy to that projected distribution. For twin distributional
critics (TD4-style) the target distribution is the one of the head with the
lower mean. Functions take one unbatched example; batch with `jax.vmap`.

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

from roxie.losses import _checks

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
  _checks.check_rank('categorical_mean', 1, x=x, atoms=atoms)
  _checks.check_dtype('categorical_mean', float, x=x, atoms=atoms)
  _checks.check_same_shape('categorical_mean', x=x, atoms=atoms)
  probs = jax.nn.softmax(x) if from_logits else x
  return jnp.sum(probs * atoms)


def _project_onto_support(values: Array, probs: Array, atoms: Array) -> Array:
  """Projects masses `probs` at `values` onto `atoms` (Cramer projection).

  Each mass is clipped into [atoms[0], atoms[-1]] and split between the two
  atoms around it in proportion to closeness: atom i receives
  probs[j] * max(0, 1 - |values[j] - atoms[i]| / gap), where gap is the
  spacing from atom i to its neighbour on the side of values[j]. This is
  `rlax.categorical_l2_project`, written here so that importing roxie.losses
  does not import rlax (and through it distrax and TensorFlow Probability).

  Args:
    values: [J] float positions of the masses.
    probs: [J] float masses.
    atoms: [K] float support, increasing.

  Returns:
    [K] float projected masses.
  """
  clipped = jnp.clip(values, atoms[0], atoms[-1])
  offset = clipped[None, :] - atoms[:, None]  # [K, J], value minus atom.
  # Inverse spacing to the next atom up and down; the outermost atoms have no
  # neighbour outside the support (their inverse gap is 0, so a clipped mass
  # sitting exactly on one keeps weight 1), and repeated atoms would divide by
  # zero.
  gap_up = jnp.concatenate([atoms[1:] - atoms[:-1], jnp.zeros((1,),
                                                              atoms.dtype)])
  gap_down = jnp.concatenate([jnp.zeros((1,), atoms.dtype),
                              atoms[1:] - atoms[:-1]])
  inv_up = jnp.where(gap_up > 0, 1. / jnp.where(gap_up > 0, gap_up, 1.), 0.)
  inv_down = jnp.where(gap_down > 0,
                       1. / jnp.where(gap_down > 0, gap_down, 1.), 0.)
  distance = jnp.where(offset >= 0, offset * inv_up[:, None],
                       -offset * inv_down[:, None])
  return jnp.sum(jnp.clip(1. - distance, 0., 1.) * probs[None, :], axis=-1)


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
  fn = 'categorical_td_target'
  _checks.check_rank(fn, 0, r_t=r_t, discount_t=discount_t)
  _checks.check_rank(fn, 1, probs_t=probs_t, atoms=atoms)
  _checks.check_dtype(fn, float, r_t=r_t, discount_t=discount_t,
                      probs_t=probs_t, atoms=atoms)
  _checks.check_same_shape(fn, probs_t=probs_t, atoms=atoms)
  target = _project_onto_support(r_t + discount_t * atoms, probs_t, atoms)
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
  fn = 'categorical_td_loss'
  _checks.check_rank(fn, 0, r_t=r_t, discount_t=discount_t)
  _checks.check_rank(fn, 1, logits_tm1=logits_tm1, probs_t=probs_t,
                     atoms=atoms)
  _checks.check_dtype(fn, float, logits_tm1=logits_tm1, r_t=r_t,
                      discount_t=discount_t, probs_t=probs_t, atoms=atoms)
  _checks.check_same_shape(fn, logits_tm1=logits_tm1, probs_t=probs_t,
                           atoms=atoms)
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
  fn = 'twin_categorical_target'
  _checks.check_rank(fn, 1, logits1_t=logits1_t, logits2_t=logits2_t,
                     atoms=atoms)
  _checks.check_rank(fn, 0, blend=blend)
  _checks.check_dtype(fn, float, logits1_t=logits1_t, logits2_t=logits2_t,
                      atoms=atoms)
  _checks.check_same_shape(fn, logits1_t=logits1_t, logits2_t=logits2_t,
                           atoms=atoms)
  probs1 = jax.nn.softmax(logits1_t)
  probs2 = jax.nn.softmax(logits2_t)
  first_is_low = (categorical_mean(probs1, atoms=atoms, from_logits=False) <=
                  categorical_mean(probs2, atoms=atoms, from_logits=False))
  low = jnp.where(first_is_low, probs1, probs2)
  high = jnp.where(first_is_low, probs2, probs1)
  target = (1. - blend) * low + blend * high
  return jax.lax.stop_gradient(target) if stop_target_gradients else target
