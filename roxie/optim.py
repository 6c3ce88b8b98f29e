"""Optimiser constructors the recipes share."""

from typing import Optional

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
