"""roxie.stats: IQM, stratified bootstrap intervals, performance profiles."""

import numpy as np
import pytest

from roxie import stats


@pytest.mark.parametrize('scores, expected', [
    # n = 4: one run dropped each end -> mean(2, 3).
    ([4.0, 1.0, 3.0, 2.0], 2.5),
    # n = 5: floor(5 / 4) = 1 dropped each end -> mean(1, 2, 3), the 10 gone.
    ([10.0, 0.0, 3.0, 1.0, 2.0], 2.0),
    # n = 6: still one each end (no fractional weights) -> mean(1, 2, 3, 4).
    ([0.0, 1.0, 2.0, 3.0, 4.0, 100.0], 2.5),
    # n = 8: two each end -> mean(2, 3, 4, 5).
    ([100.0, -50.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0], 3.5),
    # Ties across the quartile: sorted [1, 1, 1, 5] -> mean(1, 1).
    ([1.0, 5.0, 1.0, 1.0], 1.0),
    # Ties in the middle: sorted [0, 2, 2, 2, 2, 9, 9, 9] -> mean(2, 2, 2, 9).
    ([9.0, 2.0, 0.0, 2.0, 9.0, 2.0, 2.0, 9.0], 3.75),
    # n <= 3: nothing is trimmed, the IQM is the mean.
    ([7.0], 7.0),
    ([1.0, 4.0], 2.5),
    ([0.0, 1.0, 11.0], 4.0),
])
def test_iqm_hand_computed(scores, expected):
  assert stats.iqm(scores) == pytest.approx(expected, abs=1e-12)


def test_iqm_matches_a_numpy_trimmed_mean_and_scipy_where_installed():
  rng = np.random.default_rng(0)
  for n in range(1, 40):
    x = rng.normal(size=n) * 100
    k = n // 4
    reference = np.sort(x)[k:n - k].mean()
    assert stats.iqm(x) == pytest.approx(reference, rel=1e-12)
  scipy_stats = pytest.importorskip('scipy.stats')
  for n in (1, 2, 5, 6, 7, 10, 31):  # rliable's aggregate_iqm is this call.
    x = rng.normal(size=n)
    assert stats.iqm(x) == pytest.approx(
        scipy_stats.trim_mean(x, proportiontocut=0.25, axis=None), rel=1e-12)


def test_iqm_of_a_constant_is_the_constant_and_order_does_not_matter():
  assert stats.iqm(np.full(9, 3.25)) == 3.25
  x = np.array([5.0, -1.0, 8.0, 2.0, 2.0, 7.0, 0.5])
  rng = np.random.default_rng(1)
  for _ in range(10):
    assert stats.iqm(rng.permutation(x)) == stats.iqm(x)


def test_iqm_along_an_axis_is_the_iqm_of_each_row():
  x = np.array([[4.0, 1.0, 3.0, 2.0], [10.0, 0.0, 0.0, 0.0]])
  np.testing.assert_allclose(stats.iqm(x, axis=-1), [2.5, 0.0])
  np.testing.assert_allclose(stats.iqm(x.T, axis=0), [2.5, 0.0])


def test_iqm_of_nothing_is_an_error():
  with pytest.raises(ValueError, match='no scores'):
    stats.iqm([])


def test_fraction_above_is_strict_and_non_increasing():
  x = np.array([0.0, 1.0, 1.0, 3.0])
  np.testing.assert_allclose(stats.fraction_above(x, [-1.0, 0.0, 1.0, 3.0]),
                             [1.0, 0.75, 0.25, 0.0])


def test_bootstrap_resamples_within_each_task():
  # Task A's runs are all 0, task B's all 10: any stratified resample keeps
  # 2 zeros and 3 tens, so the mean never moves (an unstratified bootstrap
  # of the five runs would).
  resampled = stats.stratified_bootstrap(
      [[0.0, 0.0], [10.0, 10.0, 10.0]], lambda x: x.mean(-1),
      num_resamples=500, seed=3)
  assert resampled.shape == (500,)
  np.testing.assert_allclose(resampled, 6.0)


def test_bootstrap_statistic_is_recomputed_over_the_concatenated_resample():
  # Each task's runs are equal, so every resample is the observed runs:
  # the IQM of [0, 0, 0, 0, 100] is 0 (the 100 trimmed), whereas a mean of
  # per-task IQMs would be 50.
  resampled = stats.stratified_bootstrap([[0.0] * 4, [100.0]], stats.iqm,
                                         num_resamples=10)
  np.testing.assert_allclose(resampled, 0.0)


def test_bootstrap_draws_match_a_numpy_loop_with_the_same_generator():
  tasks = [np.array([1.0, 5.0, 2.0]), np.array([7.0, 3.0])]
  got = stats.stratified_bootstrap(tasks, stats.iqm, num_resamples=50, seed=9)
  rng = np.random.default_rng(9)
  idx = [rng.integers(0, t.size, size=(50, t.size)) for t in tasks]
  expected = [stats.iqm(np.concatenate([t[i[b]] for t, i in zip(tasks, idx)]))
              for b in range(50)]
  np.testing.assert_allclose(got, expected)


def test_interval_contains_the_point_and_shrinks_with_more_runs():
  rng = np.random.default_rng(0)
  widths = []
  for n in (5, 50):
    tasks = [rng.normal(loc=m, scale=50.0, size=n) for m in (100.0, 500.0)]
    ci = stats.confidence_interval(tasks, num_resamples=1000, seed=0)
    assert ci.low <= ci.point <= ci.high
    assert ci.point == pytest.approx(stats.iqm(np.concatenate(tasks)))
    widths.append(ci.high - ci.low)
  assert widths[1] < 0.5 * widths[0]  # ~1 / sqrt(10) expected.


def test_interval_of_a_single_run_is_that_run():
  ci = stats.confidence_interval([[612.5]])
  assert (ci.point, ci.low, ci.high) == (612.5, 612.5, 612.5)
  # Tasks with no runs are skipped; no runs at all is an error.
  ci = stats.confidence_interval([[], [3.0]])
  assert (ci.point, ci.low, ci.high) == (3.0, 3.0, 3.0)
  with pytest.raises(ValueError, match='zero runs'):
    stats.confidence_interval([[], []])
  with pytest.raises(ValueError, match='finite'):
    stats.confidence_interval([[1.0, np.nan]])
  with pytest.raises(ValueError, match='confidence'):
    stats.confidence_interval([[1.0]], confidence=1.0)


def test_interval_is_reproducible_with_a_seed():
  tasks = [[1.0, 9.0, 4.0, 6.0], [30.0, 10.0, 20.0]]
  a = stats.confidence_interval(tasks, seed=7)
  b = stats.confidence_interval(tasks, seed=7)
  c = stats.confidence_interval(tasks, seed=8)
  assert (a.low, a.high) == (b.low, b.high)
  assert (a.low, a.high) != (c.low, c.high)


def test_interval_is_the_percentile_of_the_resampled_statistics():
  tasks = [[1.0, 9.0, 4.0, 6.0, 2.0], [30.0, 10.0, 20.0]]
  draws = stats.stratified_bootstrap(tasks, stats.iqm, num_resamples=400,
                                     seed=4)
  ci = stats.confidence_interval(tasks, confidence=0.9, num_resamples=400,
                                 seed=4)
  assert ci.low == pytest.approx(np.percentile(draws, 5))
  assert ci.high == pytest.approx(np.percentile(draws, 95))


def test_performance_profile_and_band():
  tasks = [[0.1, 0.5, 0.9], [0.2, 0.6]]
  taus = np.linspace(0.0, 1.0, 11)
  p = stats.performance_profile(tasks, taus, num_resamples=300, seed=0)
  # Hand count over the five runs: all exceed tau = 0; above 0.5 only 0.6
  # and 0.9 (the comparison is strict); none exceeds 1.
  assert p.fraction[0] == 1.0
  assert p.fraction[5] == pytest.approx(2 / 5)
  assert p.fraction[10] == 0.0
  assert np.all(np.diff(p.fraction) <= 0)
  assert np.all(p.low <= p.fraction + 1e-12)
  assert np.all(p.fraction <= p.high + 1e-12)
  assert p.low[0] == p.high[0] == 1.0  # Every resample is above 0.
  assert p.low[5] < p.high[5]
