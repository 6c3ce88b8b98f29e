"""Soft actor-critic (SAC) losses: soft target, actor and temperature.

SAC maximises reward plus alpha times the policy's entropy. The critic's soft
target subtracts alpha * log pi(a'|s') at a freshly sampled next action; the
actor minimises alpha * log pi(a|s) - Q(s, a) at a reparameterised sample; and
the temperature alpha is tuned so that the policy's entropy tracks a target.

See "Soft Actor-Critic: Off-Policy Maximum Entropy Deep Reinforcement Learning
with a Stochastic Actor", Haarnoja et al., 2018
(https://arxiv.org/abs/1801.01290), and "Soft Actor-Critic Algorithms and
Applications", Haarnoja et al., 2018 (https://arxiv.org/abs/1812.05905).

Functions take one unbatched example; batch with `jax.vmap`.
"""

import chex
import jax
import jax.numpy as jnp

from roxie.losses import _checks

Array = chex.Array
Numeric = chex.Numeric


def sac_critic_target(
    r_t: Numeric,
    discount_t: Numeric,
    q_t: Numeric,
    log_prob_t: Numeric,
    *,
    alpha: Numeric,
    stop_target_gradients: bool = True,
) -> Array:
  """Soft Bellman target r_t + discount_t * (q_t - alpha * log_prob_t).

  See "Soft Actor-Critic Algorithms and Applications", Haarnoja et al., 2018,
  eq. 3 (https://arxiv.org/abs/1812.05905).

  Args:
    r_t: [] float reward (or folded n-step reward).
    discount_t: [] float discount, 0 after a termination.
    q_t: [] float target critic at a next action a' ~ pi(.|s'); usually the
      minimum of the twin target critics (`clipped_double_q`).
    log_prob_t: [] float log pi(a'|s') of that same action.
    alpha: [] entropy temperature (a float, or exp(log_alpha)).
    stop_target_gradients: whether to stop gradients through the target,
      including to `alpha` and the policy.

  Returns:
    [] float target.
  """
  _checks.check_rank('sac_critic_target', 0, r_t=r_t, discount_t=discount_t,
                     q_t=q_t, log_prob_t=log_prob_t, alpha=alpha)
  _checks.check_dtype('sac_critic_target', float, r_t=r_t,
                      discount_t=discount_t, q_t=q_t, log_prob_t=log_prob_t)
  target = r_t + discount_t * (q_t - alpha * log_prob_t)
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def sac_actor_loss(q_value: Numeric, log_prob: Numeric, *,
                   alpha: Numeric) -> Array:
  """SAC policy loss alpha * log pi(a|s) - Q(s, a).

  `a` must be a reparameterised sample so that gradients flow through both
  terms. `alpha` is treated as a constant here (its gradient is stopped):
  the temperature has its own loss, `sac_temperature_loss`.

  See "Soft Actor-Critic Algorithms and Applications", Haarnoja et al., 2018,
  eq. 7 (https://arxiv.org/abs/1812.05905).

  Args:
    q_value: [] float critic value at the sampled action (e.g. the min of the
      twin online critics).
    log_prob: [] float log-probability of the sampled action under the policy.
    alpha: [] entropy temperature.

  Returns:
    [] float loss.
  """
  _checks.check_rank('sac_actor_loss', 0, q_value=q_value, log_prob=log_prob,
                     alpha=alpha)
  _checks.check_dtype('sac_actor_loss', float, q_value=q_value,
                      log_prob=log_prob)
  return jax.lax.stop_gradient(alpha) * log_prob - q_value


def sac_temperature_loss(log_alpha: Numeric, log_prob: Numeric, *,
                         target_entropy: Numeric) -> Array:
  """Dual loss that tunes alpha so the policy's entropy tracks a target.

  Returns exp(log_alpha) * (-log_prob - target_entropy) with the gradient to
  `log_prob` stopped. When the entropy estimate -log_prob is below the target
  the loss decreases as alpha grows, so gradient descent raises alpha (and
  lowers it in the opposite case). A common `target_entropy` is -A for an A
  dimensional action.

  See "Soft Actor-Critic Algorithms and Applications", Haarnoja et al., 2018,
  eq. 18 (https://arxiv.org/abs/1812.05905).

  Args:
    log_alpha: [] float log of the temperature (the trained parameter).
    log_prob: [] float log-probability of an action sampled from the policy.
    target_entropy: [] float entropy target.

  Returns:
    [] float loss.
  """
  _checks.check_rank('sac_temperature_loss', 0, log_alpha=log_alpha,
                     log_prob=log_prob, target_entropy=target_entropy)
  _checks.check_dtype('sac_temperature_loss', float, log_alpha=log_alpha,
                      log_prob=log_prob)
  entropy_gap = -jax.lax.stop_gradient(log_prob) - target_entropy
  return jnp.exp(log_alpha) * entropy_gap
