"""Optimiser constructors and the optimiser steps the recipes share.

Besides optax's per-tree steps, a flat-vector Adam for updates that take
many small steps: raveling the parameters once per update and stepping one
[P] vector costs a handful of fused XLA kernels per step where a tree of
leaves costs several per leaf, which dominates on a CPU at small sizes.
"""

from typing import Any, NamedTuple, Optional, Sequence, Tuple

import jax
from jax import flatten_util
import jax.numpy as jnp
import numpy as np
import optax


def adam(learning_rate: float,
         max_grad_norm: Optional[float] = None) -> optax.GradientTransformation:
  """Adam, after clipping the gradients' global norm to `max_grad_norm`.

  Args:
    learning_rate: Adam's step size.
    max_grad_norm: clip threshold of the global gradient norm; None for no
      clipping (plain `optax.adam`).

  Returns:
    An optax gradient transformation.
  """
  opt = optax.adam(learning_rate)
  if max_grad_norm is None:
    return opt
  return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)


def step(optimizer: optax.GradientTransformation, params: optax.Params,
         opt_state: optax.OptState,
         grads: optax.Updates) -> Tuple[optax.Params, optax.OptState]:
  """One optimiser step: the updates of `grads`, applied to `params`.

  Args:
    optimizer: an optax gradient transformation (e.g. from `adam`).
    params: the parameters the gradients are of (some transformations, such
      as weight decay, read them).
    opt_state: the optimiser's state for `params`.
    grads: gradients of the loss, shaped like `params`.

  Returns:
    (new params, new optimiser state).
  """
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state


class FlatAdamState(NamedTuple):
  """Adam's moments over one flat parameter vector."""
  count: jnp.ndarray  # [] int32 steps taken.
  mu: jnp.ndarray  # [P] first moment.
  nu: jnp.ndarray  # [P] second moment.


def _adam_states(opt_state: optax.OptState):
  """The `optax.ScaleByAdamState`s inside an optax state, in tree order."""
  is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)
  return [x for x in jax.tree.leaves(opt_state, is_leaf=is_adam)
          if is_adam(x)]


def ravel_adam_states(opt_states: Sequence[optax.OptState]) -> FlatAdamState:
  """One `FlatAdamState` from the Adam states of several optax optimisers.

  The moments are raveled in the order `jax.flatten_util.ravel_pytree`
  ravels the matching sequence of parameter trees, so the flat moments line
  up with `ravel_pytree(tuple(params))`. The optimisers must have stepped
  together (equal counts); the first one's count is kept.

  Args:
    opt_states: the optax states, each holding exactly one
      `optax.ScaleByAdamState` (e.g. of `scale_by_adam`, or a chain of a
      stateless clip and Adam).

  Returns:
    The flat state: [P] moments, P the total parameter count.
  """
  adams = [_adam_states(s) for s in opt_states]
  if any(len(a) != 1 for a in adams):
    raise ValueError('ravel_adam_states: each optimiser state must hold '
                     'exactly one ScaleByAdamState.')
  adams = [a[0] for a in adams]
  mu, _ = flatten_util.ravel_pytree(tuple(a.mu for a in adams))
  nu, _ = flatten_util.ravel_pytree(tuple(a.nu for a in adams))
  return FlatAdamState(count=adams[0].count, mu=mu, nu=nu)


def unravel_adam_states(flat: FlatAdamState,
                        like: Sequence[optax.OptState]) -> Tuple[Any, ...]:
  """The inverse of `ravel_adam_states`: optax states shaped like `like`.

  Args:
    flat: the flat state.
    like: the optax states `flat` was raveled from (only their structure and
      shapes are read).

  Returns:
    A tuple of optax states with `flat`'s count and moments.
  """
  adams = [_adam_states(s)[0] for s in like]
  _, unravel = flatten_util.ravel_pytree(tuple(a.mu for a in adams))
  mus, nus = unravel(flat.mu), unravel(flat.nu)
  is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)
  return tuple(
      jax.tree.map(
          lambda x, m=m, n=n: (x._replace(count=flat.count, mu=m, nu=n)
                               if is_adam(x) else x), s, is_leaf=is_adam)
      for s, m, n in zip(like, mus, nus))


def clip_segments_by_norm(grads: jnp.ndarray, sizes: Sequence[int],
                          max_norm: float) -> jnp.ndarray:
  """Clips each segment of a flat gradient to an L2 norm of `max_norm`.

  Segment k is `grads[sum(sizes[:k]):sum(sizes[:k + 1])]`; each is scaled as
  `optax.clip_by_global_norm(max_norm)` scales a whole tree (unchanged below
  the threshold, else times max_norm / norm), so clipping the flat vector of
  several networks equals clipping each network's tree on its own.

  Args:
    grads: [P] flat gradients, P = sum(sizes).
    sizes: the segments' lengths, in order.
    max_norm: the threshold of each segment's norm.

  Returns:
    [P] clipped gradients.
  """
  if sum(sizes) != grads.shape[0]:
    raise ValueError(f'clip_segments_by_norm: sizes {tuple(sizes)} do not '
                     f'add up to the {grads.shape[0]} gradients.')
  bounds = np.cumsum(sizes)
  sq = jnp.square(grads)
  norms = [jnp.sqrt(jnp.sum(sq[lo:hi]))
           for lo, hi in zip(np.concatenate([[0], bounds[:-1]]), bounds)]
  # Each element's segment norm, selected by position (fuses into one
  # elementwise pass).
  index = jnp.arange(grads.shape[0])
  norm = norms[-1]
  for bound, seg_norm in reversed(list(zip(bounds[:-1], norms[:-1]))):
    norm = jnp.where(index < bound, seg_norm, norm)
  return jnp.where(norm < max_norm, grads, (grads / norm) * max_norm)


def adam_direction(grads: jnp.ndarray, state: FlatAdamState, *,
                   b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
                   ) -> Tuple[jnp.ndarray, FlatAdamState]:
  """Adam's bias-corrected direction for a flat gradient (no step size).

  The same arithmetic as `optax.scale_by_adam(b1, b2, eps)` on one array;
  the caller scales the direction by its (possibly adaptive) step size:
  params - learning_rate * direction.

  Args:
    grads: [P] gradients.
    state: the moments of the previous steps.
    b1: decay of the first moment.
    b2: decay of the second moment.
    eps: added to the denominator's square root.

  Returns:
    ([P] direction, new state).
  """
  mu = (1. - b1) * grads + b1 * state.mu
  nu = (1. - b2) * jnp.square(grads) + b2 * state.nu
  count = optax.safe_increment(state.count)
  mu_hat = mu / (1. - b1 ** count).astype(mu.dtype)
  nu_hat = nu / (1. - b2 ** count).astype(nu.dtype)
  return mu_hat / (jnp.sqrt(nu_hat) + eps), FlatAdamState(count, mu, nu)
