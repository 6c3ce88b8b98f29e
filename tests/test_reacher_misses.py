"""benchmarks/reacher_misses.py: the arm's reach, and its bad input."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))

import reacher_misses  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_the_arms_reach_by_hand():
  # Two 0.12 m links; the wrist bends at most 160 degrees either way, so
  # the fingertip is between 0.24 cos(80 deg) = 0.0417 m and 0.24 m from
  # the base, at any angle (the shoulder is unlimited).
  arm = reacher_misses.Arm()
  np.testing.assert_allclose(arm.fingertip([0.0, 0.0]), [0.24, 0.0],
                             atol=1e-9)
  np.testing.assert_allclose(arm.fingertip([np.pi / 2, 0.0]), [0.0, 0.24],
                             atol=1e-9)
  np.testing.assert_allclose(arm.fingertip([0.0, np.pi / 2]), [0.12, 0.12],
                             atol=1e-9)
  inner = 0.24 * np.cos(np.radians(80))
  assert arm.closest([0.0, 0.0]) == pytest.approx(inner, abs=1e-3)
  assert arm.closest([0.0, -0.30]) == pytest.approx(0.06, abs=1e-3)
  # The suite's targets (0.05 to 0.20 from the base) are all in reach.
  for r, angle in ((0.05, 0.3), (0.157, 4.0), (0.20, 2.0)):
    assert arm.closest([r * np.sin(angle), r * np.cos(angle)]) < 0.003


def test_bad_bundles_exit_2(tmp_path, capsys):
  assert reacher_misses.main([str(tmp_path / 'nowhere')]) == 2
  assert 'reacher_misses.py:' in capsys.readouterr().err
  # A shipped policy of another task.
  assert reacher_misses.main(['CartpoleSwingup-sac']) == 2
  assert 'give a ReacherEasy or ReacherHard bundle' in capsys.readouterr().err
