"""Run folders written before RunConfig still load, evaluate and resume.

tests/fixtures/runs_before_runconfig/ holds what `roxie train` wrote before
the run settings became a typed `RunConfig` (the `meta` dict era): a tiny SAC
run and a tiny PPO run (config.json, metrics.csv, agent_state.npz; their
checkpoints are left out, they are large) and the config.json of a pixel run
with a resolution schedule (written by `_new_run_meta`, nothing trained).
They were made with

  roxie train --agent sac --task CartpoleBalance --num-envs 2 --seed 3 \
    --eval-every 40 --eval-episodes 2 --episode-length 20 \
    --set hidden_sizes=16,16 --set batch_size=16 --set warmup_steps=20 \
    --set replay_capacity=64 --quiet --steps 80 --out sac
  roxie train --agent ppo --task CartpoleBalance --num-envs 2 --seed 1 \
    --eval-episodes 2 --episode-length 20 --set hidden_sizes=16,16 \
    --quiet --steps 64 --out ppo
"""

import csv
import json
import os
import shutil

import numpy as np
import pytest

from roxie import cli
from roxie import run as run_lib

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures',
                        'runs_before_runconfig')


def _copy(tmp_path, name):
  dst = tmp_path / name
  shutil.copytree(os.path.join(FIXTURES, name), dst)
  return str(dst)


def _rows(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


@pytest.mark.parametrize('name', ['sac', 'ppo'])
def test_an_old_run_folder_loads_and_evaluates(tmp_path, capsys, name):
  run_dir = _copy(tmp_path, name)
  meta, module, cfg = run_lib.load_run(run_dir)
  assert meta['agent'] == name and module.__name__.endswith(name)
  assert cfg.hidden_sizes == (16, 16)
  code = cli.main(['eval', '--run', run_dir, '--episodes', '2'])
  out, err = capsys.readouterr()
  assert code == 0, err
  # CartpoleBalance pays at most 1 per step for 20 steps.
  ret = float(out.split('return=')[1].split()[0])
  assert 0.0 < ret <= 20.0, out


def test_an_old_sac_run_without_checkpoints_resumes_from_step_0(tmp_path,
                                                                capsys):
  """No checkpoint: resume restarts from step 0 with the saved settings.

  The rows it recomputes are those the pre-change code wrote, but for the
  timing columns (the same program, seed and settings); the tolerance only
  allows for another CPU's floating point.
  """
  run_dir = _copy(tmp_path, 'sac')
  before = _rows(os.path.join(run_dir, 'metrics.csv'))
  result = run_lib.resume(run_dir, verbose=True)
  assert 'starting it again from step 0' in capsys.readouterr().out
  assert result.env_steps == 80 and result.resumed_from is None
  after = _rows(os.path.join(run_dir, 'metrics.csv'))
  assert list(after[0]) == list(before[0])
  assert [r['env_steps'] for r in after] == ['40', '80']
  for old, new in zip(before, after):
    for k in old:
      if k in ('wall_time', 'sps'):
        continue
      np.testing.assert_allclose(float(new[k]), float(old[k]), rtol=1e-3,
                                 atol=1e-3, err_msg=k)
  with open(os.path.join(run_dir, 'config.json')) as f, open(
      os.path.join(FIXTURES, 'sac', 'config.json')) as g:
    assert json.load(f) == json.load(g)  # Same total: not rewritten.
  assert os.path.exists(os.path.join(run_dir, 'metrics.csv.before-restart'))


def test_the_old_pixel_schedule_config_loads(tmp_path):
  run_dir = tmp_path / 'pixels'
  run_dir.mkdir()
  shutil.copy(os.path.join(FIXTURES, 'pixels_schedule_config.json'),
              run_dir / 'config.json')
  meta, _, cfg = run_lib.load_run(str(run_dir))
  assert cfg.encoder_pooling == 'mean'
  assert meta['resolution_schedule'] == [[0, 16, 16], [80, 24, 24]]
  # No checkpoint: evaluation and export use the first stage's size.
  options = run_lib.trained_env_options(str(run_dir), meta)
  assert (options['pixels']['height'], options['pixels']['width']) == (16, 16)
