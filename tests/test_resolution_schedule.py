"""Resolution schedules of runs from pixels (low resolution early, higher later).

Tiny settings (16x16 -> 24x24 frames, 2 envs, a small conv with mean
pooling) keep the compiles short; tests that render skip where no headless
OpenGL works.
"""

import collections
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import checkpoint as ckpt_lib
from roxie import cli
from roxie import export
from roxie import run

TINY = {'encoder_channels': (8, 8), 'encoder_strides': (2, 2),
        'encoder_feature_size': 16, 'hidden_sizes': (32, 32),
        'batch_size': 16, 'replay_capacity': 2_000, 'warmup_steps': 64,
        'num_envs': 2, 'updates_per_iteration': 1, 'action_repeat': 1,
        'encoder_pooling': 'mean'}


def test_parse_resolution_schedule():
  assert run.parse_resolution_schedule('32@0,48@40000,64@80000') == [
      [0, 32, 32], [40000, 48, 48], [80000, 64, 64]]
  assert run.parse_resolution_schedule(' 48x64@0 , 64@10 ') == [
      [0, 48, 64], [10, 64, 64]]
  assert run.check_resolution_schedule([(0, 8, 8)]) == [[0, 8, 8]]


@pytest.mark.parametrize('text, message', [
    ('32@100,64@200', 'must start at 0 env steps'),
    ('32@0,48@500,64@500', 'must strictly increase; got 500 then 500'),
    ('32@0,48@400,64@300', 'must strictly increase'),
    ('32', "stage '32' has no @ENV_STEPS"),
    ('32@0,big@10', "stage 'big@10' is not RESOLUTION@ENV_STEPS"),
    ('32@0,4x4x4@10', 'is not RESOLUTION@ENV_STEPS'),
    ('', 'is empty'),
    ('0@0', 'sizes must be >= 1'),
])
def test_bad_schedules_are_named(text, message):
  with pytest.raises(ValueError, match=message) as e:
    run.parse_resolution_schedule(text)
  assert 'e.g.' in str(e.value) or 'got' in str(e.value) or (
      'sizes' in str(e.value))


def test_schedule_stages_and_stage_options():
  meta = {'resolution_schedule': [[0, 16, 16], [60, 24, 32]],
          'env_options': {'episode_length': 40,
                          'pixels': run.pixel_options('pixels',
                                                      resolution=(16, 16))}}
  assert [run.schedule_stage(meta, s) for s in (0, 59, 60, 1000)] == [
      0, 0, 1, 1]
  assert run.schedule_stage({}, 500) == 0
  later = run.stage_meta(meta, 1)
  assert later['env_options']['pixels']['height'] == 24
  assert later['env_options']['pixels']['width'] == 32
  assert later['env_options']['episode_length'] == 40
  assert meta['env_options']['pixels']['height'] == 16  # Not modified.
  assert run.stage_meta({'a': 1}, 0) == {'a': 1}


@pytest.mark.parametrize('flags, message', [
    (['--obs', 'pixels', '--resolution-schedule', '16@0,24@100'],
     '--set encoder_pooling=mean'),
    (['--obs', 'pixels', '--resolution-schedule', '16@5,24@100', '--set',
      'encoder_pooling=mean'], 'must start at 0 env steps'),
    (['--obs', 'pixels', '--resolution-schedule', '16@0,24@100',
      '--resolution', '32', '--set', 'encoder_pooling=mean'],
     '--resolution and --resolution-schedule cannot be combined'),
    (['--resolution-schedule', '16@0,24@100'],
     '--resolution-schedule only apply with --obs pixels'),
    (['--obs', 'pixels', '--resolution-schedule', '16@0,24@100', '--set',
      'encoder_pooling=max'], "Unknown encoder pooling 'max'"),
])
def test_cli_schedule_usage_errors(flags, message, capsys, tmp_path):
  out = tmp_path / 'run'
  code = cli.main(['train', *flags, '--steps', '100', '--out', str(out)])
  assert code == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert message in err and 'Traceback' not in err
  assert not out.exists()


def test_train_refuses_a_schedule_with_flatten_pooling():
  options = {'pixels': run.pixel_options('pixels', resolution=(16, 16))}
  with pytest.raises(run.RunError, match='encoder_pooling=mean'):
    run.train('sac', 'CartpoleSwingup', steps=10, env_options=options,
              overrides=dict(TINY, encoder_pooling='flatten'),
              resolution_schedule='16@0,24@4', verbose=False)
  with pytest.raises(run.RunError, match='needs pixel observations'):
    run.train('sac', 'CartpoleSwingup', steps=10, overrides=TINY,
              resolution_schedule='16@0,24@4', verbose=False)


def test_shape_differences_name_the_leaves():
  have = {'a': np.zeros((3, 2), np.float32), 'b': np.zeros(4, np.int32)}
  want = jax.eval_shape(lambda: {'a': np.zeros((5, 2), np.float32),
                                 'b': np.zeros(4, np.int32)})
  assert run._shape_differences(have, want) == [
      "['a']: float32[3, 2] -> float32[5, 2]"]
  assert run._shape_differences(have, {'a': want['a']}) == [
      'the structure differs']


def _runner_stage(out):
  doc = ckpt_lib.read_meta(ckpt_lib.latest(out))
  return doc['meta']['runner']['stage'], doc['step']


@pytest.mark.slow  # ~95 s on the shared 2-core machine (4 compiles).
def test_run_crosses_a_boundary_resumes_and_exports(tmp_path, gl_backend):
  out = str(tmp_path / 'run')
  options = {'episode_length': 40,
             'pixels': run.pixel_options('pixels', resolution=(64, 64))}
  common = dict(seed=0, out=out, overrides=TINY, eval_every=40,
                eval_episodes=2, env_options=options, verbose=False)
  # 40 env steps a call; the 24x24 stage is due at 60, so it starts at the
  # call boundary at 80. The first part stops there, still at 16x16.
  first = run.train('sac', 'CartpoleSwingup', steps=80,
                    resolution_schedule='16@0,24@60', **common)
  assert first.env_steps == 80 and first.resolution == (16, 16)
  with open(os.path.join(out, 'config.json')) as f:
    meta = json.load(f)
  assert meta['resolution_schedule'] == [[0, 16, 16], [60, 24, 24]]
  assert meta['env_options']['pixels']['height'] == 16  # The first stage's.
  assert _runner_stage(out) == (0, 80)
  # A resume from the 16x16 checkpoint switches before its first call: the
  # replay and the envs' stacks are resized, training goes on.
  crossed = run.resume(out, steps=120, verbose=False)
  assert crossed.resumed_from == 80 and crossed.env_steps == 120
  assert crossed.resolution == (24, 24)
  assert _runner_stage(out) == (1, 120)
  # A resume after the boundary builds the 24x24 stage before restoring.
  after = run.resume(out, steps=160, verbose=False)
  assert after.resumed_from == 120 and after.env_steps == 160
  assert after.resolution == (24, 24)
  with open(os.path.join(out, 'metrics.csv')) as f:
    rows = f.read().splitlines()[1:]
  assert [int(r.split(',')[0]) for r in rows] == [40, 80, 120, 160]
  for i, r in enumerate(rows):
    values = [float(v) for v in r.split(',')]
    if i == 0:  # No episode has ended yet at 40 steps: train return NaN.
      del values[4]
    assert all(np.isfinite(values)), r
  # Exact: an uninterrupted run (same programs, from the cache) gives the
  # same metrics (but wall time and speed) and the same final agent state.
  whole = str(tmp_path / 'whole')
  run.train('sac', 'CartpoleSwingup', steps=160,
            resolution_schedule='16@0,24@60', **dict(common, out=whole))
  with open(os.path.join(whole, 'metrics.csv')) as f:
    whole_rows = f.read().splitlines()[1:]
  strip = lambda r: [v for i, v in enumerate(r.split(',')) if i not in (1, 5)]
  assert [strip(r) for r in whole_rows] == [strip(r) for r in rows]
  with np.load(os.path.join(out, 'agent_state.npz')) as a, np.load(
      os.path.join(whole, 'agent_state.npz')) as b:
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
      np.testing.assert_array_equal(a[k], b[k])
  # Evaluation and export use the final resolution.
  assert run.trained_env_options(out, meta)['pixels']['height'] == 24
  policy = export.policy_from_run(out, check=True)
  assert policy.env_options['pixels']['height'] == 24
  assert dict((k, s) for k, s, _ in policy.spec.obs_shapes)['pixels'] == (
      24, 24, 9)
  assert policy(export._example_obs(policy.spec, 2,
                                    jax.random.PRNGKey(0))).shape == (2, 1)


# ~77 s on 2 cores (a pixel program per stage and the evaluator); the
# schedule's parsing, stages and refusals stay in the fast suite.
@pytest.mark.slow
def test_cli_run_crosses_a_boundary(tmp_path, capsys, gl_backend):
  out = tmp_path / 'run'
  sets = [f'{k}={",".join(map(str, v)) if isinstance(v, tuple) else v}'
          for k, v in TINY.items()]
  # Calls of 40 env steps (--checkpoint-every 40); the 24x24 stage starts at
  # 40, and the one evaluation, at 80, runs at 24x24.
  code = cli.main(['train', '--obs', 'pixels', '--resolution-schedule',
                   '16@0,24@40', '--steps', '80', '--eval-every', '80',
                   '--checkpoint-every', '40', '--eval-episodes', '2',
                   '--episode-length', '40', '--out', str(out)] +
                  [a for s in sets for a in ('--set', s)])
  assert code == 0
  log = capsys.readouterr().out
  assert 'resolution 24x24 from 40 env steps (stage 2 of 2)' in log
  with open(out / 'config.json') as f:
    meta = json.load(f)
  assert meta['resolution_schedule'] == [[0, 16, 16], [40, 24, 24]]
  assert meta['config']['encoder_pooling'] == 'mean'
  assert _runner_stage(str(out)) == (1, 80)
  with open(out / 'metrics.csv') as f:
    rows = f.read().splitlines()
  assert len(rows) == 2 and rows[1].startswith('80,')
  # A resume may not change the schedule.
  code = cli.main(['train', '--resume', str(out), '--resolution-schedule',
                   '16@0'])
  assert code == cli.EXIT_USAGE
  assert ('--resolution-schedule cannot change a resumed run'
          in capsys.readouterr().err)


def test_a_stage_that_changes_the_agent_shapes_fails_clearly():
  fake = collections.namedtuple('Fake', 'agent env replay')
  new = types.SimpleNamespace(init=lambda k: fake(
      agent={'w': jnp.zeros((5, 2))}, env=(), replay=()))
  state = fake(agent={'w': np.zeros((3, 2), np.float32)}, env=(), replay=())
  with pytest.raises(run.RunError, match=(
      r"changes shape at the 24x24 stage .*\['w'\]: float32\[3, 2\] -> "
      r'float32\[5, 2\].*encoder_pooling=mean')):
    run._switch_stage(state, None, new, jax.random.PRNGKey(0), (24, 24))
