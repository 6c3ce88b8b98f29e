"""Policies trained from pixels through export, eval and play.

16x16 frames, 2 stacked, a new frame every 2 agent steps, action repeat 2:
a policy with the options a pixel run records (its weights untrained: no
training compile), and for the slow tests one tiny SAC-from-pixels run and
its bundle. Tests that render skip where no headless OpenGL works.
"""

import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest

from roxie import agents
from roxie import cli
from roxie import config as config_lib
from roxie import envs
from roxie import export
from roxie import gl
from roxie import play
from roxie import run as run_lib

TASK = 'CartpoleBalance'  # Rewards from the first step (swing-up's are ~0).
LENGTH = 40  # Control steps; 20 agent steps under the action repeat.
PIXELS = run_lib.pixel_options('pixels', resolution=(16, 16), frame_stack=2,
                               render_every=2)
OPTIONS = {'episode_length': LENGTH, 'pixels': PIXELS, 'action_repeat': 2}
TINY = {'encoder_channels': (8, 8), 'encoder_strides': (2, 2),
        'encoder_feature_size': 16, 'hidden_sizes': (32, 32),
        'batch_size': 16, 'replay_capacity': 1_000, 'warmup_steps': 32,
        'num_envs': 2, 'updates_per_iteration': 1, 'action_repeat': 2}

try:
  import imageio_ffmpeg  # pylint: disable=unused-import
  HAVE_FFMPEG = True
except ImportError:
  HAVE_FFMPEG = False
needs_video = pytest.mark.skipif(
    not HAVE_FFMPEG,
    reason="imageio-ffmpeg is not installed (pip install 'roxie[video]')")


def _untrained_policy():
  """A SAC pixel policy as `policy_from_run` builds one (env_options JSON)."""
  module = agents.get_agent('sac')
  cfg = config_lib.apply_overrides(module.Config(), run_lib.split_overrides(
      {**module.PIXEL_DEFAULTS, **TINY})[1])
  spec = envs.make(TASK, num_envs=1, **run_lib.env_kwargs(OPTIONS)).spec
  state = module.make(cfg, spec).init(jax.random.PRNGKey(0), spec)
  return export.Policy(
      name='px', agent='sac', task=TASK, spec=spec, config=cfg,
      env_options=json.loads(json.dumps(OPTIONS)), metadata={},
      params=module.policy_params(state),
      apply=module.make_policy(cfg, spec))


@pytest.fixture(scope='module')
def pixel_run(tmp_path_factory, gl_backend):
  out = str(tmp_path_factory.mktemp('runs') / 'sac-pixels')
  run_lib.train('sac', TASK, steps=48, eval_every=48, eval_episodes=1,
                out=out, overrides=TINY, verbose=False,
                env_options={'episode_length': LENGTH, 'pixels': PIXELS})
  return out


@pytest.fixture(scope='module')
def bundle(pixel_run, tmp_path_factory):
  folder = str(tmp_path_factory.mktemp('bundles') / 'px')
  export.export_run(pixel_run, folder, eval_episodes=2)
  return folder


def _by_hand(policy, seed):
  """The episode stepped through envs.make with the run's options: (pixel
  observations the policy saw, return)."""
  env = envs.make(TASK, num_envs=1, episode_length=LENGTH, action_repeat=2,
                  pixels=envs.PixelSpec(height=16, width=16, frame_stack=2,
                                        render_every=2, state=False))
  step = jax.jit(env.step)
  act = jax.jit(policy.apply)
  state = env.reset(jax.random.split(jax.random.PRNGKey(seed))[0])
  seen, total = [], np.float32(0)
  for _ in range(env.spec.episode_length):
    seen.append(np.asarray(state.obs['pixels'][0]))
    state, ts = step(state, act(policy.params, state.obs))
    total = np.float32(total + np.asarray(ts.reward)[0])
  return np.stack(seen), float(total)


@needs_video
def test_play_of_a_pixel_policy_is_the_training_env_episode(tmp_path,
                                                            gl_backend):
  policy = _untrained_policy()
  seen = []

  def recording(params, obs):  # The observations play feeds the policy.
    jax.debug.callback(lambda x: seen.append(np.asarray(x)[0]),
                       obs['pixels'])
    return policy.apply(params, obs)

  out = tmp_path / 'pixels.mp4'
  result = play.play(dataclasses.replace(policy, apply=recording), str(out),
                     width=32, height=24, seed=3)
  expected_obs, expected_return = _by_hand(policy, seed=3)
  # Every control step is a frame, at the video's size (not the 16x16 the
  # policy sees); the policy decided every 2 control steps.
  assert result.frames == LENGTH
  assert play.read_video(str(out)).shape == (LENGTH, 24, 32, 3)
  assert len(seen) == LENGTH // 2
  np.testing.assert_array_equal(np.stack(seen), expected_obs)
  assert expected_return > 1.0  # CartpoleBalance rewards every step.
  assert result.episode_return == pytest.approx(expected_return, rel=1e-6)
  # `roxie eval` with the same seed: its first episode is play's.
  ev = export.evaluate_policy(policy, episodes=2, seed=3)
  assert result.episode_return == pytest.approx(float(ev.returns[0]),
                                                rel=1e-5)


@pytest.mark.slow  # Trains (a compiled loop from pixels) and exports.
def test_pixel_policy_export_round_trips(pixel_run, bundle, tmp_path, capsys):
  with open(f'{pixel_run}/config.json') as f:
    run_options = json.load(f)['env_options']
  meta = export.read_metadata(bundle)
  # What play and eval need to rebuild the env: the pixel spec, the repeat.
  assert meta['env_options'] == run_options
  assert meta['env_options']['pixels'] == PIXELS
  assert meta['env_options']['action_repeat'] == 2
  loaded = export.load_policy(bundle)
  assert loaded.pixels and 'pixels: [16, 16, 6]' in repr(loaded)
  from_run = export.policy_from_run(pixel_run, check=False)
  obs = export._example_obs(loaded.spec, 4, jax.random.PRNGKey(0))
  np.testing.assert_array_equal(np.asarray(loaded(obs)),
                                np.asarray(from_run(obs)))
  env = loaded.make_env(num_envs=2)
  assert env.spec == loaded.spec
  assert env.reset(jax.random.PRNGKey(0)).obs['pixels'].shape == (2, 16, 16,
                                                                  6)
  # The card's evaluation is reproduced through the loading path.
  ev = export.evaluate_policy(loaded, episodes=2, seed=0)
  np.testing.assert_allclose(ev.returns, meta['evaluation']['returns'],
                             atol=2e-3)
  with open(f'{bundle}/README.md') as f:
    card = f.read()
  assert 'policy.make_env()' in card and '16x16 RGB frames' in card
  assert cli.main(['eval', '--policy', bundle, '--episodes', '2']) == 0
  assert f'eval_return={float(ev.mean):.1f}' in capsys.readouterr().out
  if HAVE_FFMPEG:
    video = tmp_path / 'bundle.mp4'
    assert cli.main(['play', '--policy', bundle, '-o', str(video), '--steps',
                     '6', '--width', '32', '--height', '32']) == 0
    assert '6 frames 32x32' in capsys.readouterr().out
  # A bundle whose env_options lost the pixel spec is refused on load.
  broken = tmp_path / 'broken'
  shutil.copytree(bundle, broken)
  meta = json.loads((broken / 'roxie.json').read_text())
  del meta['env_options']['pixels']
  (broken / 'roxie.json').write_text(json.dumps(meta))
  with pytest.raises(export.BundleError, match='env_options.pixels missing'):
    export.load_policy(str(broken))


@pytest.mark.slow  # Its run and bundle (shared with the test above).
def test_pixel_policy_without_gl_fails_clearly(pixel_run, bundle, tmp_path,
                                               monkeypatch, capsys):
  monkeypatch.setattr(gl, '_chosen', None)
  monkeypatch.setattr(gl, '_failure', None)
  monkeypatch.setattr(
      gl, '_probe',
      lambda backend: f'lib{backend.upper()}.so: cannot open shared object')
  # Loading and acting need no GL ...
  policy = export.load_policy(bundle)
  obs = export._example_obs(policy.spec, 1, jax.random.PRNGKey(0))
  assert policy(obs).shape == (1, 1)
  # ... its environment does, and says what to install.
  with pytest.raises(gl.RenderingUnavailable, match='libegl1'):
    policy.make_env()
  for argv in (['eval', '--policy', bundle, '--episodes', '1'],
               ['play', '--policy', bundle, '-o', str(tmp_path / 'x.mp4')],
               ['export', '--run', pixel_run, '--to', str(tmp_path / 'b')],
               ['eval', '--run', pixel_run, '--episodes', '1']):
    assert cli.main(argv) == 2, argv
    err = capsys.readouterr().err
    assert 'No headless OpenGL backend' in err and 'libegl1' in err, argv
    assert 'Traceback' not in err
  assert not (tmp_path / 'b').exists() and not (tmp_path / 'x.mp4').exists()
