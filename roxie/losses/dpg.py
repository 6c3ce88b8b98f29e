"""Deterministic policy gradient actor losses (DDPG, TD3, D4PG).

The actor a = mu(s) climbs the critic: its gradient is dQ/da pushed through
dmu/dtheta. Two equivalent forms are offered: `dpg_loss` takes dQ/da
explicitly (rlax's form, useful to clip it or to use a distributional critic's
mean), and `dpg_actor_loss` is simply -Q(s, mu(s)), whose autodiff gradient is
the same. A tanh-squashed actor can drift to pre-activations where tanh is flat
and the gradient vanishes; `saturation_penalty` pulls them back. Functions
take one unbatched example; batch with `jax.vmap`.
"""

from typing import Optional

import chex
import jax
import jax.numpy as jnp

from roxie.losses import _checks

Array = chex.Array
Numeric = chex.Numeric


def dpg_loss(
    a_t: Array,
    dqda_t: Array,
    *,
    dqda_clipping: Optional[Numeric] = None,
    stop_action_gradients: bool = True,
) -> Array:
  """Deterministic policy gradient loss from an action gradient dQ/da.

  The loss is 0.5 * ||stop_gradient(a_t + dqda_t) - a_t||^2 summed over action
  dimensions (`rlax.dpg_loss` returns it per dimension), so its gradient with
  respect to `a_t` is exactly -dqda_t (after optional clipping of its L2
  norm).

  See "Deterministic Policy Gradient Algorithms", Silver et al., 2014
  (http://proceedings.mlr.press/v32/silver14.pdf).

  Args:
    a_t: [A] float action of the actor, a function of its parameters.
    dqda_t: [A] float gradient of the critic with respect to the action at
      `a_t`.
    dqda_clipping: if set, clips the L2 norm of `dqda_t` to this value.
    stop_action_gradients: whether to stop gradients through the regression
      target `a_t + dqda_t` (without it the loss has no gradient).

  Returns:
    [] float loss.
  """
  _checks.check_rank('dpg_loss', 1, a_t=a_t, dqda_t=dqda_t)
  _checks.check_dtype('dpg_loss', float, a_t=a_t, dqda_t=dqda_t)
  _checks.check_same_shape('dpg_loss', a_t=a_t, dqda_t=dqda_t)
  if dqda_clipping is not None:
    dqda_t = _clip_by_norm(dqda_t, dqda_clipping)
  target = a_t + dqda_t
  if stop_action_gradients:
    target = jax.lax.stop_gradient(target)
  return 0.5 * jnp.sum(jnp.square(target - a_t))


def _clip_by_norm(x: Array, max_norm: Numeric) -> Array:
  """Scales `x` down to L2 norm `max_norm` if it is longer."""
  squared_norm = jnp.sum(jnp.square(x))
  # sqrt has an infinite derivative at 0: keep 0 away from it (and from its
  # gradient) rather than masking a NaN afterwards.
  positive = squared_norm > 0
  norm = jnp.where(positive,
                   jnp.sqrt(jnp.where(positive, squared_norm, 1.)), 0.)
  return x * max_norm / jnp.maximum(norm, max_norm)


def saturation_penalty(pre_tanh: Array, *, threshold: Numeric = 2.) -> Array:
  """Quadratic penalty on tanh pre-activations beyond +-threshold.

  Returns sum_i max(|pre_tanh_i| - threshold, 0)^2. Inside the band it is 0,
  so it only acts where tanh saturates (tanh(2) ~ 0.96) and its gradient
  through the actor would vanish.

  Args:
    pre_tanh: [A] float actor output before the tanh squashing.
    threshold: half-width of the unpenalised band, > 0.

  Returns:
    [] float penalty.
  """
  _checks.check_rank('saturation_penalty', 1, pre_tanh=pre_tanh)
  _checks.check_rank('saturation_penalty', 0, threshold=threshold)
  _checks.check_dtype('saturation_penalty', float, pre_tanh=pre_tanh)
  excess = jnp.maximum(jnp.abs(pre_tanh) - threshold, 0.)
  return jnp.sum(excess ** 2)


def dpg_actor_loss(
    q_value: Array,
    pre_tanh: Optional[Array] = None,
    *,
    saturation_weight: Numeric = 1.,
    threshold: Numeric = 2.,
) -> Array:
  """Actor loss -Q(s, mu(s)), optionally plus a saturation penalty.

  Differentiating through the critic at the actor's action gives the
  deterministic policy gradient (the critic's own parameters must be held
  fixed by the caller, e.g. by differentiating only with respect to the
  actor's parameters).

  See "Continuous control with deep reinforcement learning", Lillicrap et al.,
  2015 (https://arxiv.org/abs/1509.02971).

  Args:
    q_value: [] float critic value at the actor's action.
    pre_tanh: optional [A] float actor pre-activations; when given, adds
      `saturation_weight * saturation_penalty(pre_tanh, threshold=threshold)`.
    saturation_weight: weight of the saturation penalty.
    threshold: see `saturation_penalty`.

  Returns:
    [] float loss.
  """
  _checks.check_rank('dpg_actor_loss', 0, q_value=q_value)
  _checks.check_dtype('dpg_actor_loss', float, q_value=q_value)
  loss = -q_value
  if pre_tanh is not None:
    loss = loss + saturation_weight * saturation_penalty(
        pre_tanh, threshold=threshold)
  return loss
