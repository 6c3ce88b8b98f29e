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
import dataclasses
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
  run, module, cfg = run_lib.load_run_config(run_dir)
  assert run.agent == name and module.__name__.endswith(name)
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
  run, _, cfg = run_lib.load_run_config(str(run_dir))
  assert cfg.pixels.encoder_pooling == 'mean'
  assert run.resolution_schedule == ((0, 16, 16), (80, 24, 24))
  # No checkpoint: evaluation and export use the first stage's size.
  options = run_lib.trained_env_options(str(run_dir), run)
  assert (options['pixels']['height'], options['pixels']['width']) == (16, 16)


def _doc(name):
  path = os.path.join(FIXTURES, name, 'config.json') if name in (
      'sac', 'ppo') else os.path.join(FIXTURES, name)
  with open(path) as f:
    return json.load(f)


@pytest.mark.parametrize('name', ['sac', 'ppo', 'pixels_schedule_config.json'])
def test_run_config_writes_back_the_old_config_json_key_for_key(name):
  doc = _doc(name)
  run = run_lib.RunConfig.from_json(doc)
  again = run.to_json()
  assert again == doc and list(again) == list(doc)
  assert run_lib.RunConfig.from_json(again) == run


def test_run_config_fields_are_typed_attributes():
  sac = run_lib.RunConfig.from_json(_doc('sac'))
  assert (sac.agent, sac.task, sac.num_envs, sac.steps, sac.seed) == (
      'sac', 'CartpoleBalance', 2, 80, 3)
  assert sac.action_repeat == 4 and sac.pixels is None
  assert sac.eval_every == 40 and sac.env_steps_per_iteration == 8
  assert sac.devices == 1 and not sac.agent_only and sac.resolution is None
  assert sac.agent_config().hidden_sizes == (16, 16)
  with pytest.raises(dataclasses.FrozenInstanceError):
    sac.num_envs = 3  # pytype: disable=not-writable
  pixels = run_lib.RunConfig.from_json(_doc('pixels_schedule_config.json'))
  assert pixels.resolution == (16, 16)
  assert pixels.resolution_schedule == ((0, 16, 16), (80, 24, 24))
  assert [run_lib.stage_at(pixels, s) for s in (0, 79, 80)] == [0, 0, 1]
  assert run_lib.stage_at(pixels, 80) == 1
  later = run_lib.at_stage(pixels, 1)
  assert later.resolution == (24, 24) and pixels.resolution == (16, 16)
  assert later.env_options['episode_length'] == 20


def test_a_multi_process_config_round_trips_and_refuses_resume(tmp_path):
  doc = dict(_doc('sac'), num_processes=2, checkpoint_contents='agent')
  run = run_lib.RunConfig.from_json(doc)
  assert run.to_json() == doc and run.processes == 2 and run.agent_only
  with pytest.raises(run_lib.RunError, match='multi-process job \\(2 '):
    run_lib.check_resumable(run, str(tmp_path))


def test_an_older_config_json_without_optional_fields(tmp_path):
  doc = _doc('sac')
  for key in ('eval_every', 'iterations_per_call', 'env_steps_per_iteration',
              'num_devices'):
    del doc[key]
  run = run_lib.RunConfig.from_json(doc)
  assert run.eval_every is None and run.devices == 1
  assert run.to_json() == doc
  assert run.missing_run_fields() == ['eval_every', 'iterations_per_call']
  (tmp_path / 'config.json').write_text(json.dumps(doc))
  with pytest.raises(run_lib.RunError, match='eval_every, iterations_per_call'):
    run_lib.resume(str(tmp_path))


def test_identity_is_what_checkpoints_recorded():
  # The 'run' entry the pre-change code wrote into each checkpoint's
  # meta.json: these keys, JSON values, None for a missing schedule.
  doc = _doc('pixels_schedule_config.json')
  ident = run_lib.RunConfig.from_json(doc).identity()
  assert ident == {k: doc.get(k) for k in (
      'agent', 'task', 'backend', 'num_envs', 'seed', 'env_options', 'config',
      'resolution_schedule')}
  assert run_lib.RunConfig.from_json(_doc('sac')).identity()[
      'resolution_schedule'] is None
