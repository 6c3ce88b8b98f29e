"""Maximum a posteriori policy optimisation (MPO) for diagonal Gaussians.

MPO alternates two steps at every state s, using N actions a_i sampled from
the target (old) policy:

  E-step  a non-parametric improved policy q(a_i|s) proportional to
          exp(Q(s, a_i) / eta), with the temperature eta set by minimising a
          convex dual so that KL(q || pi_old) stays below `epsilon`;
  M-step  weighted maximum likelihood: fit pi to the weights q(a_i|s) under a
          trust region KL(pi_old || pi) below epsilon_mean / epsilon_std,
          enforced with learned Lagrange multipliers.

For Gaussian policies the M-step is *decoupled*: the mean is fitted with the
standard deviation held at the target's value and vice versa, each with its
own KL bound, which stops the covariance from collapsing prematurely.

See "Maximum a Posteriori Policy Optimisation", Abdolmaleki et al., 2018
(https://arxiv.org/abs/1806.06920), and "Relative Entropy Regularized Policy
Iteration", Abdolmaleki et al., 2018 (https://arxiv.org/abs/1812.02256).

Dual variables (the temperature and the multipliers) are passed as
unconstrained parameters and mapped to positive values by `positive_fn`
(`jnp.exp` by default, so they are logs; `jax.nn.softplus` also works).
Functions take one unbatched example, one state; batch with `jax.vmap` and
average.
"""

import math
from typing import Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

from roxie.losses import _checks
from roxie.losses import distributions

Array = chex.Array
Numeric = chex.Numeric
PositiveFn = Callable[[Array], Array]


class MpoEStepOutput(NamedTuple):
  """Result of the MPO E-step at one state."""
  weights: Array  # [N] normalised weights of the sampled actions (no gradient).
  temperature_loss: Array  # [] dual loss; gradient to the temperature only.
  temperature: Array  # [] positive temperature eta.


class MpoMStepOutput(NamedTuple):
  """Result of the decoupled Gaussian MPO M-step at one state."""
  loss: Array  # [] sum of the six losses below.
  policy_loss_mean: Array  # [] -sum_i w_i log N(a_i; online_mean, target_std).
  policy_loss_std: Array  # [] -sum_i w_i log N(a_i; target_mean, online_std).
  kl_loss_mean: Array  # [] alpha_mean (no gradient) * kl_mean.
  kl_loss_std: Array  # [] alpha_std (no gradient) * kl_std.
  alpha_loss_mean: Array  # [] alpha_mean * (epsilon_mean - kl_mean), KL fixed.
  alpha_loss_std: Array  # [] alpha_std * (epsilon_std - kl_std), KL fixed.
  kl_mean: Array  # [A] per-dimension KL(target || N(online_mean, target_std)).
  kl_std: Array  # [A] per-dimension KL(target || N(target_mean, online_std)).
  alpha_mean: Array  # [] or [A] positive multiplier of the mean constraint.
  alpha_std: Array  # [] or [A] positive multiplier of the std constraint.


class MpoOutput(NamedTuple):
  """Result of the whole Gaussian MPO loss at one state."""
  loss: Array  # [] E-step temperature loss plus M-step loss.
  e_step: MpoEStepOutput  # Weights, temperature loss and temperature.
  m_step: MpoMStepOutput  # Policy, KL and multiplier losses and statistics.


def mpo_e_step(
    q_values: Array,
    log_temperature: Array,
    *,
    epsilon: Numeric = 0.1,
    positive_fn: PositiveFn = jnp.exp,
) -> MpoEStepOutput:
  """MPO E-step: softmax weights of sampled actions and the temperature dual.

  With eta = positive_fn(log_temperature), the weights are
  softmax(Q(s, a_i) / eta) and the dual loss is

    eta * epsilon + eta * log(1/N sum_i exp(Q(s, a_i) / eta)),

  whose minimiser over eta keeps KL(weights || uniform over samples), i.e.
  the KL to the sampling policy, near `epsilon`. The Q-values get no gradient
  from either output, and the weights none to the temperature either.

  See "Maximum a Posteriori Policy Optimisation", Abdolmaleki et al., 2018,
  sec. 4.1 and appendix D.2 (https://arxiv.org/abs/1806.06920).

  Args:
    q_values: [N] float Q-values of N actions sampled from the target policy.
    log_temperature: [] float unconstrained temperature parameter.
    epsilon: bound on the KL of the improved policy to the sampling policy.
    positive_fn: maps the unconstrained parameter to a positive temperature.

  Returns:
    An `MpoEStepOutput`.
  """
  _checks.check_rank('mpo_e_step', 1, q_values=q_values)
  _checks.check_rank('mpo_e_step', 0, log_temperature=log_temperature,
                     epsilon=epsilon)
  _checks.check_dtype('mpo_e_step', float, q_values=q_values,
                      log_temperature=log_temperature)
  num_samples = q_values.shape[0]
  q_values = jax.lax.stop_gradient(q_values)
  temperature = positive_fn(log_temperature)

  # Shift BEFORE scaling. softmax(q / eta) subtracts max(q / eta) itself, but
  # under jit XLA may fuse q * (1 / eta) - max into one FMA that rounds
  # differently from the max it subtracts: with max|q| / eta beyond ~2e9 the
  # largest shifted logit is then hundreds rather than 0, and exp overflows
  # (weights NaN, dual inf). q - max(q) is exact, and exactly 0 at the
  # maximum however it is scaled, so exp(shifted) lies in (0, 1] with one 1.
  q_max = jnp.max(q_values)
  shifted = (q_values - q_max) / temperature
  exp_shifted = jnp.exp(shifted)
  sum_exp = jnp.sum(exp_shifted)  # In [1, N].
  # eta * log(1/N sum_i exp(q_i / eta)) = max(q) + eta * log(1/N sum_i ...).
  log_mean_exp = jnp.log(sum_exp) - math.log(num_samples)
  temperature_loss = (temperature * epsilon + q_max +
                      temperature * log_mean_exp)
  weights = jax.lax.stop_gradient(exp_shifted / sum_exp)
  return MpoEStepOutput(weights=weights, temperature_loss=temperature_loss,
                        temperature=temperature)


def _lagrange_terms(kl: Array, raw_alpha: Array, epsilon: Numeric,
                    positive_fn: PositiveFn, per_dimension: bool):
  """Returns (kl_loss, alpha_loss, alpha) for one KL trust region."""
  if not per_dimension:
    kl = jnp.sum(kl)
  alpha = positive_fn(raw_alpha)
  # The policy sees a fixed penalty weight; the multiplier sees a fixed KL:
  # coordinate descent on the Lagrangian, one variable per loss.
  kl_loss = jax.lax.stop_gradient(alpha) * kl
  alpha_loss = alpha * (epsilon - jax.lax.stop_gradient(kl))
  return jnp.sum(kl_loss), jnp.sum(alpha_loss), alpha


def mpo_m_step(
    online_mean: Array,
    online_std: Array,
    target_mean: Array,
    target_std: Array,
    actions: Array,
    weights: Array,
    log_alpha_mean: Array,
    log_alpha_std: Array,
    *,
    epsilon_mean: Numeric = 1e-3,
    epsilon_std: Numeric = 1e-5,
    per_dimension: bool = False,
    positive_fn: PositiveFn = jnp.exp,
) -> MpoMStepOutput:
  """Decoupled MPO M-step for a diagonal Gaussian policy.

  The weighted log-likelihood is split in two: the mean is fitted through
  N(online_mean, target_std) and the standard deviation through
  N(target_mean, online_std). Each part has its own trust region on
  KL(target || part), with multipliers alpha_mean, alpha_std trained on
  `alpha * (epsilon - KL)` while the policy is trained on `alpha * KL`.
  With `per_dimension` each action dimension has its own KL bound and
  multiplier (`log_alpha_*` of shape [A]); otherwise the KLs are summed over
  dimensions and the multipliers are scalars.

  The weights, target mean and target std are constants of this loss (their
  gradients are stopped).

  It stays one function, longer than most: its length is this docstring and
  the rank, dtype and shape checks of its eight inputs (so a wrong shape
  fails at trace time, as in rlax); the loss itself is ~35 lines.

  See "Relative Entropy Regularized Policy Iteration", Abdolmaleki et al.,
  2018, sec. 4.2.1 (https://arxiv.org/abs/1812.02256), and "Maximum a
  Posteriori Policy Optimisation", Abdolmaleki et al., 2018, sec. 4.2
  (https://arxiv.org/abs/1806.06920).

  Args:
    online_mean: [A] float mean of the online policy at s.
    online_std: [A] float standard deviation of the online policy at s, > 0.
    target_mean: [A] float mean of the target (sampling) policy at s.
    target_std: [A] float standard deviation of the target policy at s.
    actions: [N, A] float actions sampled from the target policy.
    weights: [N] float normalised E-step weights of those actions.
    log_alpha_mean: [] (or [A] with `per_dimension`) unconstrained multiplier
      of the mean trust region.
    log_alpha_std: [] (or [A] with `per_dimension`) unconstrained multiplier
      of the standard deviation trust region.
    epsilon_mean: KL bound for the mean (per dimension with `per_dimension`).
    epsilon_std: KL bound for the standard deviation.
    per_dimension: whether each action dimension is constrained separately.
    positive_fn: maps unconstrained multipliers to positive values.

  Returns:
    An `MpoMStepOutput`.
  """
  fn = 'mpo_m_step'
  _checks.check_rank(fn, 1, online_mean=online_mean, online_std=online_std,
                     target_mean=target_mean, target_std=target_std,
                     weights=weights)
  _checks.check_rank(fn, 2, actions=actions)
  _checks.check_rank(fn, 1 if per_dimension else 0,
                     log_alpha_mean=log_alpha_mean,
                     log_alpha_std=log_alpha_std)
  _checks.check_rank(fn, 0, epsilon_mean=epsilon_mean, epsilon_std=epsilon_std)
  _checks.check_dtype(
      fn, float, online_mean=online_mean, online_std=online_std,
      target_mean=target_mean, target_std=target_std, actions=actions,
      weights=weights, log_alpha_mean=log_alpha_mean,
      log_alpha_std=log_alpha_std)
  _checks.check_same_shape(
      fn, online_mean=online_mean, online_std=online_std,
      target_mean=target_mean, target_std=target_std,
      **{'actions[0]': actions[0]})
  _checks.check_same_shape(fn, weights=weights,
                           **{'actions[:, 0]': actions[:, 0]})
  if per_dimension:
    _checks.check_same_shape(fn, log_alpha_mean=log_alpha_mean,
                             log_alpha_std=log_alpha_std,
                             online_mean=online_mean)
  weights = jax.lax.stop_gradient(weights)
  target_mean = jax.lax.stop_gradient(target_mean)
  target_std = jax.lax.stop_gradient(target_std)

  def weighted_nll(m, s):
    log_probs = jax.vmap(distributions.gaussian_log_prob,
                         in_axes=(0, None, None))(actions, m, s)
    return -jnp.sum(weights * log_probs)

  policy_loss_mean = weighted_nll(online_mean, target_std)
  policy_loss_std = weighted_nll(target_mean, online_std)

  kl_mean = distributions.gaussian_kl(
      target_mean, target_std, online_mean, target_std)
  kl_std = distributions.gaussian_kl(
      target_mean, target_std, target_mean, online_std)
  kl_loss_mean, alpha_loss_mean, alpha_mean = _lagrange_terms(
      kl_mean, log_alpha_mean, epsilon_mean, positive_fn, per_dimension)
  kl_loss_std, alpha_loss_std, alpha_std = _lagrange_terms(
      kl_std, log_alpha_std, epsilon_std, positive_fn, per_dimension)

  loss = (policy_loss_mean + policy_loss_std + kl_loss_mean + kl_loss_std +
          alpha_loss_mean + alpha_loss_std)
  return MpoMStepOutput(
      loss=loss,
      policy_loss_mean=policy_loss_mean,
      policy_loss_std=policy_loss_std,
      kl_loss_mean=kl_loss_mean,
      kl_loss_std=kl_loss_std,
      alpha_loss_mean=alpha_loss_mean,
      alpha_loss_std=alpha_loss_std,
      kl_mean=kl_mean,
      kl_std=kl_std,
      alpha_mean=alpha_mean,
      alpha_std=alpha_std)


def gaussian_mpo_loss(
    q_values: Array,
    actions: Array,
    online_mean: Array,
    online_std: Array,
    target_mean: Array,
    target_std: Array,
    log_temperature: Array,
    log_alpha_mean: Array,
    log_alpha_std: Array,
    *,
    epsilon: Numeric = 0.1,
    epsilon_mean: Numeric = 1e-3,
    epsilon_std: Numeric = 1e-5,
    per_dimension: bool = False,
    positive_fn: PositiveFn = jnp.exp,
) -> MpoOutput:
  """Whole MPO loss at one state: E-step then decoupled Gaussian M-step.

  Differentiate `loss` with respect to the policy parameters (through
  `online_mean` and `online_std`) and the three dual parameters together;
  each part of the loss only has gradients to its own variables.

  See "Relative Entropy Regularized Policy Iteration", Abdolmaleki et al.,
  2018 (https://arxiv.org/abs/1812.02256).

  Args:
    q_values: [N] float Q-values of the sampled actions.
    actions: [N, A] float actions sampled from the target policy.
    online_mean: [A] float mean of the online policy.
    online_std: [A] float standard deviation of the online policy.
    target_mean: [A] float mean of the target policy.
    target_std: [A] float standard deviation of the target policy.
    log_temperature: [] float unconstrained temperature.
    log_alpha_mean: [] (or [A]) unconstrained mean multiplier.
    log_alpha_std: [] (or [A]) unconstrained std multiplier.
    epsilon: E-step KL bound.
    epsilon_mean: M-step KL bound on the mean.
    epsilon_std: M-step KL bound on the standard deviation.
    per_dimension: whether M-step KLs are bounded per action dimension.
    positive_fn: maps unconstrained dual parameters to positive values.

  Returns:
    An `MpoOutput`.
  """
  e_step = mpo_e_step(q_values, log_temperature, epsilon=epsilon,
                      positive_fn=positive_fn)
  m_step = mpo_m_step(
      online_mean, online_std, target_mean, target_std, actions,
      e_step.weights,
      log_alpha_mean, log_alpha_std, epsilon_mean=epsilon_mean,
      epsilon_std=epsilon_std, per_dimension=per_dimension,
      positive_fn=positive_fn)
  return MpoOutput(loss=e_step.temperature_loss + m_step.loss, e_step=e_step,
                   m_step=m_step)
