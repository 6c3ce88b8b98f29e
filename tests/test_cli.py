"""The `roxie` command: bad input fails early and clearly; a tiny run works."""

import csv
import json
import os

import pytest

from roxie import cli


def _run(capsys, *argv):
  code = cli.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.mark.parametrize('argv, needle', [
    (('train', '--agent', 'dqn'), 'not one of ddpg, td3, d4pg, td4, sac'),
    (('train', '--task', 'CartpoleSwingUp'), 'CartpoleSwingup'),
    (('train', '--set', 'batch_sise=3'), 'batch_size'),
    (('train', '--set', 'batch_size=three'), 'batch_size'),
    (('train', '--set', 'batch_size'), 'field=value'),
    (('train', '--steps', '0'), '--steps must be >= 1'),
    (('train', '--backend', 'gpu'), 'invalid choice'),
])
def test_bad_train_input_exits_2_and_writes_nothing(tmp_path, capsys, argv,
                                                    needle):
  out_dir = tmp_path / 'run'
  try:
    code, out, err = _run(capsys, *argv, '--out', str(out_dir))
  except SystemExit as e:  # argparse's own usage errors
    code = e.code
    out, err = capsys.readouterr()
  assert code == 2
  assert needle in err
  assert not out_dir.exists()


def test_unknown_task_lists_the_available_ones(capsys):
  code, _, err = _run(capsys, 'train', '--task', 'Nope')
  assert code == 2
  assert 'Available tasks' in err and 'PendulumSwingup' in err


def test_eval_of_a_missing_run_is_a_clear_error(tmp_path, capsys):
  code, _, err = _run(capsys, 'eval', '--run', str(tmp_path / 'none'))
  assert code == 2
  assert 'not a roxie run' in err


def test_tiny_training_run_writes_metrics_and_can_be_re_evaluated(
    tmp_path, capsys):
  out_dir = tmp_path / 'run'
  code, out, _ = _run(
      capsys, 'train', '--agent', 'sac', '--task', 'PendulumSwingup',
      '--steps', '400', '--num-envs', '2', '--eval-every', '200',
      '--eval-episodes', '2', '--episode-length', '40', '--out', str(out_dir),
      '--set', 'warmup_steps=100', '--set', 'batch_size=32',
      '--set', 'hidden_sizes=16,16', '--quiet')
  assert code == 0
  final = [l for l in out.splitlines() if l.startswith('final eval_return=')]
  assert len(final) == 1 and 'env_steps=400' in final[0]
  with open(out_dir / 'config.json') as f:
    meta = json.load(f)
  assert meta['config']['hidden_sizes'] == [16, 16]
  assert meta['config']['batch_size'] == 32
  with open(out_dir / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  assert [int(r['env_steps']) for r in rows] == [200, 400]
  for col in ('wall_time', 'eval_return', 'eval_return_std',
              'train_episode_return', 'sps', 'critic_loss', 'actor_loss'):
    assert col in rows[0]
  code, out, _ = _run(capsys, 'eval', '--run', str(out_dir), '--episodes', '2')
  assert code == 0
  assert out.startswith('eval_return=')
  # eval reads the latest checkpoint; a truncated one is reported, not
  # crashed on.
  meta = out_dir / 'checkpoints' / 'step_000000000400' / 'meta.json'
  meta.write_bytes(meta.read_bytes()[:100])
  code, _, err = _run(capsys, 'eval', '--run', str(out_dir), '--episodes', '2')
  assert code == 2 and 'unreadable' in err
