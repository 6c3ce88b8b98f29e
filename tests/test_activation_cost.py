"""benchmarks/activation_cost.py: the A/B it prints, and its bad input."""

import os
import sys

import jax
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))

import activation_cost  # pylint: disable=g-import-not-at-top,wrong-import-position
from roxie import networks  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_prints_both_sides_and_their_agreement(capsys):
  assert activation_cost.main(['--repeats', '1', '--updates', '2',
                               '--rows', '64']) == 0
  out = capsys.readouterr().out
  rows = [l for l in out.splitlines()
          if l.startswith(('LayerNorm+ELU', 'MPO update'))]
  assert len(rows) == 3, out
  for row in rows:
    *_, old_ms, new_ms, ratio, diff = row.split()
    assert float(old_ms) > 0 and float(new_ms) > 0 and float(ratio) > 0
    # The same function to rounding: outputs, gradients and two updates'
    # parameters agree far below any learning-relevant size.
    assert float(diff) < 1e-4, row
  # The swap is undone: the recipe builds with networks.elu again.
  assert networks.elu is not jax.nn.elu


def test_relative_diff_is_per_leaf_against_the_first_argument():
  a = {'x': jax.numpy.array([2., -4.]), 'y': jax.numpy.array([1e-3])}
  b = {'x': jax.numpy.array([2., -3.]), 'y': jax.numpy.array([1e-3])}
  assert activation_cost._relative_diff(a, b) == pytest.approx(0.25)


@pytest.mark.parametrize('flag', ['--repeats', '--updates', '--rows'])
def test_bad_counts_exit_2_and_print_nothing(flag, capsys):
  assert activation_cost.main([flag, '0']) == 2
  captured = capsys.readouterr()
  assert captured.out == '' and '>= 1' in captured.err
