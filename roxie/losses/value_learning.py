"""One-step value targets for continuous-action critics.

rlax already provides the TD errors (`rlax.td_learning`) and the squared loss
(`rlax.l2_loss`); what continuous control adds is forming the *target* from a
pair of target critics evaluated at the next action, as TD3, SAC and their
descendants do. Functions take one unbatched example; batch with `jax.vmap`.
"""

import chex
import jax
import jax.numpy as jnp

Array = chex.Array
Numeric = chex.Numeric


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
  chex.assert_rank([r_t, discount_t, v_t], 0)
  chex.assert_type([r_t, discount_t, v_t], float)
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
  chex.assert_equal_shape([q1_t, q2_t])
  chex.assert_rank(weight, 0)
  chex.assert_type([q1_t, q2_t], float)
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
  chex.assert_rank([r_t, discount_t, q1_t, q2_t], 0)
  chex.assert_type([r_t, discount_t, q1_t, q2_t], float)
  q_t = clipped_double_q(q1_t, q2_t, weight=weight)
  return td_target(r_t, discount_t, q_t,
                   stop_target_gradients=stop_target_gradients)
