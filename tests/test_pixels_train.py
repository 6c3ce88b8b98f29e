"""Training from pixels end to end: rendered CartpoleSwingup, SAC, run folders.

Tiny settings (16x16 frames, 2 envs, a small conv) keep the compiles short;
tests that render skip where no headless OpenGL works.
"""

import dataclasses
import json

import jax
import numpy as np
import pytest

from roxie import cli
from roxie import config as config_lib
from roxie import envs
from roxie import export
from roxie import gl
from roxie import loops
from roxie import run
from roxie.agents import sac

TINY = {'encoder_channels': (8, 8), 'encoder_strides': (2, 2),
        'encoder_feature_size': 16, 'hidden_sizes': (32, 32),
        'batch_size': 16, 'replay_capacity': 2_000, 'warmup_steps': 64,
        'updates_per_iteration': 1}


def test_sac_from_pixels_runs_through_the_compiled_loop(gl_backend):
  env = envs.make('CartpoleSwingup', num_envs=2, episode_length=40,
                  pixels=envs.PixelSpec(height=16, width=16, frame_stack=3,
                                        state=False))
  cfg = config_lib.apply_overrides(sac.Config(), TINY)
  recipe = sac.make(cfg, env.spec)
  init, step = loops.make_compiled_loop(recipe, env, iterations=40)
  state = init(jax.random.PRNGKey(0))
  assert state.replay.obs.obs['pixels'].shape[-1] == 3  # One frame a row.
  for _ in range(3):
    state, out = step(state)
  assert int(out.updates) > 0
  assert all(np.isfinite(float(v)) for v in out.metrics.values())
  # 120 steps of 40-step episodes: episodes completed and were counted.
  assert int(out.stats.completed) > 0
  eval_env = envs.make('CartpoleSwingup', num_envs=2, episode_length=40,
                       pixels=envs.PixelSpec(height=16, width=16,
                                             frame_stack=3, state=False))
  result = loops.make_evaluator(recipe, eval_env)(state.agent,
                                                  jax.random.PRNGKey(1))
  assert np.all(np.isfinite(result.returns))


def test_pixel_run_folder_checkpoint_resume_and_export(tmp_path, gl_backend):
  out = str(tmp_path / 'run')
  options = {'episode_length': 40,
             'pixels': run.pixel_options('pixels+state', resolution=(16, 16))}
  result = run.train('sac', 'CartpoleSwingup', steps=160, seed=0, out=out,
                     overrides=dict(TINY, num_envs=2, action_repeat=1),
                     eval_every=80, eval_episodes=2,
                     env_options=options, verbose=False)
  assert result.env_steps == 160 and np.isfinite(result.eval_return)
  with open(tmp_path / 'run' / 'config.json') as f:
    meta = json.load(f)
  assert meta['env_options']['pixels']['state'] is True
  # Resume (the replay of frames is checkpointed) and extend the run.
  resumed = run.resume(out, steps=240, verbose=False)
  assert resumed.resumed_from == 160 and resumed.env_steps == 240
  # The policy exports with its encoder and agrees with the recipe. From
  # Python the Config's defaults hold (the CLI's --obs pixels would turn
  # normalize_observations off), so the state entry's statistics go too.
  policy = export.policy_from_run(out, check=True)
  assert set(policy.params) == {'actor', 'encoder', 'obs_stats'}
  assert set(policy.params['obs_stats']) == {'state'}
  spec = export._spec_from_dict(json.loads(json.dumps(
      export._spec_to_dict(policy.spec))))
  assert spec == policy.spec
  obs = export._example_obs(policy.spec, 3, jax.random.PRNGKey(0))
  assert policy(obs).shape == (3, 1)


def test_pixel_options_and_env_kwargs():
  options = run.pixel_options('pixels', resolution=(32, 48), camera='1',
                              frame_stack=2, render_every=2, depth=True)
  assert json.loads(json.dumps(options)) == options  # config.json-ready.
  spec = run.env_kwargs({'pixels': options, 'episode_length': 10})['pixels']
  assert spec == envs.PixelSpec(height=32, width=48, camera=1, depth=True,
                                frame_stack=2, render_every=2, state=False)
  assert run.pixel_options('state') is None
  with pytest.raises(ValueError, match='frame_stack must be >= 1'):
    run.pixel_options('pixels', frame_stack=0)
  with pytest.raises(ValueError, match='Unknown observation kind'):
    run.pixel_options('rgb')
  # The default renderer is left out (config.json as before); others kept.
  assert 'renderer' not in options
  auto = run.pixel_options('pixels', renderer='auto')
  assert run.env_kwargs({'pixels': auto})['pixels'].renderer == 'auto'
  with pytest.raises(ValueError, match="Unknown renderer 'gpu'"):
    run.pixel_options('pixels', renderer='gpu')


def test_cli_refuses_pixels_for_state_only_agents(capsys):
  code = cli.main(['train', '--agent', 'ppo', '--obs', 'pixels', '--out',
                   '/nonexistent/never-written'])
  assert code == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert 'ppo cannot train from pixels' in err and 'sac' in err
  code = cli.main(['train', '--resolution', '32', '--out',
                   '/nonexistent/never-written'])
  assert code == cli.EXIT_USAGE
  assert '--resolution only apply with --obs pixels' in capsys.readouterr().err
  with pytest.raises(run.RunError, match='PPO trains from the state vector'):
    run.train('ppo', 'CartpoleSwingup', steps=10, env_options={
        'pixels': run.pixel_options('pixels')}, verbose=False)


@pytest.mark.parametrize('flags, message', [
    (['--camera', 'nosuchcam'], "No camera 'nosuchcam'"),
    (['--camera', '7'], 'No camera 7'),
    (['--frame-stack', '0'], 'frame_stack must be >= 1, got 0'),
    (['--render-every', '0'], 'render_every must be >= 1, got 0'),
    (['--renderer', 'warp'], '--renderer warp is MJX'),
])
def test_cli_bad_pixel_options_are_usage_errors(flags, message, capsys,
                                                tmp_path):
  out = tmp_path / 'run'
  code = cli.main(['train', '--obs', 'pixels', *flags, '--steps', '100',
                   '--out', str(out)])
  assert code == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert message in err and 'Traceback' not in err
  if flags[0] == '--camera':
    assert 'lookatcart' in err  # The valid choices are named.
  assert not out.exists()


def test_cli_train_without_gl_is_a_usage_error(monkeypatch, capsys, tmp_path):
  monkeypatch.setattr(gl, '_chosen', None)
  monkeypatch.setattr(gl, '_failure', None)
  monkeypatch.setattr(gl, '_probe', lambda backend: f'{backend}: not here')
  code = cli.main(['train', '--obs', 'pixels', '--resolution', '16',
                   '--steps', '100', '--out', str(tmp_path / 'run')])
  assert code == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert 'No headless OpenGL backend' in err and 'libegl1' in err
  assert 'Traceback' not in err
  assert not (tmp_path / 'run').exists()
