"""benchmarks/dmc.py and dmc_report.py: a tiny run end to end, bad input, the
report from partial data."""

import csv
import dataclasses
import math
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, 'benchmarks')
sys.path.insert(0, BENCH)

import dmc  # pylint: disable=g-import-not-at-top,wrong-import-position
import dmc_report  # pylint: disable=g-import-not-at-top,wrong-import-position

from roxie.agents import sac  # pylint: disable=g-import-not-at-top,wrong-import-position

# Two seeds of SAC on CartpoleBalance (one population: one program) for
# 2,000 env steps, 100-step episodes, tiny networks: about a minute on 2
# cores, most of it the child's compile.
TINY = ('--agents', 'sac', '--tasks', 'CartpoleBalance', '--seeds', '2',
        '--budgets', '2000', '--eval-every', '1000', '--episode-length', '100',
        '--set', 'warmup_steps=500', '--set', 'hidden_sizes=16,16',
        '--set', 'batch_size=32', '--set', 'num_envs=2', '--variant', 'tiny')


def _paths(tmp_path):
  return ['--runs', str(tmp_path / 'runs'),
          '--results', str(tmp_path / 'dmc.csv'),
          '--curves', str(tmp_path / 'curves.csv')]


def _read(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def _bench(tmp_path, *argv):
  env = dict(os.environ)
  # The child `roxie train` compiles the same programs every CI run.
  env.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(ROOT, '.jax_cache'))
  env.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0.5')
  return subprocess.run(
      [sys.executable, os.path.join(BENCH, 'dmc.py'), *argv, *_paths(tmp_path)],
      capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)


def test_tiny_run_writes_its_row_skips_it_when_rerun_and_reports(
    tmp_path, monkeypatch, capsys):
  real_md = os.path.join(dmc.RESULTS, 'DMC.md')
  before = os.stat(real_md).st_mtime_ns if os.path.exists(real_md) else None
  proc = _bench(tmp_path, *TINY, '--machine', 'TPU test + 2-core host')
  assert proc.returncode == 0, proc.stdout + proc.stderr
  # One child (a population) for both seeds.
  assert proc.stdout.count('train --agent') == 1
  assert 'sac CartpoleBalance seeds 0,1: train --agent' in proc.stdout
  rows = sorted(_read(tmp_path / 'dmc.csv'), key=lambda r: r['seed'])
  assert [r['seed'] for r in rows] == ['0', '1']
  row = rows[0]
  assert list(row) == list(dmc.COLUMNS)
  assert (row['agent'], row['task'], row['seed'], row['budget'],
          row['variant']) == ('sac', 'CartpoleBalance', '0', '2000', 'tiny')
  assert rows[0]['eval_return'] != rows[1]['eval_return']  # Two seeds.
  assert 'episode_length=100' in row['overrides']
  assert 'hidden_sizes=16,16' in row['overrides']
  # 8 env steps per call (2 envs, action repeat 1) divide 1,000: exact.
  assert int(row['env_steps']) == 2000
  # CartpoleBalance pays at most 1 per step: 100-step episodes return <= 100.
  assert 0.0 <= float(row['eval_return']) <= 100.0
  assert int(row['eval_episodes']) == 10
  assert 0.0 < float(row['cpu_s'])
  assert 0.0 < float(row['wall_s'])
  assert row['commit']
  assert row['machine'] == 'TPU test + 2-core host'
  import roxie  # pylint: disable=g-import-not-at-top
  assert row['version'] == roxie.__version__
  curve = [r for r in _read(tmp_path / 'curves.csv') if r['seed'] == '0']
  assert [int(r['env_steps']) for r in curve] == [1000, 2000]
  assert curve[-1]['eval_return'] == row['eval_return']
  # The report went beside the tmp CSVs, not into benchmarks/results.
  md = (tmp_path / 'DMC.md').read_text()
  assert '| CartpoleBalance | sac (tiny) | 2* |' in md
  assert (tmp_path / 'runs' / 'tiny' / 'sac-CartpoleBalance-seed1' /
          'population.json').exists()
  assert (tmp_path / 'dmc_curves.png').stat().st_size > 0
  assert (tmp_path / 'dmc_aggregate.png').stat().st_size > 0
  after = os.stat(real_md).st_mtime_ns if os.path.exists(real_md) else None
  assert after == before

  csv_bytes = (tmp_path / 'dmc.csv').read_bytes()
  curve_bytes = (tmp_path / 'curves.csv').read_bytes()
  proc = _bench(tmp_path, *TINY)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert 'train --agent' not in proc.stdout  # No child was started.
  assert (tmp_path / 'dmc.csv').read_bytes() == csv_bytes
  assert (tmp_path / 'curves.csv').read_bytes() == curve_bytes

  # A longer budget resumes the runs with their own config.json, while the
  # rows take this call's label: a folder that does not train what is asked
  # is refused before anything runs, naming the field.
  longer = list(TINY)
  longer[longer.index('--budgets') + 1] = '2000,3000'
  assert dmc.resume_problems(dmc.parse_args([*longer, *_paths(tmp_path)]),
                             'sac', 'CartpoleBalance', [0, 1]) == []
  other = [a.replace('hidden_sizes=16,16', 'hidden_sizes=32,32')
           for a in longer]
  assert dmc.main([*other, *_paths(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert str(tmp_path / 'runs' / 'tiny' / 'sac-CartpoleBalance-seed0') in err
  assert 'hidden_sizes: the run has [16, 16], the cell asks for [32, 32]' in err
  # A misspelt field is named, not a traceback.
  assert dmc.main([*longer, '--set', 'batch_sise=3', *_paths(tmp_path)]) == 2
  assert "Unknown config field 'batch_sise'" in capsys.readouterr().err
  fewer = [a.replace('num_envs=2', 'num_envs=1') for a in longer]
  assert dmc.main([*fewer, *_paths(tmp_path)]) == 2
  assert 'num_envs: the run has 2, the cell asks for 1' in (
      capsys.readouterr().err)
  # Or the recipe's default changed since the folder was made.
  ran = sac.Config().actor_lr
  @dataclasses.dataclass(frozen=True)
  class Later(sac.Config):
    actor_lr: float = ran / 2
  monkeypatch.setattr(sac, 'Config', Later)
  assert dmc.main([*longer, *_paths(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert (f'actor_lr: the run has {ran!r}, the cell asks for {ran / 2!r}'
          in err)
  assert 'hidden_sizes' not in err
  assert (tmp_path / 'dmc.csv').read_bytes() == csv_bytes
  assert (tmp_path / 'curves.csv').read_bytes() == curve_bytes


@pytest.mark.parametrize('argv, message', [
    (('--agents', 'nope'), 'unknown agent'),
    (('--tasks', 'Nope'), 'unknown task'),
    (('--seeds', ''), '--seeds is empty'),
    (('--seeds', '0'), 'for seed 0 alone write --seeds 0,'),
    (('--seeds', '0,-1'), 'seeds are >= 0'),
    (('--budgets', '0'), 'positive'),
    (('--set', 'batch_size=32'), '--variant'),
    (('--episode-length', '0', '--variant', 'x'), '--episode-length'),
    # Bugs reproduced: each of these trained (or started a child that
    # failed, exit 1, DMC.md rewritten) instead of exiting 2. Rows labelled
    # `default` with overrides would have stood as the recipe's default.
    (('--variant', 'default', '--set', 'n_step=2', '--agents', 'td3'),
     '--variant default labels'),
    (('--variant', 'default', '--episode-length', '100'),
     '--variant default labels'),
    (('--variant', '../up'), '--variant'),
    (('--variant', 'a,b', '--set', 'n_step=2'), '--variant'),
    (('--variant', 'x', '--set', 'bogus=1'), 'bogus'),
    (('--variant', 'x', '--set', 'n_step=abc'), 'n_step'),
    (('--variant', 'x', '--set', 'n_step=0'), 'n_step must be >= 1'),
    (('--variant', 'x', '--set', 'num_envs=0'), 'num_envs'),
    (('--variant', 'x', '--agents', 'td3,ppo', '--set', 'n_step=2'),
     'does not make a ppo run'),
    (('--machine', ' '), '--machine'),
    (('--machine', 'TPU\nhost'), '--machine'),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv,
                                              message):
  results = tmp_path / 'dmc.csv'
  results.write_text(','.join(dmc.COLUMNS) + '\n')
  assert dmc.main([*argv, *_paths(tmp_path)]) == 2
  assert message in capsys.readouterr().err
  assert results.read_text() == ','.join(dmc.COLUMNS) + '\n'
  assert sorted(os.listdir(tmp_path)) == ['dmc.csv']


def test_a_results_file_with_other_columns_is_refused(tmp_path, capsys):
  results = tmp_path / 'dmc.csv'
  text = 'agent,task,seed,score\nsac,CartpoleSwingup,0,800\n'
  results.write_text(text)
  assert dmc.main([*TINY, *_paths(tmp_path)]) == 2
  assert 'columns' in capsys.readouterr().err
  assert dmc_report.main(['--results', str(results), '--curves',
                          str(tmp_path / 'curves.csv')]) == 2
  assert 'columns' in capsys.readouterr().err
  assert results.read_text() == text
  assert sorted(os.listdir(tmp_path)) == ['dmc.csv']


def test_a_failed_run_makes_the_exit_status_1_and_writes_no_row(
    tmp_path, capsys, monkeypatch):
  # The child refuses an argument dmc.py does not check (a misspelt --set
  # field, which this test used, is refused before any child since the
  # fields are checked up front); dmc.py goes on, then says so.
  command = dmc.new_run_command
  monkeypatch.setattr(dmc, 'new_run_command',
                      lambda *a, **k: [*command(*a, **k), '--no-such-flag'])
  code = dmc.main(['--tasks', 'CartpoleBalance', '--seeds', '1', '--budgets',
                   '1000', *_paths(tmp_path)])
  assert code == 1
  assert 'roxie train exited' in capsys.readouterr().err
  assert not (tmp_path / 'dmc.csv').exists()


def test_ctrl_c_checkpoints_the_child_once_and_exits_130(tmp_path):
  # Ctrl-C signals the terminal's whole foreground group. The child used to
  # be in dmc.py's group: it got that SIGINT and then dmc.py's forwarded
  # copy, a second request, and stopped at once without its checkpoint.
  argv = list(TINY)
  argv[argv.index('--budgets') + 1] = '40000'
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  env.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(ROOT, '.jax_cache'))
  proc = subprocess.Popen(
      [sys.executable, os.path.join(BENCH, 'dmc.py'), *argv,
       *_paths(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, env=env, cwd=str(tmp_path), start_new_session=True)
  out = []
  for line in proc.stdout:  # Until the population has evaluated once.
    out.append(line)
    if 'env steps, eval' in line:
      break
  os.killpg(proc.pid, signal.SIGINT)
  rest, err = proc.communicate(timeout=300)
  out = ''.join(out) + rest
  assert proc.returncode == 130, out + err
  assert 'stopped by SIGINT; the same command resumes it' in err
  assert 'with a checkpoint' in err  # The child's own words, once.
  assert 'stopped at once' not in err
  run = tmp_path / 'runs' / 'tiny' / 'sac-CartpoleBalance-seed0'
  steps = [int(n.split('_')[-1]) for n in os.listdir(run / 'checkpoints')
           if n.startswith('step_')]
  assert steps and max(steps) >= 1000, steps
  assert not (tmp_path / 'dmc.csv').exists() or all(
      r['budget'] != '40000' for r in _read(tmp_path / 'dmc.csv'))


def test_a_seed_whose_earlier_run_is_gone_is_refused_not_spliced(
    tmp_path, capsys):
  # Seed 0 has its 2,000-step row from a run whose folder is not under
  # --runs (another machine, another --runs). Asked for 3,000 as well,
  # dmc.py used to start a new run from scratch, file its 3,000 row beside
  # the other run's 2,000 row, and keep the other run's curve points where
  # the two overlapped: one curve spliced from two runs. Seed 1 has no
  # rows and could start, but nothing runs: exit 2, nothing written.
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS,
         [_row('CartpoleBalance', 0, 2000, 80.0, variant='tiny')])
  _write(tmp_path / 'curves.csv', dmc.CURVE_COLUMNS, [dict(
      agent='sac', task='CartpoleBalance', seed=0, variant='tiny',
      env_steps=2000, eval_return=80.0, cpu_s=1.0, wall_s=1.0,
      version='0.1.0', commit='aaa')])
  before = [(tmp_path / f).read_bytes() for f in ('dmc.csv', 'curves.csv')]
  argv = [a if a != '2000' else '2000,3000' for a in TINY]
  assert dmc.main([*argv, *_paths(tmp_path)]) == 2
  err = capsys.readouterr().err
  member = tmp_path / 'runs' / 'tiny' / 'sac-CartpoleBalance-seed0'
  assert ('sac CartpoleBalance (tiny) seed 0 has rows at [2000] env steps '
          f'from a run that is not here (none in {member})') in err
  assert 'a new --variant' in err
  assert 'seed 1' not in err
  assert [(tmp_path / f).read_bytes()
          for f in ('dmc.csv', 'curves.csv')] == before
  assert not (tmp_path / 'runs').exists()


def test_a_budget_takes_the_nearest_evaluation_once_one_is_past_it():
  # 8 envs x action repeat 8 = 64 env steps per iteration; --eval-every
  # 20000 becomes calls of 19,968 steps, evaluated after each from the
  # second: the first rule took 119,808 for 100k.
  evals = [dict(env_steps=k * 19_968) for k in range(2, 27)]
  assert dmc.budget_evaluation(evals, 100_000)['env_steps'] == 99_840
  assert dmc.budget_evaluation(evals, 500_000)['env_steps'] == 499_200
  assert dmc.budget_evaluation(evals, 40_000)['env_steps'] == 39_936
  # Undecided until an evaluation at or after the budget exists.
  assert dmc.budget_evaluation(evals[:4], 100_000) is None
  # Action repeat 2: calls of 16,000; evaluations at 80k and 112k (the
  # later is nearer), and exactly on the budget where there is one.
  evals = [dict(env_steps=s) for s in (112_000, 64_000, 80_000)]
  assert dmc.budget_evaluation(evals, 100_000)['env_steps'] == 112_000
  assert dmc.budget_evaluation(evals, 80_000)['env_steps'] == 80_000
  assert dmc.budget_evaluation(evals, 72_000)['env_steps'] == 80_000  # Tie.
  assert dmc.budget_evaluation(evals, 130_000) is None


def test_curves_of_an_extended_run_are_not_written_twice(tmp_path):
  path = str(tmp_path / 'curves.csv')
  run = dict(agent='sac', task='CheetahRun', seed=0, variant='default',
             version='0.1.0', commit='abc')
  ev = lambda n: dict(env_steps=n, eval_return=n / 100, cpu_s=1.0, wall_s=2.0)
  assert dmc.append_curves(path, [ev(1000), ev(2000)], run) == 2
  assert dmc.append_curves(path, [ev(1000), ev(2000)],
                           dict(run, seed=1)) == 2  # Another run's.
  assert dmc.append_curves(path, [ev(2000), ev(1000), ev(3000)], run) == 1
  rows = _read(path)
  assert [(r['seed'], r['env_steps']) for r in rows] == [
      ('0', '1000'), ('0', '2000'), ('1', '1000'), ('1', '2000'),
      ('0', '3000')]


# -- the report -------------------------------------------------------------


def _row(task, seed, budget, ret, *, env_steps=None, commit='aaa',
         agent='sac', variant='default', cpu_s=600.0, wall_s=900.0,
         machine='test cpu x2'):
  return dict(agent=agent, task=task, seed=seed, budget=budget,
              variant=variant, overrides='', env_steps=env_steps or budget,
              eval_return=ret, eval_return_std=1.0, eval_episodes=10,
              cpu_s=cpu_s, wall_s=wall_s, version='0.1.0', commit=commit,
              machine=machine)


def test_report_says_where_a_cells_cpu_is_a_hosts(tmp_path):
  # Rows trained on an accelerator (dmc.py --machine '<device> + N-core
  # host') charge only the host's CPU: the note says so and gives the wall.
  tpu = 'TPU test + 4-core host'
  rows = [_row('CheetahRun', s, 100_000, 600.0 + s, variant='big',
               cpu_s=90.0, wall_s=288.0 + s, machine=tpu) for s in range(3)]
  rows.append(_row('CheetahRun', 0, 100_000, 470.0))
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS, rows)
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv'), '--no-plots']) == 0
  t100 = _table((tmp_path / 'DMC.md').read_text(), '100k')
  big, = [l for l in t100 if l.startswith('| CheetahRun | sac (big) |')]
  cells = [c.strip() for c in big.strip('|').split('|')]
  assert cells[8:] == ['1.5', f"on {tpu}: CPU min is the host's, 4.8 wall "
                       'min for the seeds']
  plain, = [l for l in t100 if l.startswith('| CheetahRun | sac |')]
  assert plain.rstrip().endswith('| 10.0 |  |')


def _write(path, columns, rows):
  with open(path, 'w', newline='') as f:
    w = csv.DictWriter(f, columns)
    w.writeheader()
    w.writerows(rows)


def _table(md, budget_title):
  """The markdown lines of one budget's table."""
  section = md.split(f'## {budget_title} env steps\n', 1)[1]
  return [l for l in section.split('\n\n', 1)[0].splitlines()
          if l.startswith('| ') and not l.startswith('| task')]


def test_report_from_partial_data(tmp_path):
  rows = [
      _row('CartpoleSwingup', 0, 100_000, 800.0, env_steps=119_808),
      _row('CartpoleSwingup', 1, 100_000, 900.0, commit='bbb', cpu_s=720.0),
      _row('CartpoleSwingup', 2, 100_000, 1.0),  # Replaced below.
      _row('CartpoleSwingup', 2, 100_000, 850.0, commit='bbb'),
      _row('CheetahRun', 0, 100_000, 500.0),
      _row('CartpoleSwingup', 0, 500_000, 860.0),
  ]
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS, rows)
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv'), '--no-plots']) == 0
  md = (tmp_path / 'DMC.md').read_text()
  t100 = _table(md, '100k')
  cart = [l for l in t100 if l.startswith('| CartpoleSwingup |')]
  # Seeds 800, 900, 850: mean = IQM = 850 (3 runs: nothing trimmed);
  # CURL's 835 reached; CPU (600 + 720 + 600) / 3 s = 640 s = 10.7 min;
  # seed 0's row came from 119,808 env steps, which the note shows.
  assert len(cart) == 1
  cells = [c.strip() for c in cart[0].strip('|').split('|')]
  assert cells[:4] == ['CartpoleSwingup', 'sac', '3*', '850']
  assert cells[4].startswith('850 [')
  low, high = (float(v) for v in cells[4][5:-1].split(','))
  assert 800 <= low <= 850 <= high <= 900
  assert cells[5:9] == ['835', '835', 'yes', '10.7']
  assert cells[9] == 'at 119,808 env steps (1 of 3 seeds)'
  # One seed: no interval; below the reference.
  cheetah = [l for l in t100 if l.startswith('| CheetahRun |')][0]
  assert '| 1* | 500 | 500 | 616 | 616 | no |' in cheetah
  # Tasks without rows print '-'.
  assert '| BallInCup | sac | 0 | - | - | 746 | 746 | - | - | |' in t100
  # Aggregate over the two tasks with rows: IQM of [800, 900, 850, 500] =
  # mean(800, 850) = 825.
  agg = [l for l in t100 if l.startswith('| **all tasks** (2) | sac |')]
  assert len(agg) == 1 and '| 4 runs | 762 | 825 [' in agg[0]
  t500 = _table(md, '500k')
  assert '| CartpoleSwingup | sac | 1* | 860 | 860 | 848 | 848 | yes |' in t500[0]
  assert '| WalkerWalk | sac | 0 | - |' in '\n'.join(t500)
  # Provenance: both commits, the machine, the command.
  assert '| aaa | 0.1.0 | 3 |' in md and '| bbb | 0.1.0 | 2 |' in md
  assert 'test cpu x2' in md
  assert 'python benchmarks/dmc.py --report' in md


def test_report_lists_owed_defaults_and_only_the_variants_that_ran(tmp_path):
  # td3 has only a variant's row: its default's cells are listed as owed
  # (0 seeds) on every task, the variant only on the task it ran. (The
  # table once printed a 0-seed line for every variant on every task.)
  rows = [_row('CheetahRun', 0, 100_000, 300.0, agent='td3',
               variant='warmup5k'),
          _row('CheetahRun', 0, 100_000, 250.0),
          # A budget of PPO's own: no other agent owes cells there.
          _row('CheetahRun', 0, 1_000_000, 400.0, agent='ppo')]
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS, rows)
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv'), '--no-plots']) == 0
  md = (tmp_path / 'DMC.md').read_text()
  t100 = _table(md, '100k')
  assert '| CheetahRun | td3 (warmup5k) | 1* | 300 |' in '\n'.join(t100)
  assert not [l for l in t100 if 'td3 (warmup5k) | 0 |' in l]
  for task in dmc.STANDARD_TASKS:
    owed = f'| {task} | td3 | 0 | - |'
    assert owed in '\n'.join(t100)
  t1m = '\n'.join(_table(md, '1000k'))
  # Past 500k the reference is CURL's 500k column and PPO's target 75% of it
  # (795 on CheetahRun: 596.25, shown as 596), which 400 does not meet.
  assert '| CheetahRun | ppo | 1* | 400 | 400 | 795 | 596 | no |' in t1m
  assert dmc_report.reference(1_000_000)['CheetahRun'] == 795
  assert dmc_report.target('ppo', 1_000_000, 'CheetahRun') == 0.75 * 795
  assert dmc_report.reference(100_000)['CheetahRun'] == 616
  assert dmc_report.reference(200_000) == {}
  assert '| WalkerWalk | ppo | 0 | - |' in t1m
  assert '| sac |' not in t1m and '| td3 |' not in t1m
  # A PPO task that met its target at 1M is not owed at 5M; one short of it
  # is.
  rows += [_row('WalkerWalk', 0, 1_000_000, 800.0, agent='ppo'),
           _row('CheetahRun', 0, 5_000_000, 500.0, agent='ppo')]
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS, rows)
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv'), '--no-plots']) == 0
  t5m = '\n'.join(_table((tmp_path / 'DMC.md').read_text(), '5000k'))
  assert '| WalkerWalk | ppo |' not in t5m
  assert '| FingerSpin | ppo | 0 | - |' in t5m
  assert '| CheetahRun | ppo | 1* | 500 |' in t5m


def test_report_with_no_results_yet_and_with_curves(tmp_path):
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'curves.csv'), '--no-plots']) == 0
  md = (tmp_path / 'DMC.md').read_text()
  assert 'No results yet' in md
  assert '| CartpoleSwingup | - | 0 | - | - | 835 | - | - | - | |' in md
  # Curves of two seeds at shifted steps, and one budget row: both plots.
  points = []
  for seed, shift in ((0, 0), (1, 37)):
    for k in range(1, 6):
      points.append(dict(agent='sac', task='WalkerWalk', seed=seed,
                         variant='default', env_steps=k * 20_000 + shift,
                         eval_return=100.0 * k + seed, cpu_s=1, wall_s=1,
                         version='0.1.0', commit='aaa'))
  _write(tmp_path / 'curves.csv', dmc.CURVE_COLUMNS, points)
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS,
         [_row('WalkerWalk', 0, 100_000, 500.0)])
  out = tmp_path / 'out'
  out.mkdir()
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'curves.csv'), '--out-dir', str(out),
                          '--resamples', '200']) == 0
  assert sorted(os.listdir(out)) == ['DMC.md', 'dmc_aggregate.png',
                                     'dmc_curves.png']
  assert '![dmc_curves.png](dmc_curves.png)' in (out / 'DMC.md').read_text()


def test_report_without_matplotlib_writes_the_table(tmp_path, monkeypatch,
                                                     capsys):
  # dmc.py ends every training run with this report; without the [plot]
  # extra it used to stop on a ModuleNotFoundError traceback (exit 1, no
  # DMC.md) after the rows were already saved.
  def missing():
    raise ModuleNotFoundError("No module named 'matplotlib'")
  monkeypatch.setattr(dmc_report, '_matplotlib', missing)
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS,
         [_row('WalkerWalk', 0, 100_000, 500.0)])
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv')]) == 0
  assert sorted(n for n in os.listdir(tmp_path)
                if not n.endswith('.lock')) == ['DMC.md', 'dmc.csv']
  md = (tmp_path / 'DMC.md').read_text()
  assert '| WalkerWalk | sac | 1* | 500 |' in md
  assert '.png' not in md
  assert 'pip install -e ".[plot]"' in capsys.readouterr().err
  # --no-plots asks for exactly this: no notice.
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv'), '--no-plots']) == 0
  assert capsys.readouterr().err == ''

def test_curve_band_on_a_common_grid():
  a = (np.array([0.0, 100.0]), np.array([0.0, 100.0]))
  b = (np.array([10.0, 110.0]), np.array([20.0, 120.0]))
  grid, mean, low, high = dmc_report.band_on_grid([a, b], 300, 0, points=12)
  np.testing.assert_allclose(grid, np.linspace(0, 110, 12))
  # Where both seeds cover (10 <= x <= 100), seed a is x and seed b x + 10:
  # mean x + 5, and the band is spanned by the two seeds.
  both = (grid >= 10) & (grid <= 100)
  np.testing.assert_allclose(mean[both], grid[both] + 5)
  assert np.all(low[both] >= grid[both] - 1e-9)
  assert np.all(high[both] <= grid[both] + 10 + 1e-9)
  # At the ends one seed covers: its value, no band; never extrapolated.
  assert (mean[0], low[0], high[0]) == (0.0, 0.0, 0.0)
  assert mean[-1] == pytest.approx(120.0) and low[-1] == high[-1]
  assert not any(math.isnan(v) for v in mean)


def test_report_takes_the_nearer_evaluation_from_the_curves(tmp_path):
  # A row written by the first dmc.py took 119,808 for the 100k budget; the
  # run's curve has 99,840 (a call-rounding short), which the report uses.
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS, [
      _row('CartpoleSwingup', 0, 100_000, 843.0, env_steps=119_808)])
  _write(tmp_path / 'curves.csv', dmc.CURVE_COLUMNS, [
      dict(agent='sac', task='CartpoleSwingup', seed=0, variant='default',
           env_steps=n, eval_return=ret, cpu_s=cpu, wall_s=1.0,
           version='0.1.0', commit='aaa')
      for n, ret, cpu in ((79_872, 500.0, 50.0), (99_840, 812.0, 66.0),
                          (119_808, 843.0, 80.0))])
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'curves.csv'), '--no-plots']) == 0
  md = (tmp_path / 'DMC.md').read_text()
  line = [l for l in _table(md, '100k')
          if l.startswith('| CartpoleSwingup |')][0]
  assert '| 1* | 812 | 812 | 835 | 835 | no | 1.1 |' in line
  assert ('1 seed re-picked from the curves: 99,840 env steps (dmc.csv row: '
          '119,808)') in line


def test_children_resume_old_single_runs_and_populations_and_start_the_rest(
    tmp_path):
  args = dmc.parse_args(['--agents', 'sac', '--tasks', 'CheetahRun',
                         '--runs', str(tmp_path)])
  runs = tmp_path
  # Seed 0: a single run of dmc.py before populations; seeds 1 and 2: one
  # population; seeds 3 and 4: nothing yet.
  (runs / 'sac-CheetahRun-seed0').mkdir()
  (runs / 'sac-CheetahRun-seed0' / 'config.json').write_text('{}')
  for s in (1, 2):
    d = runs / f'sac-CheetahRun-seed{s}'
    d.mkdir()
    (d / 'population.json').write_text(
        '{"members": ["sac-CheetahRun-seed1", "sac-CheetahRun-seed2"]}')
  children = dmc.plan_children(args, 'sac', 'CheetahRun', [0, 1, 2, 3, 4])
  assert [[s for s, _ in members] for members, _ in children] == [
      [0], [1, 2], [3, 4]]
  assert children[0][1][:3] == ['train', '--resume',
                                str(runs / 'sac-CheetahRun-seed0')]
  assert children[1][1][:2] == ['train', '--resume']
  cmd = children[2][1]
  assert cmd[cmd.index('--seeds') + 1] == '3,4,'
  assert cmd[cmd.index('--out') + 1] == str(runs)


@pytest.mark.parametrize('agent', ['sac', 'td3', 'ppo'])
def test_new_runs_take_the_task_tables_action_repeat(agent):
  # A run setting every agent takes (PPO too: when it was a Config field,
  # PPO had none, and passing one made every PPO cell fail).
  args = dmc.parse_args(['--agents', agent, '--tasks', 'FingerSpin'])
  cmd = dmc.new_run_command(args, agent, 'FingerSpin', [0], 1000, '/tmp/x')
  sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == '--set']
  assert sets == ['action_repeat=2']
  assert cmd[:3] == ['train', '--agent', agent]


def test_each_recipe_is_held_to_its_own_target(tmp_path):
  # Issue 13: DDPG and MPO within 10% of CURL, SAC/TD3/D4PG/TD4 at it, PPO
  # only reported at 100k and 500k. The same 880 on ReacherEasy at 500k
  # (CURL 923) meets DDPG's 830.7 but not SAC's 923; the report once held
  # every recipe to CURL's figure, so DDPG's 965 on BallInCup read "no".
  rows = [_row('ReacherEasy', s, 500_000, 880.0, agent=a)
          for a in ('ddpg', 'sac') for s in range(3)]
  rows += [_row('ReacherEasy', 0, 500_000, 700.0, agent='ppo'),
           _row('ReacherEasy', 0, 100_000, 700.0, agent='mpo')]
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS, rows)
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv'), '--no-plots']) == 0
  md = (tmp_path / 'DMC.md').read_text()
  t500 = '\n'.join(_table(md, '500k'))
  assert '| ReacherEasy | ddpg | 3* | 880 | 880 [880, 880] | 923 | 831 | yes |' in t500
  assert '| ReacherEasy | sac | 3* | 880 | 880 [880, 880] | 923 | 923 | no |' in t500
  assert '| ReacherEasy | ppo | 1* | 700 | 700 | 923 | - | - |' in t500
  # PPO owes no 500k cells: its budget (up to 20M) stands for that column.
  assert '| CheetahRun | ppo |' not in t500
  # Owed cells show the recipe's target too (CheetahRun: 0.9 x 795 = 715.5).
  assert '| CheetahRun | ddpg | 0 | - | - | 795 | 716 | - | - | |' in t500
  # The aggregate compares return / ref with the recipe's fraction:
  # 880 / 923 = 0.95 reaches DDPG's 90%, not SAC's 100%.
  agg = {l.split('|')[2].strip(): l for l in _table(md, '500k')
         if l.startswith('| **all tasks** (1)')}
  assert '| - | 90% | yes |' in agg['ddpg']
  assert '| - | 100% | no |' in agg['sac']
  assert '| - | - | - |' in agg['ppo']
  t100 = '\n'.join(_table(md, '100k'))
  # MPO at 100k: 0.9 x 746 = 671.4; 700 meets it.
  assert '| ReacherEasy | mpo | 1* | 700 | 700 | 746 | 671 | yes |' in t100
  assert dmc_report.target_fraction('td4', 100_000) == 1.0
  assert dmc_report.target_fraction('ppo', 100_000) is None
  assert dmc_report.target_fraction('ppo', 20_000_000) == 0.75
  assert dmc_report.target('sac', 200_000, 'ReacherEasy') is None


def test_standing_grid_gives_each_default_cell_its_verdict(tmp_path):
  # Issue 13's Done-when: which cells meet, which do not and by how much.
  rows = [_row('ReacherEasy', s, 500_000, r, agent='ddpg')
          for s, r in enumerate((880.0, 900.0, 890.0))]      # 890 >= 830.7
  rows += [_row('CheetahRun', s, 500_000, r, agent='sac')     # 500 vs 795
           for s, r in enumerate((450.0, 500.0, 550.0))]
  rows += [_row('BallInCup', s, 500_000, r, agent='sac')      # CI reaches 974
           for s, r in enumerate((960.0, 965.0, 980.0))]
  rows += [_row('FingerSpin', 0, 100_000, 300.0, agent='ppo'),
           _row('FingerSpin', 0, 1_000_000, 600.0, agent='ppo'),  # < 692.25
           _row('FingerSpin', 0, 5_000_000, 700.0, agent='ppo'),  # meets
           _row('FingerSpin', 0, 20_000_000, 720.0, agent='ppo'),
           _row('CheetahRun', 0, 1_000_000, 500.0, agent='ppo')]  # < 596.25
  rows += [_row('FingerSpin', s, 500_000, 999.0, agent='sac',
                variant='wide') for s in range(3)]  # Not a default: unseen.
  _write(tmp_path / 'dmc.csv', dmc.COLUMNS, rows)
  assert dmc_report.main(['--results', str(tmp_path / 'dmc.csv'), '--curves',
                          str(tmp_path / 'none.csv'), '--no-plots']) == 0
  md = (tmp_path / 'DMC.md').read_text()
  grid = md.split('## Where each default stands\n', 1)[1].split('\n## ', 1)[0]
  lines = {tuple(c.strip() for c in l.strip('|').split('|')[:2]):
           [c.strip() for c in l.strip('|').split('|')[2:]]
           for l in grid.splitlines() if l.startswith('| ') and
           not l.startswith('| recipe')}
  # Columns: the six tasks in STANDARD_TASKS order, then the count met.
  assert dmc.STANDARD_TASKS == ('CartpoleSwingup', 'ReacherEasy', 'FingerSpin',
                                'CheetahRun', 'WalkerWalk', 'BallInCup')
  assert lines[('ddpg', '500k')] == ['no rows', '890 met', 'no rows',
                                     'no rows', 'no rows', 'no rows', '1/6']
  # SAC: 500 is 295 short of 795; BallInCup's mean 968.3 is 5.7 short (IQM
  # of 3 = mean), the interval [960, 980] reaches 974.
  assert lines[('sac', '500k')] == ['no rows', 'no rows', 'no rows',
                                    '500 (-295)', 'no rows',
                                    '968 (-6, CI reaches)', '0/6']
  assert lines[('sac', '100k')][-1] == '0/6'
  # PPO: reported at 100k, no 500k row (nothing owed there), and at its
  # own budget the smallest that meets (5M), else the largest run (1M).
  assert lines[('ppo', '100k')] == ['no rows', 'no rows', '300 reported',
                                    'no rows', 'no rows', 'no rows', '-']
  assert ('ppo', '500k') not in lines
  assert lines[('ppo', 'up to 20M')] == ['no rows', 'no rows', '700 met (5M)',
                                         '500 (-96) (1M)', 'no rows',
                                         'no rows', '1/6']


def test_code_identity_ignores_the_results_the_scripts_write(tmp_path):
  """A tree dirty only under benchmarks/results/ is the commit's code.

  Reproduces rows marked '+dirty' when a second dmc.py started after a
  first one had rewritten DMC.md; an edit to the code still marks them.
  """
  git = lambda *a: subprocess.run(['git', *a], cwd=tmp_path, check=True,
                                  capture_output=True, text=True).stdout
  git('init', '-q')
  for name in ('roxie/a.py', 'benchmarks/results/DMC.md'):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text('x\n')
  git('add', '.')
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'c')
  head = git('rev-parse', '--short=12', 'HEAD').strip()
  assert dmc.code_identity(str(tmp_path))[1] == head
  (tmp_path / 'benchmarks/results/DMC.md').write_text('y\n')
  assert dmc.code_identity(str(tmp_path))[1] == head
  (tmp_path / 'roxie/a.py').write_text('y\n')
  assert dmc.code_identity(str(tmp_path))[1] == head + '+dirty'


def test_device_script_trains_a_cell_and_brings_its_rows_back(tmp_path):
  # benchmarks/device_dmc.sh, run here as on a lent machine: MuJoCo and roxie
  # already import (no wheels), python3 is this interpreter.
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  wrapper = bin_dir / 'python3'  # A link would lose the venv: exec it.
  wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
  wrapper.chmod(0o755)
  env = dict(os.environ, PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}',
             RUNS=str(tmp_path / 'runs'), OUT=str(tmp_path / 'out'),
             DEVICE='Test chip',
             DMC_ARGS='--eval-every 1000 --episode-length 100')
  env.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(ROOT, '.jax_cache'))
  sets = 'warmup_steps=500;hidden_sizes=16,16;batch_size=32;num_envs=2'
  proc = subprocess.run(
      ['bash', os.path.join(BENCH, 'device_dmc.sh'), '300', 'sac', '2000',
       'tiny', sets, 'CartpoleBalance'], capture_output=True, text=True,
      env=env, timeout=600)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  rows = _read(tmp_path / 'out' / 'rows.csv')
  assert sorted(r['seed'] for r in rows) == ['0', '1', '2']
  cores = subprocess.run(['nproc', '--all'], capture_output=True, text=True,
                         check=True).stdout.strip()
  assert {r['machine'] for r in rows} == {f'Test chip + {cores}-core host'}
  assert {r['variant'] for r in rows} == {'tiny'}
  assert 'hidden_sizes=16,16' in rows[0]['overrides']
  assert len(_read(tmp_path / 'out' / 'curves.csv')) == 6  # 1k and 2k a seed.
  # Too little time left for a task: it is skipped and the status says so.
  proc = subprocess.run(
      ['bash', os.path.join(BENCH, 'device_dmc.sh'), '30', 'sac', '2000',
       'tiny', sets, 'CartpoleSwingup'], capture_output=True, text=True,
      env=env, timeout=600)
  assert proc.returncode == 1
  assert 'CartpoleSwingup: skipped' in proc.stdout


def test_device_script_without_its_arguments_prints_usage_and_exits_2():
  proc = subprocess.run(['bash', os.path.join(BENCH, 'device_dmc.sh'), '60'],
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 2
  assert 'device_dmc.sh SECONDS AGENT BUDGETS VARIANT SETS TASK' in proc.stderr


def test_a_report_holds_the_csvs_so_no_append_lands_between_read_and_write(
    tmp_path, monkeypatch):
  # Bug reproduced: two dmc.py jobs; one's report read dmc.csv, the other
  # appended its 500k rows and wrote its DMC.md, then the first wrote its
  # DMC.md without them. Now the report (dmc_report.main, run by dmc.py
  # or by hand) holds the CSVs from its read to its write, and an append
  # waits for it. Run by hand here: that failed while only dmc.py's
  # write_report took the lock.
  import threading  # pylint: disable=g-import-not-at-top
  results, curves = tmp_path / 'dmc.csv', tmp_path / 'curves.csv'
  row = {c: '1' for c in dmc.COLUMNS}
  dmc.append_row(str(results), dmc.COLUMNS, row)
  curves.write_text(','.join(dmc.CURVE_COLUMNS) + '\n')
  writing = threading.Event()
  seen = {}
  write_markdown = dmc_report.write_markdown

  def slow_write(rows, *args):
    seen['rows'] = len(rows)
    writing.set()
    # The other job's append, were it let in, lands within this window.
    threading.Event().wait(0.5)
    seen['lines_at_write'] = results.read_text().count('\n')
    return write_markdown(rows, *args)

  monkeypatch.setattr(dmc_report, 'write_markdown', slow_write)
  other = threading.Thread(target=lambda: (
      writing.wait(10), dmc.append_row(str(results), dmc.COLUMNS, row)),
      daemon=True)
  other.start()
  assert dmc_report.main(['--results', str(results), '--curves',
                          str(curves), '--no-plots']) == 0
  other.join(10)
  # DMC.md was written from the one row read, and none landed before.
  assert seen['rows'] == 1 and seen['lines_at_write'] == 2
  assert results.read_text().count('\n') == 3  # Header and both rows.


def test_the_lock_is_reentrant_within_a_thread_and_excludes_others(tmp_path):
  # Bug reproduced: a dmc.py job holding the CSVs' locks for its report
  # imported a newer dmc_report.py whose main takes them too, and waited
  # on itself for good (flock does not know its own process's other open
  # file). Nested takes in one thread now pass; another thread still waits.
  import threading  # pylint: disable=g-import-not-at-top
  results, curves = tmp_path / 'dmc.csv', tmp_path / 'curves.csv'
  dmc.append_row(str(results), dmc.COLUMNS, {c: '1' for c in dmc.COLUMNS})
  curves.write_text(','.join(dmc.CURVE_COLUMNS) + '\n')
  done, other_in = threading.Event(), threading.Event()

  def nested():
    with dmc.locked_all([str(results), str(curves)]):
      assert dmc_report.main(['--results', str(results), '--curves',
                              str(curves), '--no-plots']) == 0
      with dmc.locked(str(results)):
        other = threading.Thread(target=lambda: (
            dmc.append_row(str(results), dmc.COLUMNS,
                           {c: '2' for c in dmc.COLUMNS}),
            other_in.set()), daemon=True)
        other.start()
        assert not other_in.wait(0.3)  # Held (twice) here: it waits.
      assert not other_in.wait(0.3)  # Still held once.
    assert other_in.wait(10)  # Released: it appends.
    done.set()

  worker = threading.Thread(target=nested, daemon=True)
  worker.start()
  worker.join(30)
  assert done.is_set()  # Before the fix the thread hung in the report.
  assert results.read_text().count('\n') == 3


def test_run_as_a_script_dmc_is_one_module(tmp_path):
  # Bug reproduced: `python benchmarks/dmc.py` runs as __main__, and its
  # report's `import dmc` loaded the file a second time: two lock
  # registries, and code as it was on disk then. A job whose write_report
  # held the CSVs' locks hung in that second copy taking them again.
  results, curves = tmp_path / 'dmc.csv', tmp_path / 'curves.csv'
  dmc.append_row(str(results), dmc.COLUMNS, {c: '1' for c in dmc.COLUMNS})
  curves.write_text(','.join(dmc.CURVE_COLUMNS) + '\n')
  code = (
      'import runpy, sys\n'
      f'sys.argv = ["dmc.py", "--report", "--results", {str(results)!r}, '
      f'"--curves", {str(curves)!r}]\n'
      'try:\n'
      f'  runpy.run_path({dmc.__file__!r}, run_name="__main__")\n'
      'except SystemExit as e:\n'
      '  assert not e.code, e.code\n'
      'print(sys.modules["dmc"].__name__)\n')
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        text=True, check=False, timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split()[-1] == '__main__'  # Not a second copy, 'dmc'.
