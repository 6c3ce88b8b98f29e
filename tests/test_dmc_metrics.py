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
  table = dmc_metrics.run_table(str(run), 100000, ['noise_std'])
  assert [r['env_steps'] for r in table['rows']] == [20000, 100000, 200000,
                                                     230000]
  last = table['rows'][-1]
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
  table = dmc_metrics.run_table(str(run), 1000, [])
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


@pytest.mark.parametrize('argv, message', [
    (['--runs', 'missing'], 'is not a directory'),
    (['--agents', 'mpo'], 'no run under'),
    (['--columns', 'entropy'], '--columns entropy'),
    (['--every', '0'], '--every must be >= 1'),
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
