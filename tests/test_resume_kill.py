"""kill -9 a real `roxie train` process, twice, and resume it to the end.

1. `roxie train --checkpoint-every 80` (evaluating every 40 steps) is killed
   (SIGKILL) while it trains on after its first checkpoint, once metrics.csv
   has a row the checkpoint does not cover (which the resume must drop).
2. `roxie train --resume` is killed in the middle of writing a checkpoint
   (ROXIE_CHECKPOINT_PAUSE makes the write pause after its first item).
3. `roxie train --resume` runs to the end.

The child of step 1 runs under `gated_train.py`, which holds it before a
training call once the state to kill is on disk, so the kill lands on a
process that is still training however fast the machine is.

The result must equal an uninterrupted in-process run with the same settings:
metrics.csv row for row (but wall_time and sps), no duplicated or missing
rows, and every leaf of the final checkpoint. A fresh process restores the
native backend's host physics from the checkpoint alone, so this also checks
that no hidden host state is missing.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from roxie import checkpoint as ckpt
from roxie import run as run_lib

import gated_train  # pylint: disable=g-bad-import-order
from test_resume import (NATIVE_TOKEN, TASK, assert_same_checkpoints,  # pylint: disable=g-bad-import-order
                         read_rows, tiny_overrides, train_tiny,
                         without_timing)

STEPS = 400
POLL = 0.02


def _argv(out, resume=False):
  if resume:
    return ['train', '--resume', str(out)]
  # Checkpoints every other evaluation; the program (20 iterations per call)
  # is the same as with a checkpoint at each evaluation.
  argv = ['train', '--agent', 'sac', '--task', TASK, '--backend', 'cpu',
          '--num-envs', '2', '--seed', '3', '--steps', str(STEPS),
          '--eval-every', '40', '--eval-episodes', '2', '--episode-length',
          '20', '--checkpoint-every', '80', '--out', str(out), '--quiet']
  for k, v in tiny_overrides('sac').items():
    v = ','.join(map(str, v)) if isinstance(v, tuple) else v
    argv += ['--set', f'{k}={v}']
  return argv


def _start(argv, log, **env):
  full_env = dict(os.environ, **env)
  full_env.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
  return subprocess.Popen(
      [sys.executable, '-m', 'roxie.cli'] + argv, env=full_env,
      stdout=log, stderr=subprocess.STDOUT,
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start_gated(argv, log, *, rows, checkpoint=False, **env):
  """`_start` under gated_train.py: held once `rows` metrics rows exist."""
  full_env = dict(os.environ, ROXIE_TEST_GATE_ROWS=str(rows),
                  ROXIE_TEST_GATE_CHECKPOINT='1' if checkpoint else '0',
                  **env)
  full_env.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
  here = os.path.dirname(os.path.abspath(__file__))
  return subprocess.Popen(
      [sys.executable, os.path.join(here, 'gated_train.py')] + argv,
      env=full_env, stdout=log, stderr=subprocess.STDOUT,
      cwd=os.path.dirname(here))


def _wait_at_gate(proc, run_dir):
  _wait_for(proc, lambda: os.path.exists(os.path.join(run_dir,
                                                      gated_train.BLOCKED)),
            'the child to stop at the gate')


def _open_gate(run_dir):
  with open(os.path.join(run_dir, gated_train.RELEASE), 'w'):
    pass


def _remove_gate(run_dir):
  for name in (gated_train.BLOCKED, gated_train.RELEASE):
    if os.path.exists(os.path.join(run_dir, name)):
      os.remove(os.path.join(run_dir, name))


def _wait_for(proc, condition, what, timeout=900):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if condition():
      return
    if proc.poll() is not None:
      pytest.fail(f'the process exited ({proc.returncode}) before {what}')
    time.sleep(POLL)
  proc.kill()
  pytest.fail(f'timed out waiting for {what}')


def _kill(proc):
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL


def _tmp_dirs(run_dir):
  root = ckpt.checkpoint_dir(str(run_dir))
  if not os.path.isdir(root):
    return []
  return [os.path.join(root, n) for n in os.listdir(root)
          if n.startswith('.tmp-')]


def _log_text(path):
  with open(path) as f:
    return f.read()


def assert_matches_uninterrupted(run_dir, rows, ref):
  """The run's metrics and final checkpoint equal an uninterrupted run's.

  `ref` is where the same run is trained again, in this process.
  """
  train_tiny('sac', 'cpu', ref, steps=STEPS)
  assert without_timing(rows) == without_timing(read_rows(ref))
  final = ckpt.step_name(STEPS)
  assert_same_checkpoints(
      os.path.join(ckpt.checkpoint_dir(str(ref)), final),
      os.path.join(ckpt.checkpoint_dir(str(run_dir)), final),
      skip={('loop', NATIVE_TOKEN)})


def test_kill_9_twice_then_resume_matches_an_uninterrupted_run(tmp_path):
  run_dir = tmp_path / 'run'
  logs = [tmp_path / f'log{i}.txt' for i in range(3)]

  # 1. Killed mid-training, held after its first checkpoint (80 steps) and
  #    the evaluation row of 120 steps, which that checkpoint does not cover.
  with open(logs[0], 'w') as log:
    proc = _start_gated(_argv(run_dir), log, rows=3, checkpoint=True)
    _wait_at_gate(proc, run_dir)
    _kill(proc)
  _remove_gate(run_dir)
  first = ckpt.list_steps(str(run_dir))
  assert first == [80], first
  covered = ckpt.read_meta(ckpt.latest(str(run_dir)))['meta']['runner'][
      'csv_rows']
  uncovered = len(read_rows(run_dir)) - covered
  assert (covered, uncovered) == (2, 1), (covered, uncovered)

  # 2. Resumed, then killed inside a checkpoint write (between items).
  def mid_write():
    return any(os.path.isdir(os.path.join(d, 'agent')) for d in
               _tmp_dirs(run_dir))
  with open(logs[1], 'w') as log:
    proc = _start(_argv(run_dir, resume=True), log,
                  ROXIE_CHECKPOINT_PAUSE='600')
    _wait_for(proc, mid_write, 'a checkpoint write to begin')
    _kill(proc)
  half = _tmp_dirs(run_dir)
  assert len(half) == 1 and not os.path.exists(
      os.path.join(half[0], ckpt.META_FILE)), half
  text = _log_text(logs[1])
  assert 'resumed' in text, text
  assert f'dropped {uncovered} metrics.csv row' in text, text
  committed = ckpt.list_steps(str(run_dir))
  assert committed[-1] >= first[-1]
  # The run is resumable: its latest checkpoint reads.
  ckpt.read(ckpt.latest(str(run_dir)))

  # 3. Resumed to the end.
  with open(logs[2], 'w') as log:
    proc = _start(_argv(run_dir, resume=True), log)
    assert proc.wait(timeout=900) == 0, _log_text(logs[2])
  text = _log_text(logs[2])
  assert 'removed 1 unfinished checkpoint write' in text, text
  assert f'env_steps={STEPS}' in text
  assert not _tmp_dirs(run_dir)

  rows = read_rows(run_dir)
  steps = [int(r['env_steps']) for r in rows]
  assert steps == list(range(40, STEPS + 1, 40)), steps

  assert_matches_uninterrupted(run_dir, rows, tmp_path / 'ref')
  # eval reads the resumed run's final checkpoint.
  result = run_lib.evaluate_run(str(run_dir), episodes=2)
  assert result.returns.shape == (2,)
