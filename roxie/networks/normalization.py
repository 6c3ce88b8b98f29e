"""Batch (re)normalisation with running statistics, and an MLP torso using it.

"Batch Renormalization: Towards Reducing Minibatch Dependence in
Batch-Normalized Models", Ioffe, 2017 (https://arxiv.org/abs/1702.03275).
CrossQ ("CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity", Bhatt et al., ICLR 2024,
https://arxiv.org/abs/1902.05605) normalises its critics this way.

These modules hold state (the running mean and variance): build them inside
`hk.transform_with_state`, and in an ensemble with
`torsos.ensemble(..., stateful=True)`. Applying them in training mode returns
the updated statistics as the new haiku state; in evaluation mode the state
comes back unchanged.
"""

from typing import Callable, Optional, Sequence

import chex
import haiku as hk
import jax
import jax.numpy as jnp

from roxie.networks import torsos

Array = chex.Array


class BatchRenorm(hk.Module):
  """Batch renormalisation of the last axis over all leading (batch) axes.

  Training (`is_training=True`), with the batch's mean mu_B and standard
  deviation sigma_B = sqrt(var_B + eps) and the running mu and
  sigma = sqrt(var + eps):

    x_hat = (x - mu_B) / sigma_B * r + d
    r = stop_gradient(clip(sigma_B / sigma, 1 / r_max, r_max))
    d = stop_gradient(clip((mu_B - mu) / sigma, -d_max, d_max))

  then mu and var move towards mu_B and var_B (the biased batch variance) by
  a factor (1 - momentum). During the first `warmup_steps` training calls
  r = 1 and d = 0: plain batch normalisation, while the running statistics
  are still far from the data's. `r_max=1, d_max=0` is batch normalisation
  throughout (`BatchRenorm.batch_norm`). Evaluation: x_hat = (x - mu) /
  sigma, and the state is not changed. The output is scale * x_hat + offset
  (learned, per feature).

  The running statistics start at mean 0 and variance 1 and are not moved
  while initialising. The variance is averaged rather than the standard
  deviation (the paper averages sigma), as Keras, Flax and CrossQ's own
  code do.
  """

  def __init__(self,
               *,
               momentum: float = 0.99,
               eps: float = 1e-3,
               r_max: float = 3.,
               d_max: float = 5.,
               warmup_steps: int = 0,
               create_scale: bool = True,
               create_offset: bool = True,
               name: Optional[str] = None):
    """Builds the layer.

    Args:
      momentum: the running statistics keep this fraction per training call.
      eps: added to variances before the square root.
      r_max: bound of the scale correction r, >= 1.
      d_max: bound of the shift correction d, >= 0.
      warmup_steps: training calls of plain batch normalisation first.
      create_scale: whether to learn a per-feature scale (else 1).
      create_offset: whether to learn a per-feature offset (else 0).
      name: module name.
    """
    super().__init__(name=name)
    if not 0. <= momentum < 1.:
      raise ValueError(f'momentum must lie in [0, 1), got {momentum}.')
    if r_max < 1. or d_max < 0.:
      raise ValueError(f'Need r_max >= 1 and d_max >= 0, got {r_max} and '
                       f'{d_max}.')
    self._momentum = momentum
    self._eps = eps
    self._r_max = r_max
    self._d_max = d_max
    self._warmup_steps = warmup_steps
    self._create_scale = create_scale
    self._create_offset = create_offset

  @classmethod
  def batch_norm(cls, **kwargs) -> 'BatchRenorm':
    """Batch normalisation ("Batch Normalization", Ioffe and Szegedy, 2015,
    https://arxiv.org/abs/1502.03167): r = 1 and d = 0 always."""
    return cls(r_max=1., d_max=0., **kwargs)

  def __call__(self, x: Array, is_training: bool) -> Array:
    """Normalises x [..., C] (training: over every axis but the last).

    Args:
      x: inputs [..., C]; in training at least two rows in all.
      is_training: use (and update) the batch's statistics, or use the
        running ones. A Python bool.

    Returns:
      [..., C], like x.
    """
    torsos.check_last_axis(x, None, 'input', self.module_name)
    c = jnp.shape(x)[-1]
    mean = hk.get_state('mean', [c], jnp.float32, init=jnp.zeros)
    var = hk.get_state('var', [c], jnp.float32, init=jnp.ones)
    steps = hk.get_state('steps', [], jnp.int32, init=jnp.zeros)
    # Per-feature vectors as [1, ..., 1, C] rows: broadcasting stays explicit.
    row = lambda v: jnp.reshape(v, (1,) * (jnp.ndim(x) - 1) + (c,))
    sigma = jnp.sqrt(var + self._eps)
    if is_training:
      axes = tuple(range(jnp.ndim(x) - 1))
      batch_mean = jnp.mean(x, axis=axes)
      batch_var = jnp.var(x, axis=axes)
      batch_sigma = jnp.sqrt(batch_var + self._eps)
      r = jnp.clip(batch_sigma / sigma, 1. / self._r_max, self._r_max)
      d = jnp.clip((batch_mean - mean) / sigma, -self._d_max, self._d_max)
      renorm = steps >= self._warmup_steps
      r = jax.lax.stop_gradient(jnp.where(renorm, r, 1.))
      d = jax.lax.stop_gradient(jnp.where(renorm, d, 0.))
      x_hat = (x - row(batch_mean)) / row(batch_sigma) * row(r) + row(d)
      if not hk.running_init():
        keep = self._momentum
        hk.set_state('mean', keep * mean + (1. - keep) *
                     jax.lax.stop_gradient(batch_mean))
        hk.set_state('var', keep * var + (1. - keep) *
                     jax.lax.stop_gradient(batch_var))
        hk.set_state('steps', steps + 1)
    else:
      x_hat = (x - row(mean)) / row(sigma)
    if self._create_scale:
      x_hat = x_hat * row(hk.get_parameter('scale', [c], x.dtype,
                                           init=jnp.ones))
    if self._create_offset:
      x_hat = x_hat + row(hk.get_parameter('offset', [c], x.dtype,
                                           init=jnp.zeros))
    return x_hat


class BatchRenormMLP(hk.Module):
  """An MLP torso normalised as CrossQ's critic: BatchRenorm first and after
  every activation (input -> BRN -> [Linear -> activation -> BRN] x L).
  """

  def __init__(self,
               hidden_sizes: Sequence[int],
               *,
               activation: Callable[[Array], Array] = jax.nn.relu,
               name: Optional[str] = None,
               **renorm_kwargs):
    """Builds the torso.

    Args:
      hidden_sizes: widths of the layers, in order.
      activation: elementwise nonlinearity after each linear layer.
      name: module name.
      **renorm_kwargs: keyword arguments of every `BatchRenorm` (momentum,
        eps, r_max, d_max, warmup_steps).
    """
    super().__init__(name=name)
    self._hidden_sizes = tuple(hidden_sizes)
    self._activation = activation
    self._renorm_kwargs = renorm_kwargs

  def __call__(self, x: Array, is_training: bool) -> Array:
    """Maps [..., D] inputs to [..., hidden_sizes[-1]] features."""
    x = BatchRenorm(name='batch_renorm_input', **self._renorm_kwargs)(
        x, is_training)
    for i, size in enumerate(self._hidden_sizes):
      x = self._activation(hk.Linear(size, name=f'linear_{i}')(x))
      x = BatchRenorm(name=f'batch_renorm_{i}', **self._renorm_kwargs)(
          x, is_training)
    return x
