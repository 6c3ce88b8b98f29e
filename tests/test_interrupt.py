"""Ctrl-C (SIGINT) and SIGTERM stop a real `roxie train` with a checkpoint.

Scheduled checkpoints are put off past the end (--checkpoint-every 1000), so
every checkpoint before it is one a signal made.

1. `roxie train` gets SIGINT after its first metrics row: it stops at the
   next iteration boundary with a checkpoint there, says where and how to
   resume, and exits 130.
2. `roxie train --resume` gets SIGINT twice while a checkpoint write is
   paused (ROXIE_CHECKPOINT_PAUSE): it stops at once, exits 130, and the
   unfinished write is removed; the previous checkpoint is intact.
3. `roxie train --resume` gets SIGTERM: checkpoint at the boundary, exit 143.
4. `roxie train --resume` runs to the end.

Steps 1 and 3 run under `gated_train.py`: the child is held before a
training call, signalled there, and let go once it has seen the signal, so
it cannot finish the run first however fast the machine is.

The result must equal an uninterrupted in-process run: metrics.csv row for
row (but wall_time and sps) and every leaf of the final checkpoint.
"""

import os
import re
import signal
import subprocess

from roxie import checkpoint as ckpt

from test_resume import read_rows  # pylint: disable=g-bad-import-order
from test_resume_kill import (STEPS, _argv, _log_text, _open_gate,  # pylint: disable=g-bad-import-order
                              _remove_gate, _start, _start_gated, _tmp_dirs,
                              _wait_at_gate, _wait_for,
                              assert_matches_uninterrupted)

NO_SCHEDULED_CHECKPOINTS = ['--checkpoint-every', '1000']
_STOPPED = re.compile(r'stopped by (SIG[A-Z]+) at (\d+) env steps of (\d+); '
                      r'checkpoint saved to (\S+), (\d+) rows in')


def _stopped_at(text, signame):
  match = _STOPPED.search(text)
  assert match, text
  assert match.group(1) == signame, text
  assert 'Resume with: roxie train --resume ' in text, text
  return int(match.group(2)), match.group(4), int(match.group(5))


def _signal_and_wait(proc, signum, timeout=600):
  os.kill(proc.pid, signum)
  try:
    return proc.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    raise


def _signal_at_gate(proc, run_dir, log_path, signum):
  """Signals the child held at the gate, lets it go once it saw the signal.

  Returns its exit code.
  """
  _wait_at_gate(proc, run_dir)
  os.kill(proc.pid, signum)
  _wait_for(proc, lambda: f'{signal.Signals(signum).name} received' in
            _log_text(log_path), 'the signal to be seen')
  _open_gate(run_dir)
  try:
    code = proc.wait(timeout=600)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    raise
  _remove_gate(run_dir)
  return code


def _check_stop(run_dir, text, signame, after):
  """The run stopped after `after` env steps with a checkpoint there."""
  step, path, rows = _stopped_at(text, signame)
  assert after < step < STEPS, (after, step)
  assert ckpt.list_steps(str(run_dir))[-1] == step
  assert os.path.samefile(path, ckpt.latest(str(run_dir)))
  meta = ckpt.read_meta(path)['meta']
  assert meta['runner']['env_steps'] == step
  # metrics.csv: every row so far, all covered by the checkpoint.
  assert meta['runner']['csv_rows'] == rows == len(read_rows(run_dir))
  assert [int(r['env_steps']) for r in read_rows(run_dir)] == list(
      range(40, step + 1, 40))
  assert not _tmp_dirs(run_dir)
  return step


def test_sigint_and_sigterm_stop_with_a_checkpoint_and_resume(tmp_path):
  run_dir = tmp_path / 'run'
  logs = [tmp_path / f'log{i}.txt' for i in range(4)]

  # 1. SIGINT once the first metrics row (40 steps) is there.
  with open(logs[0], 'w') as log:
    proc = _start_gated(_argv(run_dir) + NO_SCHEDULED_CHECKPOINTS, log,
                        rows=1)
    _wait_at_gate(proc, run_dir)
    assert not ckpt.list_steps(str(run_dir))
    code = _signal_at_gate(proc, run_dir, logs[0], signal.SIGINT)
  text = _log_text(logs[0])
  assert code == 130, text
  assert 'SIGINT received: stopping after the current training call' in text
  stop1 = _check_stop(run_dir, text, 'SIGINT', 0)
  assert ckpt.list_steps(str(run_dir)) == [stop1]

  # 2. Resumed (checkpointing at each evaluation); two SIGINTs while its
  #    first checkpoint write is paused.
  with open(logs[1], 'w') as log:
    proc = _start(_argv(run_dir, resume=True), log,
                  ROXIE_CHECKPOINT_PAUSE='600')
    _wait_for(proc, lambda: any(os.path.isdir(os.path.join(d, 'agent'))
                                for d in _tmp_dirs(run_dir)),
              'a checkpoint write to begin')
    os.kill(proc.pid, signal.SIGINT)
    _wait_for(proc, lambda: 'SIGINT received' in _log_text(logs[1]),
              'the first SIGINT to be seen')
    code = _signal_and_wait(proc, signal.SIGINT)
  text = _log_text(logs[1])
  assert code == 130, text
  assert 'stopped at once by a second SIGINT' in text, text
  assert 'Traceback' not in text, text
  assert ckpt.list_steps(str(run_dir))[-1] == stop1
  assert not _tmp_dirs(run_dir)  # The unfinished write was removed.
  ckpt.read(ckpt.latest(str(run_dir)))  # And the last one reads.

  # 3. Resumed; SIGTERM once it has written a new metrics row.
  with open(logs[2], 'w') as log:
    rows = len(read_rows(run_dir))
    proc = _start_gated(_argv(run_dir, resume=True) + NO_SCHEDULED_CHECKPOINTS,
                        log, rows=rows + 1)
    code = _signal_at_gate(proc, run_dir, logs[2], signal.SIGTERM)
  text = _log_text(logs[2])
  assert code == 143, text
  assert f'resumed {run_dir}' in text, text
  stop3 = _check_stop(run_dir, text, 'SIGTERM', stop1)
  assert ckpt.list_steps(str(run_dir)) == [stop1, stop3]

  # 4. Resumed to the end.
  with open(logs[3], 'w') as log:
    proc = _start(_argv(run_dir, resume=True), log)
    assert proc.wait(timeout=900) == 0, _log_text(logs[3])
  rows = read_rows(run_dir)
  assert [int(r['env_steps']) for r in rows] == list(range(40, STEPS + 1, 40))

  # The same run, uninterrupted, in this process.
  assert_matches_uninterrupted(run_dir, rows, tmp_path / 'ref')


def test_ctrl_c_before_the_loop_takes_over_exits_130(tmp_path, monkeypatch,
                                                      capsys):
  from roxie import cli  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  def interrupted(*args, **kwargs):
    del args, kwargs
    raise KeyboardInterrupt  # As Ctrl-C while the programs compile.

  monkeypatch.setattr(run_lib, 'train', interrupted)
  code = cli.main(['train', '--agent', 'sac', '--task', 'PendulumSwingup',
                   '--out', str(tmp_path / 'run'), '--quiet'])
  assert code == 130
  _, err = capsys.readouterr()
  assert 'interrupted; no checkpoint was written' in err, err
  assert '--resume' not in err  # There is no run to resume.
