"""Proximal policy optimisation (PPO): surrogate, value loss and GAE.

PPO works on a chunk of on-policy experience. Unlike the other modules, one
"example" here is a whole [T] vector: a trajectory for `gae_advantages`, a
flat minibatch of steps for the losses (as in `rlax.clipped_surrogate_pg_loss`,
which the policy loss computes). Batch several trajectories with `jax.vmap`.

Advantages must respect episode boundaries inside the chunk: the lambda trace
is cut where an episode ended, a terminated step does not bootstrap, and a
truncated step bootstraps from the value of the observation it actually
reached (`Rollout.final_obs`), not the reset observation that follows it.

See "Proximal Policy Optimization Algorithms", Schulman et al., 2017
(https://arxiv.org/abs/1707.06347), and "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", Schulman et al., 2015
(https://arxiv.org/abs/1506.02438).
"""

from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp

from roxie.losses import _checks

Array = chex.Array
Numeric = chex.Numeric


class PpoPolicyOutput(NamedTuple):
  """The clipped surrogate loss and the usual diagnostics."""
  loss: Array  # [] clipped surrogate loss, averaged over the [T] steps.
  clip_fraction: Array  # [] fraction of steps with |ratio - 1| > epsilon.
  approx_kl: Array  # [] mean(ratio - 1 - log(ratio)), ~KL(old || new).


class GaeOutput(NamedTuple):
  """Generalised advantage estimates and the matching value targets."""
  advantages: Array  # [T] GAE(lambda) advantages.
  returns: Array  # [T] value targets, advantages + v_tm1.


def ppo_policy_loss(
    log_prob_t: Array,
    old_log_prob_t: Array,
    adv_t: Array,
    *,
    epsilon: Numeric = 0.2,
    stop_advantage_gradients: bool = True,
) -> PpoPolicyOutput:
  """PPO's clipped surrogate loss from log-probabilities.

  With ratio_t = exp(log_prob_t - old_log_prob_t), the loss is
  -mean_t min(ratio_t A_t, clip(ratio_t, 1 - epsilon, 1 + epsilon) A_t), as
  `rlax.clipped_surrogate_pg_loss` computes it. The behaviour policy's
  log-probabilities are constants (their gradient is stopped).

  See "Proximal Policy Optimization Algorithms", Schulman et al., 2017, eq. 7
  (https://arxiv.org/abs/1707.06347).

  Args:
    log_prob_t: [T] float log pi(a_t|s_t) under the policy being trained.
    old_log_prob_t: [T] float log-probabilities under the behaviour policy.
    adv_t: [T] float advantage estimates (e.g. from `gae_advantages`).
    epsilon: clipping range of the probability ratio.
    stop_advantage_gradients: whether to stop gradients through `adv_t`.

  Returns:
    A `PpoPolicyOutput`.
  """
  fn = 'ppo_policy_loss'
  _checks.check_rank(fn, 1, log_prob_t=log_prob_t,
                     old_log_prob_t=old_log_prob_t, adv_t=adv_t)
  _checks.check_rank(fn, 0, epsilon=epsilon)
  _checks.check_dtype(fn, float, log_prob_t=log_prob_t,
                      old_log_prob_t=old_log_prob_t, adv_t=adv_t)
  _checks.check_same_shape(fn, log_prob_t=log_prob_t,
                           old_log_prob_t=old_log_prob_t, adv_t=adv_t)
  log_ratio = log_prob_t - jax.lax.stop_gradient(old_log_prob_t)
  ratio = jnp.exp(log_ratio)
  if stop_advantage_gradients:
    adv_t = jax.lax.stop_gradient(adv_t)
  clipped_ratio = jnp.clip(ratio, 1. - epsilon, 1. + epsilon)
  # fmin, not minimum: where one product is NaN (an infinite ratio times a
  # zero advantage) the other, finite one is kept, as rlax does.
  loss = -jnp.mean(jnp.fmin(ratio * adv_t, clipped_ratio * adv_t))
  log_ratio = jax.lax.stop_gradient(log_ratio)
  ratio = jax.lax.stop_gradient(ratio)
  clip_fraction = jnp.mean((jnp.abs(ratio - 1.) > epsilon).astype(ratio.dtype))
  approx_kl = jnp.mean(ratio - 1. - log_ratio)
  return PpoPolicyOutput(loss=loss, clip_fraction=clip_fraction,
                         approx_kl=approx_kl)


def ppo_value_loss(
    v_pred: Array,
    v_old: Array,
    returns: Array,
    *,
    clip_epsilon: Optional[Numeric] = None,
    stop_target_gradients: bool = True,
) -> Array:
  """Squared value loss, optionally with PPO's value clipping.

  Without clipping: mean_t 0.5 (v_pred - returns)^2. With `clip_epsilon` the
  prediction is also evaluated clipped to within epsilon of the value that
  collected the data, and the larger (more pessimistic) error is kept:
  mean_t 0.5 max((v - R)^2, (v_old + clip(v - v_old, -eps, eps) - R)^2).

  See "Implementation Matters in Deep Policy Gradients: A Case Study on PPO
  and TRPO", Engstrom et al., 2020 (https://arxiv.org/abs/2005.12729), which
  documents this clipping from the PPO reference implementation.

  Args:
    v_pred: [T] float values predicted by the critic being trained.
    v_old: [T] float values predicted when the data was collected.
    returns: [T] float value targets (e.g. `GaeOutput.returns`).
    clip_epsilon: if set, the clipping range around `v_old`.
    stop_target_gradients: whether to stop gradients through `returns`.

  Returns:
    [] float loss.
  """
  fn = 'ppo_value_loss'
  _checks.check_rank(fn, 1, v_pred=v_pred, v_old=v_old, returns=returns)
  _checks.check_dtype(fn, float, v_pred=v_pred, v_old=v_old, returns=returns)
  _checks.check_same_shape(fn, v_pred=v_pred, v_old=v_old, returns=returns)
  if stop_target_gradients:
    returns = jax.lax.stop_gradient(returns)
  error = jnp.square(v_pred - returns)
  if clip_epsilon is not None:
    v_old = jax.lax.stop_gradient(v_old)
    v_clipped = v_old + jnp.clip(v_pred - v_old, -clip_epsilon, clip_epsilon)
    error = jnp.maximum(error, jnp.square(v_clipped - returns))
  return 0.5 * jnp.mean(error)


def gae_advantages(
    r_t: Array,
    discount_t: Array,
    end_t: Array,
    v_tm1: Array,
    v_t: Array,
    *,
    lambda_: Numeric = 0.95,
    stop_target_gradients: bool = True,
) -> GaeOutput:
  """Generalised advantage estimation across episode ends.

  With delta_t = r_t + discount_t v_t[t] - v_tm1[t], iterates backwards

    A_t = delta_t                                    if end_t
    A_t = delta_t + discount_t * lambda * A_{t+1}    otherwise,  A_T = 0,

  so the trace never crosses into the next episode: the cut is a select, so
  not even a NaN of the next episode leaks back, and a terminated step
  (discount 0) adds no bootstrap term even where its v_t is NaN. `v_t[t]` is
  the value of the TRUE next observation of step t: where step t truncated it
  is the value of the final observation, which is bootstrapped (discount_t =
  gamma); where it terminated discount_t = 0 removes it; elsewhere it equals
  v_tm1[t + 1].
  For the last step it is the value of the observation after the chunk.

  With no episode ends and v_t[t] = v_tm1[t + 1] this is
  `rlax.truncated_generalized_advantage_estimation`. When the values are
  aligned, v_t[t] = v_tm1[t + 1] wherever step t did not end its episode
  (both are the value of the same observation), `returns` equals
  `lambda_returns(r_t, discount_t, end_t, v_t, lambda_=lambda_)` with the
  same `lambda_`; where the values are not aligned the two differ by
  discounted terms in v_t[t] - v_tm1[t + 1].

  See "High-Dimensional Continuous Control Using Generalized Advantage
  Estimation", Schulman et al., 2015 (https://arxiv.org/abs/1506.02438).

  Args:
    r_t: [T] float rewards.
    discount_t: [T] float discounts, gamma * (1 - terminated_t).
    end_t: [T] bool, True where the step ended its episode (terminated or
      truncated).
    v_tm1: [T] float values of the observations acted on, obs_t.
    v_t: [T] float values of the true next observation of each step.
    lambda_: GAE mixing parameter, scalar.
    stop_target_gradients: whether to stop gradients through the advantages
      and returns.

  Returns:
    A `GaeOutput` with [T] advantages and returns (= advantages + v_tm1).
  """
  fn = 'gae_advantages'
  _checks.check_rank(fn, 1, r_t=r_t, discount_t=discount_t, end_t=end_t,
                     v_tm1=v_tm1, v_t=v_t)
  _checks.check_rank(fn, 0, lambda_=lambda_)
  _checks.check_dtype(fn, float, r_t=r_t, discount_t=discount_t, v_tm1=v_tm1,
                      v_t=v_t)
  _checks.check_dtype(fn, bool, end_t=end_t)
  _checks.check_same_shape(fn, r_t=r_t, discount_t=discount_t, end_t=end_t,
                           v_tm1=v_tm1, v_t=v_t)
  # Selects rather than products with 0, so that 0 * NaN never happens: a
  # terminated step's v_t and the next episode's advantages are ignored
  # whatever they hold.
  bootstrap_t = jnp.where(discount_t == 0, 0., discount_t * v_t)
  delta_t = r_t + bootstrap_t - v_tm1
  trace_t = discount_t * lambda_

  def step(a_next, xs):
    delta, trace, end = xs
    a = jnp.where(end, delta, delta + trace * a_next)
    return a, a

  _, advantages = jax.lax.scan(step, jnp.zeros((), delta_t.dtype),
                               (delta_t, trace_t, end_t), reverse=True)
  returns = advantages + v_tm1
  if stop_target_gradients:
    advantages = jax.lax.stop_gradient(advantages)
    returns = jax.lax.stop_gradient(returns)
  return GaeOutput(advantages=advantages, returns=returns)
