"""Optimiser constructors and the optimiser step the recipes share."""

from typing import Optional, Tuple

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
