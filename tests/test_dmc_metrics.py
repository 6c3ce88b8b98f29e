"""benchmarks/dmc_metrics.py: Q beside the value of the return, by hand."""

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))

import dmc_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position

HEADER = 'env_steps,wall_time,eval_return,eval_return_std,q,noise_std\n'


def _run(root, name, agent='ddpg', task='FingerSpin', rows=(), options=None,
         discount=0.99):
  path = root / name
  path.mkdir(parents=True)
  (path / 'config.json').write_text(json.dumps(
      {'agent': agent, 'task': task,
       'env_options': options if options is not None else {'action_repeat': 2},
       'config': {'discount': discount}}))
  (path / 'metrics.csv').write_text(HEADER + ''.join(rows))
  return path


def test_value_of_return_by_hand():
  # 500 over 1000 env steps at action repeat 2: 1 a step for 500 agent
  # steps, worth 1 / (1 - 0.99) = 100 discounted.
  assert dmc_metrics.value_of_return(500.0, 2, 1000, 0.99) == pytest.approx(100)
  # CartpoleSwingup's action repeat 8: 125 agent steps earning 6.4 each.
  assert dmc_metrics.value_of_return(800.0, 8, 1000, 0.9) == pytest.approx(64)


def test_rows_each_stretch_first_and_last(tmp_path):
  rows = [f'{s},1.0,{s / 400},1.0,{s / 5000},0.1\n'
          for s in (20000, 40000, 100000, 120000, 200000, 230000)]
  run = _run(tmp_path, 'ddpg-FingerSpin-seed0', rows=rows)
  table = dmc_metrics.run_table(str(run), dmc_metrics.read_config(str(run)),
                                ['noise_std'])
  assert len(table['rows']) == 6
  picked = dmc_metrics.every(table['rows'], 100000)
  assert [r['env_steps'] for r in picked] == [20000, 100000, 200000, 230000]
  last = picked[-1]
  # return 575 -> v_ret 115; q 46 -> ratio 0.4.
  assert last['return'] == pytest.approx(575)
  assert last['v_ret'] == pytest.approx(115)
  assert last['q/v_ret'] == pytest.approx(0.4)
  assert last['noise_std'] == pytest.approx(0.1)


def test_episode_length_from_the_run_and_a_partial_last_line(tmp_path):
  # A 100-step episode at action repeat 1: 50 earned -> 0.5 a step -> 50.
  run = _run(tmp_path, 'r', task='CartpoleBalance',
             options={'action_repeat': 1, 'episode_length': 100},
             rows=['1000,1.0,50,0.0,25,0.2\n', '2000,1.0,6'])
  table = dmc_metrics.run_table(str(run), dmc_metrics.read_config(str(run)),
                                [])
  assert len(table['rows']) == 1
  assert table['rows'][0]['v_ret'] == pytest.approx(50)
  assert table['rows'][0]['q/v_ret'] == pytest.approx(0.5)


def test_main_filters_and_prints(tmp_path, capsys):
  _run(tmp_path / 'runs', 'ddpg-FingerSpin-seed0',
       rows=['100000,1.0,500,1.0,90,0.1\n'])
  _run(tmp_path / 'runs', 'td3-FingerSpin-seed0', agent='td3',
       rows=['100000,1.0,500,1.0,50,0.1\n'])
  assert dmc_metrics.main(['--runs', str(tmp_path / 'runs'),
                           '--agents', 'ddpg']) == 0
  out = capsys.readouterr().out
  assert 'ddpg-FingerSpin-seed0' in out and 'td3' not in out
  assert out.splitlines()[-1].split() == ['100000', '500.0', '90.0', '100.0',
                                         '0.90']


def test_summary_groups_seeds_by_folder_at_the_nearest_evaluation(
    tmp_path, capsys):
  # An evaluation counts for 100k within 5% of it: 96k and 104k do, 108k
  # does not.
  runs = tmp_path / 'runs'
  _run(runs, 'ddpg-FingerSpin-seed0',
       rows=['96000,1,500,1,50,0.1\n', '112000,1,600,1,60,0.1\n'])
  _run(runs, 'ddpg-FingerSpin-seed1', rows=['108000,1,400,1,80,0.1\n'])
  _run(runs, 'ddpg-FingerSpin-seed2', rows=['104000,1,250,1,40,0.1\n'])
  _run(runs / 'wide', 'ddpg-FingerSpin-seed0',
       rows=['100000,1,500,1,100,0.1\n'])
  assert dmc_metrics.main(['--runs', str(runs), '--at', '100000']) == 0
  lines = capsys.readouterr().out.splitlines()
  cells = [[c.strip() for c in line.strip('|').split('|')] for line in lines]
  # Seeds 0 (96k: q/v_ret 50/100) and 2 (104k: 40/50), not seed 1 (108k).
  # Means: return (500 + 250) / 2, q 45, v_ret 75.
  assert cells[2] == ['.', 'ddpg', 'FingerSpin', '100000', '2', '375.0',
                      '45.0', '75.0', '0.50/0.80']
  assert cells[3] == ['wide', 'ddpg', 'FingerSpin', '100000', '1', '500.0',
                      '100.0', '100.0', '1.00']
  assert len(cells) == 4


@pytest.mark.parametrize('argv, message', [
    (['--runs', 'missing'], 'is not a directory'),
    (['--agents', 'mpo'], 'no run under'),
    (['--columns', 'entropy'], '--columns entropy'),
    (['--every', '0'], '--every must be >= 1'),
    (['--at', '1e5'], '--at: cannot read'),
    (['--at', '100000', '--columns', 'noise_std'], 'drop it or --at'),
    (['--at', '500000'], 'no matching run has an evaluation within 5%'),
])
def test_bad_input_exits_2(tmp_path, capsys, argv, message):
  _run(tmp_path / 'runs', 'ddpg-FingerSpin-seed0',
       rows=['100000,1.0,500,1.0,90,0.1\n'])
  if argv[0] != '--runs':
    argv = ['--runs', str(tmp_path / 'runs')] + argv
  else:
    argv = ['--runs', str(tmp_path / argv[1])]
  assert dmc_metrics.main(argv) == 2
  captured = capsys.readouterr()
  assert message in captured.err and captured.out == ''


@pytest.mark.parametrize('text', ['{"agent": "ddpg"', '{"agent": "ddpg"}', '[]'])
def test_unreadable_config_exits_2_naming_it(tmp_path, capsys, text):
  # A truncated or foreign config.json: a clear error, not a traceback.
  run = _run(tmp_path / 'runs', 'ddpg-FingerSpin-seed0',
             rows=['100000,1.0,500,1.0,90,0.1\n'])
  (run / 'config.json').write_text(text)
  assert dmc_metrics.main(['--runs', str(tmp_path / 'runs')]) == 2
  captured = capsys.readouterr()
  assert str(run / 'config.json') in captured.err
  assert 'not a readable roxie run config' in captured.err
  assert captured.out == ''


def test_a_run_short_of_the_step_does_not_count(tmp_path, capsys):
  # dmc.py's rule: no row for a budget until an evaluation at or past it;
  # a run stopped at 96k has no 100k reading, one at 104k has (5% off).
  runs = tmp_path / 'runs'
  _run(runs, 'ddpg-FingerSpin-seed0', rows=['96000,1,500,1,50,0.1\n'])
  _run(runs, 'ddpg-FingerSpin-seed1', rows=['104000,1,250,1,40,0.1\n'])
  assert dmc_metrics.main(['--runs', str(runs), '--at', '100000']) == 0
  last = capsys.readouterr().out.splitlines()[-1]
  assert [c.strip() for c in last.strip('|').split('|')] == [
      '.', 'ddpg', 'FingerSpin', '100000', '1', '250.0', '40.0', '50.0',
      '0.80']
