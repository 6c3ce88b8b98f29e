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


def test_table_takes_medians_and_ratios_and_children_inherit_the_cores(
    capsys, monkeypatch):
  """main() end to end with the runs faked: order, medians, ratios, cores."""
  calls = []
  # (cpu, wall) by (label's first --set, steps, round): the baseline's
  # 10k steps cost 20 then 40 CPU s (median 30) over 10 s; 'slow' costs
  # 60 CPU s over 20 s in both rounds.
  cost = {('', 1): (20.0, 10.0), ('', 2): (40.0, 10.0),
          ('tau=0.1', 1): (60.0, 20.0), ('tau=0.1', 2): (60.0, 20.0)}

  def fake_train(args, sets, steps, out):
    del args, out
    key = (sets[0] if sets else '',
           1 + sum(1 for c in calls if c[0] == (sets[0] if sets else '')
                   and c[1] == steps))
    calls.append((key[0], steps, os.sched_getaffinity(0)))
    cpu, wall = cost[key]
    return (5.0, 3.0) if steps == 1000 else (5.0 + cpu, 3.0 + wall)

  monkeypatch.setattr(run_cost, 'train_once', fake_train)
  before = os.sched_getaffinity(0)
  try:
    code = run_cost.main(['--variant', 'base', '--variant', 'slow:tau=0.1',
                          '--steps', '1000,11000', '--rounds', '2',
                          '--cpus', str(min(before))])
    pinned = {c[2] == {min(before)} for c in calls}
  finally:
    os.sched_setaffinity(0, before)
  assert code == 0
  assert pinned == {True}
  # Round 1 runs A then B, round 2 B then A; each variant short then long.
  assert [(c[0], c[1]) for c in calls] == [
      ('', 1000), ('', 11000), ('tau=0.1', 1000), ('tau=0.1', 11000),
      ('tau=0.1', 1000), ('tau=0.1', 11000), ('', 1000), ('', 11000)]
  rows = {line.split()[0]: line.split()[1:]
          for line in capsys.readouterr().out.splitlines()
          if line.split()[:1] in (['base'], ['slow'])}
  # variant, CPU s / 10k, wall s / 10k, cores, CPU x base, wall x base.
  assert rows['base'] == ['30.0', '10.0', '3.00', '1.00', '1.00']
  assert rows['slow'] == ['60.0', '20.0', '3.00', '2.00', '2.00']


def test_a_run_that_faults_is_exit_1_with_one_line_and_no_table(
    capsys, tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))

  def crash(args, sets, steps, out):
    raise run_cost.ChildFailed('roxie train exited -9: (no output)')

  monkeypatch.setattr(run_cost, 'train_once', crash)
  assert run_cost.main(['--steps', '100,200']) == 1
  captured = capsys.readouterr()
  err = captured.err.strip().splitlines()
  assert len(err) == 1 and 'exited -9' in err[0], err
  assert 'CPU x base' not in captured.out  # No figure from a failed run.
  assert not os.listdir(tmp_path)
