"""One-step value targets for continuous-action critics.

rlax already provides the TD errors (`rlax.td_learning`) and the squared loss
(`rlax.l2_loss`); what continuous control adds is forming the *target* from a
pair of target critics evaluated at the next action, as TD3, SAC and their
descendants do, or from an ensemble of any number of them (REDQ). Functions
take one unbatched example; batch with `jax.vmap`.
"""

from typing import Optional

import chex
import jax
import jax.numpy as jnp

from roxie.losses import _checks

Array = chex.Array
Numeric = chex.Numeric
PRNGKey = chex.PRNGKey


def td_target(
    r_t: Numeric,
    discount_t: Numeric,
    v_t: Numeric,
    *,
    stop_target_gradients: bool = True,
) -> Array:
  """Computes the one-step bootstrapped target r_t + discount_t * v_t.

  The TD error of `rlax.td_learning` is this target minus v_tm1. The same
  formula serves n-step transitions, whose `reward` and `discount` are already
  folded (see `n_step_transition`).

  See "Learning to Predict by the Methods of Temporal Differences", Sutton,
  1988 (https://link.springer.com/article/10.1023/A:1022633531479).

  Args:
    r_t: [] float reward (or folded n-step reward).
    discount_t: [] float discount, 0 after a termination.
    v_t: [] float value of the next (bootstrap) observation.
    stop_target_gradients: whether to stop gradients through the target.

  Returns:
    [] float target.
  """
  _checks.check_rank('td_target', 0, r_t=r_t, discount_t=discount_t, v_t=v_t)
  _checks.check_dtype('td_target', float, r_t=r_t, discount_t=discount_t,
                      v_t=v_t)
  target = r_t + discount_t * v_t
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def clipped_double_q(q1_t: Array, q2_t: Array, *,
                     weight: Numeric = 1.) -> Array:
  """Combines two critics' estimates pessimistically (clipped double Q).

  Returns `weight * min(q1, q2) + (1 - weight) * max(q1, q2)` elementwise.
  `weight = 1` is the clipped double-Q estimate of TD3; smaller weights give
  the softer mixture used by BCQ (weight 0.75), which trades the minimum's
  underestimation bias against overestimation.

  See "Addressing Function Approximation Error in Actor-Critic Methods",
  Fujimoto et al., 2018 (https://arxiv.org/abs/1802.09477), and "Off-Policy
  Deep Reinforcement Learning without Exploration", Fujimoto et al., 2019
  (https://arxiv.org/abs/1812.02900).

  Args:
    q1_t: float estimates of the first critic, any shape.
    q2_t: float estimates of the second critic, same shape as `q1_t`.
    weight: weight of the minimum, in [0, 1]; scalar.

  Returns:
    The combined estimate, same shape as the inputs.
  """
  _checks.check_same_shape('clipped_double_q', q1_t=q1_t, q2_t=q2_t)
  _checks.check_rank('clipped_double_q', 0, weight=weight)
  _checks.check_dtype('clipped_double_q', float, q1_t=q1_t, q2_t=q2_t)
  low = jnp.minimum(q1_t, q2_t)
  high = jnp.maximum(q1_t, q2_t)
  return weight * low + (1. - weight) * high


def twin_q_target(
    r_t: Numeric,
    discount_t: Numeric,
    q1_t: Numeric,
    q2_t: Numeric,
    *,
    weight: Numeric = 1.,
    stop_target_gradients: bool = True,
) -> Array:
  """Computes the TD3 target r_t + discount_t * min(q1_t, q2_t).

  `q1_t` and `q2_t` are the two target critics evaluated at the next action
  (for TD3, the target policy's action plus clipped smoothing noise). `weight`
  softens the minimum as in `clipped_double_q`.

  See "Addressing Function Approximation Error in Actor-Critic Methods",
  Fujimoto et al., 2018 (https://arxiv.org/abs/1802.09477).

  Args:
    r_t: [] float reward (or folded n-step reward).
    discount_t: [] float discount, 0 after a termination.
    q1_t: [] float first target critic at the next action.
    q2_t: [] float second target critic at the next action.
    weight: weight of the minimum, in [0, 1].
    stop_target_gradients: whether to stop gradients through the target.

  Returns:
    [] float target.
  """
  _checks.check_rank('twin_q_target', 0, r_t=r_t, discount_t=discount_t,
                     q1_t=q1_t, q2_t=q2_t)
  _checks.check_dtype('twin_q_target', float, r_t=r_t, discount_t=discount_t,
                      q1_t=q1_t, q2_t=q2_t)
  q_t = clipped_double_q(q1_t, q2_t, weight=weight)
  return td_target(r_t, discount_t, q_t,
                   stop_target_gradients=stop_target_gradients)


def ensemble_min_q(
    q_t: Array,
    *,
    subset_size: Optional[int] = None,
    key: Optional[PRNGKey] = None,
) -> Array:
  """Minimum over an ensemble of critics, or over a random subset of it.

  Over all N critics this generalises clipped double Q (`clipped_double_q`
  with weight 1 is the case N = 2). With `subset_size` M < N it is REDQ's
  in-target minimisation: the minimum over M critics drawn uniformly without
  replacement with `key`. A small random subset of a large ensemble keeps the
  target's bias controllable (M sets how pessimistic it is) while the
  ensemble's average stays a low-variance estimate.

  REDQ draws one subset per update, shared by the whole minibatch: to do the
  same, pass one key unbatched (`in_axes=None` under `jax.vmap`); a batch of
  keys draws a subset per example.

  See "Randomized Ensembled Double Q-Learning: Learning Fast Without a Model",
  Chen et al., 2021 (https://arxiv.org/abs/2101.05982), and for N = 2
  "Addressing Function Approximation Error in Actor-Critic Methods", Fujimoto
  et al., 2018 (https://arxiv.org/abs/1802.09477).

  Args:
    q_t: [N] float values of the N critics, N >= 1.
    subset_size: static number M of critics to take the minimum over, in
      [1, N]; None (the default) takes all N.
    key: PRNG key that draws the subset; required when M < N.

  Returns:
    [] float minimum over the (sub)ensemble.
  """
  _checks.check_rank('ensemble_min_q', 1, q_t=q_t)
  _checks.check_dtype('ensemble_min_q', float, q_t=q_t)
  num_critics = q_t.shape[0]
  if num_critics < 1:
    raise ValueError('ensemble_min_q: `q_t` must hold at least one critic.')
  if subset_size is None or subset_size == num_critics:
    return jnp.min(q_t)
  if not 1 <= subset_size <= num_critics:
    raise ValueError(
        f'ensemble_min_q: subset_size must be in [1, {num_critics}] (the '
        f'number of critics), got {subset_size}.')
  if key is None:
    raise ValueError(
        f'ensemble_min_q: a `key` is needed to draw {subset_size} of '
        f'{num_critics} critics.')
  members = jax.random.choice(key, num_critics, (subset_size,), replace=False)
  return jnp.min(q_t[members])


def ensemble_q_target(
    r_t: Numeric,
    discount_t: Numeric,
    q_t: Array,
    *,
    subset_size: Optional[int] = None,
    key: Optional[PRNGKey] = None,
    stop_target_gradients: bool = True,
) -> Array:
  """Computes r_t + discount_t * min(q_t) over an ensemble of target critics.

  The N-critic analogue of `twin_q_target`: `q_t` holds the N target critics
  evaluated at the next action, and the bootstrap value is their minimum, or
  with `subset_size` the minimum over a random subset of them (REDQ; see
  `ensemble_min_q`). As everywhere in roxie, `discount_t` is 0 after a
  termination and gamma after a truncation, where `q_t` must be evaluated at
  the true final observation.

  See "Randomized Ensembled Double Q-Learning: Learning Fast Without a Model",
  Chen et al., 2021 (https://arxiv.org/abs/2101.05982).

  Args:
    r_t: [] float reward (or folded n-step reward).
    discount_t: [] float discount, 0 after a termination.
    q_t: [N] float target critics at the next action, N >= 1.
    subset_size: static number of critics to take the minimum over; None
      takes all N.
    key: PRNG key that draws the subset; required when subset_size < N.
    stop_target_gradients: whether to stop gradients through the target.

  Returns:
    [] float target.
  """
  _checks.check_rank('ensemble_q_target', 0, r_t=r_t, discount_t=discount_t)
  _checks.check_rank('ensemble_q_target', 1, q_t=q_t)
  _checks.check_dtype('ensemble_q_target', float, r_t=r_t,
                      discount_t=discount_t, q_t=q_t)
  v_t = ensemble_min_q(q_t, subset_size=subset_size, key=key)
  return td_target(r_t, discount_t, v_t,
                   stop_target_gradients=stop_target_gradients)
