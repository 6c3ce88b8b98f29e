"""benchmarks/run_cost.py: steady cost from two lengths, and its bad input."""

import os
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))

import run_cost  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_steady_cost_is_the_difference_per_10k_steps_per_member():
  # 3,000 steps: 40 CPU s over 25 s; 13,000 steps: 100 CPU s over 55 s.
  # The 10,000 steps between them cost 60 CPU s (20 for each of 3
  # members) over 30 s: two cores busy.
  cost = run_cost.steady_cost((40.0, 25.0), (100.0, 55.0), (3000, 13000), 3)
  assert cost == {'cpu': 20.0, 'wall': 30.0, 'cores': 2.0}
  # Twice the span halves the figures per 10k steps.
  cost = run_cost.steady_cost((40.0, 25.0), (100.0, 55.0), (3000, 23000), 1)
  assert cost == {'cpu': 30.0, 'wall': 15.0, 'cores': 2.0}


def test_variant_syntax():
  assert run_cost.parse_variant('default') == ('default', [])
  assert run_cost.parse_variant('lr:critic_lr=1e-3; policy_lr=1e-3') == (
      'lr', ['critic_lr=1e-3', 'policy_lr=1e-3'])
  for bad in (':tau=0.1', 'x:tau', 'x:=1', 'x:tau='):
    with pytest.raises(run_cost.BadInput):
      run_cost.parse_variant(bad)


@pytest.mark.parametrize('argv, says', [
    (['--steps', '13000,3000'], '0 < SHORT < LONG'),
    (['--steps', '3000'], 'SHORT,LONG'),
    (['--variant', 'a', '--variant', 'a:tau=0.1'], 'labels repeat'),
    (['--variant', 'a:tau'], 'FIELD=VALUE'),
    (['--cpus', '4096'], 'may use cores'),
    (['--seeds', '0'], 'at least 1'),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    argv, says, capsys, tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
  assert run_cost.main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and says in err[0], err
  assert not os.listdir(tmp_path)


def test_a_field_the_config_lacks_is_the_childs_exit_2(capsys, tmp_path,
                                                       monkeypatch):
  """The recipe's own check (roxie train exits 2) reaches the user as such."""
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
  code = run_cost.main(['--agent', 'td3', '--variant', 'x:no_such_field=1',
                        '--steps', '100,200'])
  assert code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and 'no_such_field' in err[0], err
  assert not os.listdir(tmp_path)  # The scratch folder went with it.


def test_a_span_lost_in_start_up_noise_is_an_error_not_a_figure():
  # The longer run was quicker: a negative cost is not reported.
  with pytest.raises(run_cost.TooShort, match='longer LONG'):
    run_cost.steady_cost((40.0, 25.0), (38.0, 24.0), (1000, 3000), 1)
