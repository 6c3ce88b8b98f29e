"""Running observation statistics, accurate in float32 over 10^9 samples.

`normalizer_update` merges each batch's mean and variance into the running
ones with the parallel algorithm of Chan, Golub and LeVeque ("Updating
Formulae and a Pairwise Algorithm for Computing Sample Variances", 1979,
http://i.stanford.edu/pub/cstr/reports/cs/tr/79/773/CS-TR-79-773.pdf), in
increment form:

  w = n_b / (n_a + n_b),  delta = mean_b - mean_a
  mean = mean_a + w delta
  var  = var_a + w ((var_b - var_a) + (1 - w) delta^2)

Two things go wrong in plain float32 over a long run, and are avoided here:

* The count. float32 holds integers exactly only up to 2^24 (~1.7e7) and
  int32 overflows at 2^31 (~2.1e9 samples: 256 envs for 8.4e6 steps). The
  count is kept as two int32 words, count = high * 2^30 + low with
  0 <= low < 2^30, exact up to 2^61, with no float64 (which JAX disables by
  default).
* The accumulators. Late in a run each increment w * ... is ~1e-6 of the
  running value, so rounding it into a float32 loses a few bits every update;
  over 10^6 updates that drifts visibly. Mean and variance are therefore kept
  as unevaluated sums hi + lo of two float32s, accumulated with an error-free
  TwoSum (compensated summation), which carries ~48 significant bits.

Like optax's stateful pieces these are pure functions over a NamedTuple.

Dict observations (pixels, see `roxie.types.EnvSpec.obs_shapes`) are
normalised entry by entry: `observation_normalizer_init` keeps statistics for
the float vector entries ('state', 'sensors') only, and `normalizer_update`
and `normalize` pass every other entry (the uint8 images) through untouched.
"""

from typing import Any, Dict, NamedTuple, Optional, Union

import chex
import jax
import jax.numpy as jnp

Array = chex.Array

_LOW_BITS = 30
_LOW_BASE = 1 << _LOW_BITS


class NormalizerState(NamedTuple):
  """Running count, mean and (population) variance of [O] features."""
  count: Array  # [2] int32 (high, low): count = high * 2^30 + low.
  mean: Array  # [O] float32 running mean (leading part).
  mean_lo: Array  # [O] float32 rounding error of `mean` (trailing part).
  var: Array  # [O] float32 running variance (leading part).
  var_lo: Array  # [O] float32 rounding error of `var` (trailing part).


def normalizer_init(size: int) -> NormalizerState:
  """Statistics of no samples: mean 0 and variance 1 (normalising is identity).

  Args:
    size: O, the number of features.

  Returns:
    The initial `NormalizerState`.
  """
  zeros = jnp.zeros((size,), jnp.float32)
  return NormalizerState(count=jnp.zeros((2,), jnp.int32), mean=zeros,
                         mean_lo=zeros, var=jnp.ones((size,), jnp.float32),
                         var_lo=zeros)


def observation_normalizer_init(
    spec: Any) -> Union[NormalizerState, Dict[str, NormalizerState]]:
  """Statistics for an environment's observations (a `roxie.types.EnvSpec`).

  Flat observations get one `NormalizerState` of `spec.obs_size`. Dict
  observations get a dict of them, one per float vector entry (rank-1
  per-env shape, e.g. 'state' and 'sensors'); images are never normalised.

  Args:
    spec: the environment's spec (`obs_size`, `obs_shapes`).

  Returns:
    A `NormalizerState`, or a dict of them keyed like the observation.
  """
  shapes = getattr(spec, 'obs_shapes', None)
  if shapes is None:
    return normalizer_init(spec.obs_size)
  return {key: normalizer_init(int(shape[0])) for key, shape, dtype in shapes
          if len(shape) == 1 and jnp.issubdtype(jnp.dtype(dtype), jnp.floating)}


def _by_entry(state, batch, fn):
  """fn(state[k], batch[k]) for each normalised entry; others pass through."""
  if not hasattr(batch, 'keys'):
    raise ValueError(f'These statistics are for dict observations (entries '
                     f'{sorted(state)}), got a {type(batch).__name__}.')
  missing = set(state) - set(batch.keys())
  if missing:
    raise ValueError(f'The observation has no {sorted(missing)} entries.')
  return {k: fn(state[k], batch[k]) if k in state else batch[k]
          for k in batch.keys()}


def normalizer_as_dict(state):
  """Statistics as plain dicts of arrays, what policy bundles hold.

  Args:
    state: a `NormalizerState`, or a dict of them (dict observations).

  Returns:
    Its fields as a dict, or a dict of such dicts; `normalizer_from_dict`
    reads either back.
  """
  if isinstance(state, dict):
    return {k: v._asdict() for k, v in state.items()}
  return state._asdict()


def normalizer_from_dict(d: Dict[str, Any]):
  """The statistics `normalizer_as_dict` wrote: one state, or a dict of them."""
  if set(d) == set(NormalizerState._fields):
    return NormalizerState(**d)
  return {k: NormalizerState(**v) for k, v in d.items()}


def normalizer_count(state: NormalizerState) -> Array:
  """[] float32 number of samples seen (rounded; `state.count` is exact)."""
  high, low = state.count[0], state.count[1]
  return high.astype(jnp.float32) * float(_LOW_BASE) + low.astype(jnp.float32)


def _add_count(count: Array, n: Array) -> Array:
  # n < 2^30 and low < 2^30, so low + n fits in int32 before the carry.
  low = count[1] + n
  return jnp.stack([count[0] + (low >> _LOW_BITS), low & (_LOW_BASE - 1)])


def _compensated_add(hi: Array, lo: Array, x: Array):
  """(hi + lo) + x as a new hi + lo pair (double-float addition)."""
  s = hi + x
  # TwoSum: err is exactly (hi + x) - s.
  b = s - hi
  err = (hi - (s - b)) + (x - b)
  lo = lo + err
  # Renormalise so that |lo| stays below half an ulp of hi.
  new_hi = s + lo
  return new_hi, lo - (new_hi - s)


def normalizer_merge(state: NormalizerState, count: Array, mean: Array,
                     var: Array) -> NormalizerState:
  """Merges the statistics of a batch summarised elsewhere.

  Useful to combine statistics across devices (all-gather or sum per-device
  summaries first) or to merge two normalisers.

  Args:
    state: the running statistics.
    count: [] int32 number of samples in the batch, 0 <= count < 2^30.
    mean: [O] batch mean.
    var: [O] batch population variance (mean squared deviation).

  Returns:
    The merged statistics. A batch with count 0 changes nothing.
  """
  chex.assert_shape([mean, var], state.mean.shape)
  count = jnp.asarray(count, jnp.int32)
  chex.assert_rank(count, 0)
  new_count = _add_count(state.count, count)
  # The weight needs only float32 precision: it scales a small increment.
  weight = jnp.where(
      count > 0,
      count.astype(jnp.float32) / jnp.maximum(
          normalizer_count(state._replace(count=new_count)), 1.), 0.)
  delta = (mean.astype(jnp.float32) - state.mean) - state.mean_lo
  mean_hi, mean_lo = _compensated_add(state.mean, state.mean_lo,
                                      weight * delta)
  var_step = weight * (((var.astype(jnp.float32) - state.var) - state.var_lo)
                       + (1. - weight) * jnp.square(delta))
  var_hi, var_lo = _compensated_add(state.var, state.var_lo, var_step)
  # The first batch replaces the placeholder variance of 1 outright: merging
  # it would round a tiny batch variance against 1.
  first = jnp.all(state.count == 0) & (count > 0)
  take = lambda batch, merged: jnp.where(first, batch, merged)
  zeros = jnp.zeros_like(state.mean)
  return NormalizerState(
      count=new_count,
      mean=take(mean.astype(jnp.float32), mean_hi),
      mean_lo=take(zeros, mean_lo),
      var=take(var.astype(jnp.float32), var_hi),
      var_lo=take(zeros, var_lo))


def normalizer_update(state: NormalizerState, batch: Array) -> NormalizerState:
  """Folds a batch of observations into the running statistics.

  Args:
    state: the running statistics (or a dict of them from
      `observation_normalizer_init`, for dict observations).
    batch: [..., O] observations; all leading axes are samples (at most
      2^30 - 1 of them per call). A dict observation for dict statistics:
      only the entries with statistics are read.

  Returns:
    The updated statistics.
  """
  if isinstance(state, dict):
    updated = _by_entry(state, batch, normalizer_update)
    return {k: updated[k] for k in state}
  size = state.mean.shape[0]
  chex.assert_axis_dimension(batch, -1, size)
  flat = jnp.reshape(batch, (-1, size)).astype(jnp.float32)
  num = flat.shape[0]
  if num == 0:
    return state
  if num >= _LOW_BASE:
    raise ValueError(f'A batch of {num} samples is too large; split it.')
  # Two passes over the batch: the centred second moment has no cancellation.
  batch_mean = jnp.mean(flat, axis=0)
  batch_var = jnp.mean(jnp.square(flat - batch_mean[None, :]), axis=0)
  return normalizer_merge(state, jnp.int32(num), batch_mean, batch_var)


def normalize(state: NormalizerState, x: Array, *, epsilon: float = 1e-8,
              clip: Optional[float] = None) -> Array:
  """Standardises observations with the running statistics.

  Args:
    state: the running statistics (or a dict of them, for dict observations).
    x: [..., O] observations (a dict with dict statistics: its entries with
      statistics are standardised, the others, images, returned unchanged).
    epsilon: added to the variance, so constant features stay finite.
    clip: if given, the result is clipped to [-clip, clip].

  Returns:
    [..., O] (x - mean) / sqrt(var + epsilon), in x's dtype.
  """
  if isinstance(state, dict):
    return _by_entry(state, x, lambda s, v: normalize(
        s, v, epsilon=epsilon, clip=clip))
  chex.assert_axis_dimension(x, -1, state.mean.shape[0])
  mean = jnp.broadcast_to(state.mean + state.mean_lo, x.shape)
  scale = jnp.broadcast_to(jax.lax.rsqrt(state.var + state.var_lo + epsilon),
                           x.shape)
  out = (x - mean) * scale
  if clip is not None:
    out = jnp.clip(out, -clip, clip)
  return out.astype(jnp.asarray(x).dtype)
