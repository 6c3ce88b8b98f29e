"""Aggregate statistics of RL results over runs and tasks, NumPy only.

The interquartile mean (IQM), stratified-bootstrap confidence intervals and
performance profiles of Agarwal et al. 2021, "Deep Reinforcement Learning at
the Edge of the Statistical Precipice" (https://arxiv.org/abs/2108.13264),
computed as their library rliable computes them, so that figures reported
here read like figures reported with it:

- `iqm` is rliable's `metrics.aggregate_iqm`, which is
  `scipy.stats.trim_mean(scores, 0.25, axis=None)`: the runs are sorted and
  floor(n / 4) of them are dropped at each end, the rest averaged. There is
  no fractional weighting at the quartiles: with 6 runs the middle 4 are
  averaged, and with 1 to 3 runs the IQM is the plain mean.
- `stratified_bootstrap` resamples runs with replacement within each task
  (a stratum), keeping each task's run count, and recomputes the statistic
  over all resampled runs together (rliable's `StratifiedBootstrap` without
  task resampling); `confidence_interval` takes the percentile interval of
  those statistics (rliable's default `method='percentile'`). Unlike rliable,
  tasks may have different run counts (a benchmark with missing seeds).
- `performance_profile` is rliable's score distribution: the fraction of all
  runs whose score exceeds each threshold tau, with its bootstrap band.

scipy is not a dependency: these are written from the definitions and tested
against NumPy computations and hand-computed cases.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence, Union

import numpy as np

ArrayLike = Union[np.ndarray, Sequence[float]]
# A statistic over runs: [..., N] scores -> [...] or [..., K] values; it must
# reduce the last axis so that a batch of resamples is one call.
Statistic = Callable[[np.ndarray], np.ndarray]


class Interval(NamedTuple):
  """A point estimate and its confidence interval."""
  point: np.ndarray  # [] or [K]: the statistic of the observed runs.
  low: np.ndarray  # Same shape: the lower end of the interval.
  high: np.ndarray  # Same shape: the upper end of the interval.


class Profile(NamedTuple):
  """A performance profile with its confidence band."""
  taus: np.ndarray  # [T] thresholds.
  fraction: np.ndarray  # [T] fraction of runs with score > tau.
  low: np.ndarray  # [T] lower end of the band.
  high: np.ndarray  # [T] upper end of the band.


def iqm(scores: ArrayLike, axis: int = -1) -> np.ndarray:
  """Interquartile mean: the mean after trimming a quarter of runs each end.

  Agarwal et al. 2021 (https://arxiv.org/abs/2108.13264), as rliable and
  `scipy.stats.trim_mean(scores, 0.25)` compute it: floor(n / 4) of the n
  sorted values are dropped at each end (no fractional weights), so for
  n <= 3 this is the mean.

  Args:
    scores: [..., N] scores (N >= 1 along `axis`), finite.
    axis: the axis of runs.

  Returns:
    [...] the IQM along `axis` (a NumPy scalar for 1-D input).

  Raises:
    ValueError: no scores along `axis`.
  """
  x = np.sort(np.asarray(scores, np.float64), axis=axis)
  n = x.shape[axis]
  if n == 0:
    raise ValueError('iqm of no scores.')
  cut = n // 4  # int(0.25 * n), scipy's rounding down.
  return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def fraction_above(scores: ArrayLike, taus: ArrayLike) -> np.ndarray:
  """The fraction of runs whose score exceeds each threshold (strictly).

  Args:
    scores: [..., N] scores, runs on the last axis.
    taus: [T] thresholds.

  Returns:
    [..., T] fraction of the N runs with score > tau.
  """
  x = np.asarray(scores, np.float64)
  t = np.asarray(taus, np.float64)
  return (x[..., None, :] > t[:, None]).mean(axis=-1)


def _strata(scores_by_task: Sequence[ArrayLike]) -> list:
  strata = [np.asarray(s, np.float64).reshape(-1) for s in scores_by_task]
  strata = [s for s in strata if s.size]  # A task without runs adds nothing.
  if not strata:
    raise ValueError('no scores: every task has zero runs.')
  for s in strata:
    if not np.isfinite(s).all():
      raise ValueError(f'scores must be finite, got {s}.')
  return strata


def stratified_bootstrap(scores_by_task: Sequence[ArrayLike],
                         statistic: Statistic = iqm, *,
                         num_resamples: int = 2000,
                         seed: int = 0) -> np.ndarray:
  """The statistic over stratified bootstrap resamples of runs.

  Each resample draws, for every task independently, as many runs as the
  task has, with replacement, from that task's runs; the statistic is then
  computed over all tasks' resampled runs concatenated (Agarwal et al. 2021,
  https://arxiv.org/abs/2108.13264, rliable's `StratifiedBootstrap`).

  Args:
    scores_by_task: one [N_m] array of run scores per task m; tasks with no
      runs are ignored. Run counts may differ between tasks.
    statistic: maps [B, N] scores (N = sum of N_m) to [B] or [B, K].
    num_resamples: B, the number of resamples.
    seed: seed of the NumPy generator (the same seed gives the same result).

  Returns:
    [B] or [B, K] the statistic of each resample.

  Raises:
    ValueError: no runs at all, non-finite scores, or num_resamples < 1.
  """
  if num_resamples < 1:
    raise ValueError(f'num_resamples must be >= 1, got {num_resamples}.')
  strata = _strata(scores_by_task)
  rng = np.random.default_rng(seed)
  resampled = [s[rng.integers(0, s.size, size=(num_resamples, s.size))]
               for s in strata]
  return np.asarray(statistic(np.concatenate(resampled, axis=1)))


def confidence_interval(scores_by_task: Sequence[ArrayLike],
                        statistic: Statistic = iqm, *,
                        confidence: float = 0.95,
                        num_resamples: int = 2000,
                        seed: int = 0) -> Interval:
  """A statistic over all runs and its stratified-bootstrap percentile CI.

  Agarwal et al. 2021 (https://arxiv.org/abs/2108.13264); the interval is
  the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles (linear
  interpolation) of `stratified_bootstrap`'s statistics.

  Args:
    scores_by_task: one [N_m] array of run scores per task (see
      `stratified_bootstrap`); one task is a plain bootstrap over runs.
    statistic: maps [B, N] scores to [B] or [B, K]; default `iqm`.
    confidence: the coverage, in (0, 1).
    num_resamples: bootstrap resamples.
    seed: seed of the resampling.

  Returns:
    Interval(point, low, high), each [] or [K]. With a single run the
    interval is that run's score at both ends.

  Raises:
    ValueError: no runs, non-finite scores, or confidence outside (0, 1).
  """
  if not 0.0 < confidence < 1.0:
    raise ValueError(f'confidence must be in (0, 1), got {confidence}.')
  strata = _strata(scores_by_task)
  point = np.asarray(statistic(np.concatenate(strata)[None, :]))[0]
  stats = stratified_bootstrap(strata, statistic, num_resamples=num_resamples,
                               seed=seed)
  alpha = 1.0 - confidence
  low, high = np.quantile(stats, [alpha / 2, 1.0 - alpha / 2], axis=0)
  return Interval(point=point, low=low, high=high)


def performance_profile(scores_by_task: Sequence[ArrayLike],
                        taus: ArrayLike, *, confidence: float = 0.95,
                        num_resamples: int = 2000,
                        seed: int = 0) -> Profile:
  """The run-score distribution over thresholds, with a bootstrap band.

  Agarwal et al. 2021 (https://arxiv.org/abs/2108.13264), rliable's
  `create_performance_profile` with `use_score_distribution=True`: at each
  tau, the fraction of all runs (of all tasks) scoring above tau; the band
  is the stratified-bootstrap percentile interval at each tau.

  Args:
    scores_by_task: one [N_m] array of run scores per task.
    taus: [T] thresholds.
    confidence: coverage of the band.
    num_resamples: bootstrap resamples.
    seed: seed of the resampling.

  Returns:
    Profile(taus [T], fraction [T], low [T], high [T]); fraction is
    non-increasing in tau.
  """
  t = np.asarray(taus, np.float64).reshape(-1)
  ci = confidence_interval(scores_by_task, lambda x: fraction_above(x, t),
                           confidence=confidence, num_resamples=num_resamples,
                           seed=seed)
  return Profile(taus=t, fraction=ci.point, low=ci.low, high=ci.high)
