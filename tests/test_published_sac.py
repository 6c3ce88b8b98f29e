"""benchmarks/published_sac.py: pytorch_sac's result file read back."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))

import published_sac  # pylint: disable=g-import-not-at-top,wrong-import-position

# The file's layout: an unnamed index column, then (among others) these.
HEADER = ',episode,episode_reward,step,run_id,agent,env,seed\n'


def _write(path, rows):
  with open(path, 'w') as f:
    f.write(HEADER)
    for i, (reward, step, env, seed) in enumerate(rows):
      f.write(f'{i},{step / 1000},{reward},{step},run=1,sac,{env},{seed}\n')
  return str(path)


def test_table_takes_each_seed_at_the_budget(tmp_path):
  path = _write(tmp_path / 'sac.csv', [
      (100.0, 80000, 'cheetah_run', 1),
      (210.0, 100000, 'cheetah_run', 1),
      (300.0, 100000, 'cheetah_run', 2),
      (120.0, 100000, 'cheetah_run', 3),
      (700.0, 500000, 'cheetah_run', 1),
      (900.0, 100000, 'finger_spin', 1),
      (5.0, 100000, 'hopper_hop', 1),  # Not a standard task: no row.
  ])
  rows = published_sac.table(published_sac.read(path), [100_000, 500_000])
  assert [(r[0], r[1]) for r in rows] == [
      ('FingerSpin', 100_000), ('CheetahRun', 100_000),
      ('CheetahRun', 500_000)]
  name, budget, returns, mean, ref = rows[1]
  assert returns == [210.0, 300.0, 120.0]  # Seeds in order; 80k ignored.
  assert mean == 210.0  # (210 + 300 + 120) / 3.
  assert ref == 616  # CURL's State SAC, CheetahRun at 100k.
  assert rows[2][2:] == ([700.0], 700.0, 795)


def test_curl_figure_only_at_its_budgets(tmp_path):
  path = _write(tmp_path / 'sac.csv', [(880.0, 1_000_000, 'walker_walk', 1)])
  rows = published_sac.table(published_sac.read(path), [1_000_000])
  assert rows == [('WalkerWalk', 1_000_000, [880.0], 880.0, -1)]


def test_bad_file_exits_2(tmp_path, capsys):
  assert published_sac.main([str(tmp_path / 'absent.csv')]) == 2
  bad = tmp_path / 'bad.csv'
  bad.write_text('env,seed,step\ncheetah_run,1,100000\n')
  assert published_sac.main([str(bad)]) == 2
  assert 'episode_reward' in capsys.readouterr().err


def test_main_prints_markdown(tmp_path, capsys):
  path = _write(tmp_path / 'sac.csv', [(850.0, 100000, 'walker_walk', 1),
                                       (950.0, 100000, 'walker_walk', 2)])
  assert published_sac.main([path, '--budgets', '100000']) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[2] == '| WalkerWalk | 100,000 | 2 | 850 / 950 | 900 | 891 |'
