"""Resume in a fresh process, from a crash or from a signal, for every agent.

test_resume.py resumes in the same process (one compile per case), and
test_resume_kill.py / test_interrupt.py resume SAC in fresh processes. Here:

- a crashed run of PPO (whose observation statistics are part of the agent
  state) and of the MJX backend resumes in a fresh `roxie train --resume`
  process to the same final checkpoint and metrics as an uninterrupted run;
- for every agent, a run stopped by SIGTERM (held at a known point by
  gated_train.py, so the stop is deterministic) writes a checkpoint that a
  fresh process resumes to the uninterrupted result.

PPO on the native backend is in the default tier; the rest is `slow` (each
case compiles its programs two or three times, in separate processes).
"""

import os
import signal

import pytest

from roxie import checkpoint as ckpt
from roxie.agents import AGENTS

from test_resume import (NATIVE_TOKEN, STEPS, TASK, EVAL_EVERY,  # pylint: disable=g-bad-import-order
                         assert_same_checkpoints, crash_copy, read_rows,
                         tiny_overrides, train_tiny, without_timing)
from test_resume_kill import (_log_text, _open_gate, _remove_gate, _start,  # pylint: disable=g-bad-import-order
                              _start_gated, _wait_at_gate, _wait_for)


def _argv(agent, backend, out):
  """`roxie train` with the settings of test_resume.train_tiny."""
  argv = ['train', '--agent', agent, '--task', TASK, '--backend', backend,
          '--num-envs', '2', '--seed', '3', '--steps', str(STEPS),
          '--eval-every', str(EVAL_EVERY), '--eval-episodes', '2',
          '--episode-length', '20', '--checkpoint-every', '1000', '--out',
          str(out), '--quiet']
  for k, v in tiny_overrides(agent).items():
    v = ','.join(map(str, v)) if isinstance(v, tuple) else v
    argv += ['--set', f'{k}={v}']
  return argv


def _resume_in_a_fresh_process(run_dir, log_path):
  with open(log_path, 'w') as log:
    proc = _start(['train', '--resume', str(run_dir)], log)
    assert proc.wait(timeout=1800) == 0, _log_text(log_path)
  text = _log_text(log_path)
  assert f'env_steps={STEPS}' in text, text
  return text


def _assert_same_run(run_dir, ref, backend):
  assert without_timing(read_rows(run_dir)) == without_timing(read_rows(ref))
  skip = {('loop', NATIVE_TOKEN)} if backend == 'cpu' else set()
  final = ckpt.step_name(STEPS)
  compared = assert_same_checkpoints(
      os.path.join(ckpt.checkpoint_dir(str(ref)), final),
      os.path.join(ckpt.checkpoint_dir(str(run_dir)), final), skip)
  assert compared > 20


@pytest.mark.parametrize('agent,backend', [
    ('ppo', 'cpu'),
    pytest.param('ppo', 'mjx', marks=pytest.mark.slow),
    pytest.param('sac', 'mjx', marks=pytest.mark.slow),
])
def test_crashed_run_resumes_in_a_fresh_process(agent, backend, tmp_path):
  ref = tmp_path / 'ref'
  train_tiny(agent, backend, ref, keep_checkpoints=10)
  if agent == 'ppo':
    # The observation statistics moved, so the resume has them to restore.
    leaves = [leaf for item in ckpt.read(ckpt.latest(str(ref))).values()
              for leaf in item]
    assert any('obs_stats' in leaf for leaf in leaves), leaves
  run_dir = crash_copy(ref, tmp_path / 'run', 80)
  text = _resume_in_a_fresh_process(run_dir, tmp_path / 'resume.txt')
  assert 'resumed' in text, text
  _assert_same_run(run_dir, ref, backend)


AGENT_CASES = [a if a == 'ppo' else pytest.param(a, marks=pytest.mark.slow)
               for a in AGENTS]


@pytest.mark.parametrize('agent', AGENT_CASES)
def test_signal_checkpoint_resumes_in_a_fresh_process(agent, tmp_path):
  run_dir = tmp_path / 'run'
  log_path = tmp_path / 'log0.txt'
  # SIGTERM while held after the first evaluation row (40 steps): the run
  # stops at the next boundary with a checkpoint there, the only one
  # (scheduled checkpoints are put off past the end).
  with open(log_path, 'w') as log:
    proc = _start_gated(_argv(agent, 'cpu', run_dir), log, rows=1)
    _wait_at_gate(proc, run_dir)
    os.kill(proc.pid, signal.SIGTERM)
    _wait_for(proc, lambda: 'SIGTERM received' in _log_text(log_path),
              'the signal to be seen')
    _open_gate(run_dir)
    assert proc.wait(timeout=900) == 143, _log_text(log_path)
  _remove_gate(run_dir)
  steps = ckpt.list_steps(str(run_dir))
  assert len(steps) == 1 and EVAL_EVERY <= steps[0] < STEPS, steps
  _resume_in_a_fresh_process(run_dir, tmp_path / 'log1.txt')
  ref = tmp_path / 'ref'
  train_tiny(agent, 'cpu', ref)
  _assert_same_run(run_dir, ref, 'cpu')
