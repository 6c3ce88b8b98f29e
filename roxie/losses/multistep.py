"""Multi-step returns that tell termination apart from truncation.

An episode can end in two ways. On *termination* the environment reached a
terminal state: there is nothing to bootstrap from, and the caller encodes this
as `discount_t = 0`. On *truncation* (a time limit) the state is not terminal:
the return continues past the cut, so the target must bootstrap from the value
of the observation the step actually reached (`TimeStep.final_obs`), never
from the first observation of the next episode.

The functions here therefore take two per-step signals:

  discount_t  gamma * (1 - terminated_t): how much the future is worth.
  end_t       terminated_t OR truncated_t: where a multi-step window or a
              lambda trace must stop, because the next step belongs to
              another episode.

They are written for one unbatched example; batch them with `jax.vmap`.
"""

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from roxie.losses import _checks

Array = chex.Array
Numeric = chex.Numeric


class NStepOutput(NamedTuple):
  """One n-step transition folded out of a window of steps."""
  # [] discounted sum of rewards up to and including the first episode end in
  # the window (or over all n steps when no step ends the episode).
  reward: Array
  # [] bootstrap weight: product of discount_t up to and including step
  # `last` (0 when that step terminated).
  discount: Array
  # [] int32 index k in [0, n - 1] of the step whose NEXT observation is the
  # bootstrap observation.
  last: Array


def _maybe_stop_gradient(x: Array, stop: bool) -> Array:
  # `stop` is a Python bool: there is no reason to trace both branches.
  return jax.lax.stop_gradient(x) if stop else x


def _discounted(discount: Array, value: Array) -> Array:
  """discount * value, exactly 0 wherever the discount is 0.

  A terminated step has discount 0 and nothing to bootstrap from, so its
  value may be anything, NaN included (e.g. computed from padding); a product
  would turn 0 * NaN into NaN. A select keeps it out.
  """
  return jnp.where(discount == 0, jnp.zeros_like(value), discount * value)


def n_step_transition(r_t: Array, discount_t: Array,
                      end_t: Array) -> NStepOutput:
  """Folds a window of n consecutive steps into one n-step transition.

  The window starts at a step of some episode and is cut at the first step
  that ends that episode: later steps belong to the next episode and do not
  contribute. With k = `last` the index of that step (or n - 1 if no step in
  the window ends the episode),

    reward   = sum_{t <= k} (prod_{s < t} discount_s) r_t
    discount = prod_{s <= k} discount_s

  so that `reward + discount * v(next_obs_k)` is the n-step TD target. After
  a termination `discount` is 0; after a truncation it is the product of the
  gammas and the caller must bootstrap from the true final observation of step
  k (`TimeStep.final_obs`), not from the reset observation.

  See "Reinforcement Learning: An Introduction", Sutton & Barto, 2018, ch. 7
  (http://incompleteideas.net/book/the-book-2nd.html).

  Args:
    r_t: [n] float rewards of the steps in the window, in order.
    discount_t: [n] float per-step discounts, gamma * (1 - terminated_t).
    end_t: [n] bool, True where the step ended its episode (terminated or
      truncated).

  Returns:
    An `NStepOutput` of scalars: the folded reward, the bootstrap discount and
    the int32 index of the step to bootstrap after.
  """
  fn = 'n_step_transition'
  _checks.check_rank(fn, 1, r_t=r_t, discount_t=discount_t, end_t=end_t)
  _checks.check_dtype(fn, float, r_t=r_t, discount_t=discount_t)
  _checks.check_dtype(fn, bool, end_t=end_t)
  _checks.check_same_shape(fn, r_t=r_t, discount_t=discount_t, end_t=end_t)
  n = r_t.shape[0]

  # argmax returns the first True; with no True at all the window is whole.
  last = jnp.where(jnp.any(end_t), jnp.argmax(end_t), n - 1).astype(jnp.int32)
  in_window = jnp.arange(n) <= last

  # Weight of r_t is the product of the discounts strictly before t.
  cumulative = jnp.cumprod(discount_t)
  before = jnp.concatenate([jnp.ones_like(discount_t[:1]), cumulative[:-1]])
  reward = jnp.sum(jnp.where(in_window, before * r_t, 0.))
  discount = cumulative[last]
  return NStepOutput(reward=reward, discount=discount, last=last)


def n_step_returns(
    r_t: Array,
    discount_t: Array,
    end_t: Array,
    v_t: Array,
    *,
    n: int,
    stop_target_gradients: bool = True,
) -> Array:
  """Computes n-step bootstrapped return targets at every step of a sequence.

  For each start t the window covers steps t, ..., t + n - 1, cut at the first
  step k that ends the episode and at the end of the sequence (T - 1), and

    G_t = sum_{t <= j <= k} (prod_{t <= s < j} discount_s) r_j
          + (prod_{t <= s <= k} discount_s) v_k.

  `v_t[k]` must be the value of the TRUE next observation of step k (the final
  observation where the episode ended), so a truncated window bootstraps from
  the state it actually reached; on termination discount_k = 0 removes it
  (by a select: a NaN v_t there does not reach the returns).
  Every G_t equals `reward + discount * v_t[last]` of `n_step_transition` on
  the window starting at t.

  With no episode ends this is `rlax.n_step_bootstrapped_returns` (lambda 1),
  and with n >= T it is `rlax.lambda_returns` with lambda 1.

  See "Reinforcement Learning: An Introduction", Sutton & Barto, 2018, ch. 7
  (http://incompleteideas.net/book/the-book-2nd.html).

  Args:
    r_t: [T] float rewards.
    discount_t: [T] float discounts, gamma * (1 - terminated_t).
    end_t: [T] bool, True where the step ended its episode.
    v_t: [T] float values of the true next observation of each step.
    n: number of steps to accumulate before bootstrapping (static, >= 1).
    stop_target_gradients: whether to stop gradients through the targets.

  Returns:
    [T] float n-step return targets.
  """
  fn = 'n_step_returns'
  _checks.check_rank(fn, 1, r_t=r_t, discount_t=discount_t, end_t=end_t,
                     v_t=v_t)
  _checks.check_dtype(fn, float, r_t=r_t, discount_t=discount_t, v_t=v_t)
  _checks.check_dtype(fn, bool, end_t=end_t)
  _checks.check_same_shape(fn, r_t=r_t, discount_t=discount_t, end_t=end_t,
                           v_t=v_t)
  if n < 1:
    raise ValueError(f'n must be at least 1, got {n}.')
  seq_len = r_t.shape[0]

  # The end of the sequence cuts every window that reaches it, exactly like an
  # episode end (both bootstrap from v_t there). Steps past it are padding
  # that an end always masks out, so their values never matter.
  stop_t = jnp.asarray(end_t).at[-1].set(True)
  pad = n - 1
  r_pad = jnp.concatenate([r_t, jnp.zeros((pad,), r_t.dtype)])
  d_pad = jnp.concatenate([discount_t, jnp.zeros((pad,), discount_t.dtype)])
  v_pad = jnp.concatenate([v_t, jnp.zeros((pad,), v_t.dtype)])
  stop_pad = jnp.concatenate([stop_t, jnp.ones((pad,), bool)])

  # Fold the windows from their far end: after iteration i, `returns[t]` is
  # the return from step t + i onwards within the window that starts at t.
  returns = jnp.zeros((seq_len,), v_t.dtype)
  for i in reversed(range(n)):
    r_i = r_pad[i:i + seq_len]
    d_i = d_pad[i:i + seq_len]
    v_i = v_pad[i:i + seq_len]
    # The last step of a window bootstraps even without an episode end.
    bootstrap_here = stop_pad[i:i + seq_len] | (i == n - 1)
    returns = r_i + _discounted(d_i, jnp.where(bootstrap_here, v_i, returns))
  return _maybe_stop_gradient(returns, stop_target_gradients)


def lambda_returns(
    r_t: Array,
    discount_t: Array,
    end_t: Array,
    v_t: Array,
    *,
    lambda_: Numeric = 1.,
    stop_target_gradients: bool = True,
) -> Array:
  """Computes lambda-returns over a sequence, cutting the trace at episode ends.

  Iterates backwards from the last step:

    G_t = r_t + discount_t * v_t                                 if end_t
    G_t = r_t + discount_t * ((1 - lambda) v_t + lambda G_{t+1})  otherwise

  with G_{T-1} = r_{T-1} + discount_{T-1} v_{T-1}. Unlike `rlax.lambda_returns`
  the recursion never mixes two episodes, and `v_t[t]` is the value of the
  TRUE next observation of step t, so a truncated step bootstraps from the
  state it reached. A terminated step (discount 0) ignores its v_t, even a
  NaN one. With no episode ends it equals `rlax.lambda_returns`.

  See "Reinforcement Learning: An Introduction", Sutton & Barto, 2018, ch. 12
  (http://incompleteideas.net/book/the-book-2nd.html).

  Args:
    r_t: [T] float rewards.
    discount_t: [T] float discounts, gamma * (1 - terminated_t).
    end_t: [T] bool, True where the step ended its episode.
    v_t: [T] float values of the true next observation of each step.
    lambda_: mixing parameter, a scalar or a [T] vector.
    stop_target_gradients: whether to stop gradients through the targets.

  Returns:
    [T] float lambda-return targets.
  """
  fn = 'lambda_returns'
  _checks.check_rank(fn, 1, r_t=r_t, discount_t=discount_t, end_t=end_t,
                     v_t=v_t)
  _checks.check_rank(fn, {0, 1}, lambda_=lambda_)
  _checks.check_dtype(fn, float, r_t=r_t, discount_t=discount_t, v_t=v_t,
                      lambda_=lambda_)
  _checks.check_dtype(fn, bool, end_t=end_t)
  _checks.check_same_shape(fn, r_t=r_t, discount_t=discount_t, end_t=end_t,
                           v_t=v_t)
  lambda_t = jnp.broadcast_to(jnp.asarray(lambda_, v_t.dtype), v_t.shape)
  # An episode end (and the sequence end) forbids looking further ahead. A
  # select rather than lambda = 0 keeps a non-finite return of the next
  # episode from leaking in through 0 * inf.
  stop_t = jnp.asarray(end_t).at[-1].set(True)

  def step(g_next, xs):
    r, d, v, lam, stop = xs
    ahead = jnp.where(stop, v, (1. - lam) * v + lam * g_next)
    g = r + _discounted(d, ahead)
    return g, g

  _, returns = jax.lax.scan(
      step, jnp.zeros((), v_t.dtype),
      (r_t, discount_t, v_t, lambda_t, stop_t), reverse=True)
  return _maybe_stop_gradient(returns, stop_target_gradients)
