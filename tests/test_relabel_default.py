"""benchmarks/relabel_default.py: a recipe's rows after its default changes."""

import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'relabel_default.py')
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))

import relabel_default  # pylint: disable=g-import-not-at-top,wrong-import-position

RESULTS = ['agent', 'task', 'seed', 'variant', 'overrides', 'eval_return']
CURVES = ['agent', 'task', 'seed', 'variant', 'env_steps', 'eval_return']
# (variant, overrides) of one recipe's rows, as dmc.py wrote them, and one
# row of another recipe.
BEFORE = [
    ('d4pg', 'default', ''),
    ('d4pg', 'lr1e-3-obsnorm',
     'actor_lr=1e-3;critic_lr=1e-3;normalize_observations=true'),
    ('d4pg', 'obsnorm', 'normalize_observations=true'),
    ('d4pg', 'warmup5k', 'warmup_steps=5000'),
    # One changed field set to its new value, written another way.
    ('d4pg', 'clr', 'critic_lr=0.001'),
    ('sac', 'default', ''),
]
ARGS = ['--agent', 'd4pg', '--new', 'lr1e-3-obsnorm',
        '--old-name', 'lr3e-4-noobsnorm', '--was', 'actor_lr=3e-4',
        '--was', 'critic_lr=3e-4', '--was', 'normalize_observations=false',
        '--rename', 'obsnorm=lr3e-4']


def _write(path, header, rows):
  with open(path, 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=header, lineterminator='\r\n')
    writer.writeheader()
    writer.writerows(rows)


def _files(tmp_path, before=BEFORE):
  results, curves = str(tmp_path / 'dmc.csv'), str(tmp_path / 'curves.csv')
  _write(results, RESULTS, [
      dict(agent=a, task='CheetahRun', seed='0', variant=v, overrides=o,
           eval_return=str(i)) for i, (a, v, o) in enumerate(before)])
  _write(curves, CURVES, [
      dict(agent=a, task='CheetahRun', seed='0', variant=v, env_steps='10',
           eval_return=str(i)) for i, (a, v, _) in enumerate(before)])
  return results, curves


def _read(path):
  with open(path, newline='') as f:
    return [(r['agent'], r['variant'], r.get('overrides'))
            for r in csv.DictReader(f)]


def test_rows_are_relabelled_relative_to_the_new_default(tmp_path):
  results, curves = _files(tmp_path)
  assert relabel_default.main(ARGS + [results, curves]) == 0
  assert _read(results) == [
      ('d4pg', 'lr3e-4-noobsnorm',
       'actor_lr=3e-4;critic_lr=3e-4;normalize_observations=false'),
      ('d4pg', 'default', ''),
      # Standardised at the old rate: only the rates differ now.
      ('d4pg', 'lr3e-4', 'actor_lr=3e-4;critic_lr=3e-4'),
      ('d4pg', 'warmup5k', 'actor_lr=3e-4;critic_lr=3e-4;'
       'normalize_observations=false;warmup_steps=5000'),
      # 0.001 is the new default's 1e-3: dropped.
      ('d4pg', 'clr', 'actor_lr=3e-4;normalize_observations=false'),
      ('sac', 'default', ''),
  ]
  # Curves: the names only, the same rows in the same order, the rest kept.
  assert [v for _, v, _ in _read(curves)] == [
      'lr3e-4-noobsnorm', 'default', 'lr3e-4', 'warmup5k', 'clr', 'default']
  with open(curves, newline='') as f:
    assert [r['eval_return'] for r in csv.DictReader(f)] == [
        str(i) for i in range(len(BEFORE))]


@pytest.mark.parametrize('change, match', [
    # The new variant sets a field --was does not name.
    (dict(was=['--was', 'actor_lr=3e-4', '--was', 'critic_lr=3e-4']),
     'exactly the --was fields'),
    (dict(new='nothing-like-it'), "no d4pg rows of variant 'nothing-like-it'"),
    (dict(old_name='warmup5k'), 'already has variant'),
    (dict(old_name='default'), 'cannot be a new name'),
    (dict(was=['--was', 'actor_lr']), 'NAME=VALUE'),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, change, match):
  results, curves = _files(tmp_path)
  with open(results) as f:
    before = f.read()
  args = ['--agent', 'd4pg', '--new', change.get('new', 'lr1e-3-obsnorm'),
          '--old-name', change.get('old_name', 'lr3e-4-noobsnorm')]
  args += change.get('was', ARGS[6:12])
  proc = subprocess.run([sys.executable, SCRIPT, *args, results, curves],
                        capture_output=True, text=True, check=False)
  assert proc.returncode == 2, proc.stderr
  assert match in proc.stderr
  with open(results) as f:
    assert f.read() == before
  assert sorted(os.listdir(tmp_path)) == ['curves.csv', 'dmc.csv']


def test_a_variant_equal_to_the_new_default_is_refused(tmp_path):
  results, curves = _files(tmp_path, BEFORE + [
      ('d4pg', 'same', 'actor_lr=0.001;critic_lr=1e-3;'
       'normalize_observations=True')])
  with pytest.raises(relabel_default.RelabelError, match="'same' trains the"):
    relabel_default.plan([results, curves], 'd4pg', 'lr1e-3-obsnorm',
                         'old', {'actor_lr': '3e-4', 'critic_lr': '3e-4',
                                 'normalize_observations': 'false'}, {})


def test_an_append_during_the_relabel_lands_in_the_new_file(tmp_path,
                                                            monkeypatch):
  # Bug reproduced: relabel_default.py read dmc.csv, a benchmark job then
  # appended its row, and the relabelled file moved over it without that
  # row. Now the relabel holds dmc.py's lock from read to move; the append
  # waits and lands in the new file.
  import threading  # pylint: disable=g-import-not-at-top
  import dmc  # pylint: disable=g-import-not-at-top
  results, curves = _files(tmp_path)
  row = dict(agent='sac', task='WalkerWalk', seed='1', variant='default',
             overrides='', eval_return='7')
  read = threading.Event()
  write = relabel_default.write

  def slow_write(*args):
    read.set()
    threading.Event().wait(0.5)  # An unheld append lands in this window.
    write(*args)

  monkeypatch.setattr(relabel_default, 'write', slow_write)
  job = threading.Thread(target=lambda: (
      read.wait(10), dmc.append_row(results, RESULTS, row)), daemon=True)
  job.start()
  assert relabel_default.main(ARGS + [results, curves]) == 0
  job.join()
  rows = _read(results)
  assert rows[-1] == ('sac', 'default', '')  # The job's row, last.
  assert len(rows) == len(BEFORE) + 1
  assert ('d4pg', 'default', '') in rows  # And the relabel's.


def _runs(root, folders):
  """Run folders, each holding a file that names where it was made."""
  for folder in folders:
    path = os.path.join(root, folder)
    os.makedirs(path)
    with open(os.path.join(path, 'origin'), 'w') as f:
      f.write(folder)


def _origins(root):
  out = {}
  for dirpath, _, files in os.walk(root):
    if 'origin' in files:
      with open(os.path.join(dirpath, 'origin')) as f:
        out[os.path.relpath(dirpath, root)] = f.read()
  return out


def test_runs_move_with_their_rows(tmp_path):
  results, curves = _files(tmp_path)
  runs = tmp_path / 'runs'
  _runs(runs, ['d4pg-CheetahRun-seed0', 'd4pg-CheetahRun-seed1',
               'lr1e-3-obsnorm/d4pg-CheetahRun-seed0',
               'obsnorm/d4pg-FingerSpin-seed2',
               'warmup5k/d4pg-CheetahRun-seed0',
               # Another recipe's, a legacy name and a file stay put.
               'sac-CheetahRun-seed0', 'd4pg-CheetahRun-seed0-old'])
  (runs / 'd4pg-notes.txt').write_text('x')
  assert relabel_default.main(ARGS + [results, curves, '--runs',
                                      str(runs)]) == 0
  assert _origins(runs) == {
      'lr3e-4-noobsnorm/d4pg-CheetahRun-seed0': 'd4pg-CheetahRun-seed0',
      'lr3e-4-noobsnorm/d4pg-CheetahRun-seed1': 'd4pg-CheetahRun-seed1',
      # The new default's run takes the name its old default's just left.
      'd4pg-CheetahRun-seed0': 'lr1e-3-obsnorm/d4pg-CheetahRun-seed0',
      'lr3e-4/d4pg-FingerSpin-seed2': 'obsnorm/d4pg-FingerSpin-seed2',
      'warmup5k/d4pg-CheetahRun-seed0': 'warmup5k/d4pg-CheetahRun-seed0',
      'sac-CheetahRun-seed0': 'sac-CheetahRun-seed0',
      'd4pg-CheetahRun-seed0-old': 'd4pg-CheetahRun-seed0-old'}
  assert (runs / 'd4pg-notes.txt').exists()


@pytest.mark.parametrize('trouble', ['taken', 'training'])
def test_a_run_that_cannot_move_stops_it_before_anything_is_written(
    tmp_path, trouble):
  import fcntl  # pylint: disable=g-import-not-at-top
  results, curves = _files(tmp_path)
  runs = tmp_path / 'runs'
  _runs(runs, ['d4pg-CheetahRun-seed0', 'lr1e-3-obsnorm/d4pg-CheetahRun-seed1'])
  if trouble == 'taken':  # The old default's run would land on this one.
    _runs(runs, ['lr3e-4-noobsnorm/d4pg-CheetahRun-seed0'])
    match = 'exists'
  else:  # A job trains the new default's seed 1 now: it holds the lock.
    held = open(runs / 'lr1e-3-obsnorm/d4pg-CheetahRun-seed1/.lock', 'a')
    fcntl.flock(held, fcntl.LOCK_EX)
    match = 'being trained'
  before = _origins(runs)
  with open(results) as f:
    text = f.read()
  proc = subprocess.run(
      [sys.executable, SCRIPT, *ARGS, results, curves, '--runs', str(runs)],
      capture_output=True, text=True, check=False)
  assert proc.returncode == 2, proc.stderr
  assert match in proc.stderr
  assert _origins(runs) == before
  with open(results) as f:
    assert f.read() == text
  assert not [n for n in os.listdir(tmp_path) if n.endswith('.lock')]
