"""`roxie play`: headless MuJoCo rendering of an evaluation episode to video."""

import numpy as np
import pytest

from roxie import cli
from roxie import export
from roxie import gl
from roxie import play
from roxie import run as run_lib


try:
  import imageio_ffmpeg  # pylint: disable=unused-import
  HAVE_FFMPEG = True
except ImportError:
  HAVE_FFMPEG = False
needs_video = pytest.mark.skipif(
    not HAVE_FFMPEG,
    reason="imageio-ffmpeg is not installed (pip install 'roxie[video]')")


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('runs') / 'sac')
  run_lib.train('sac', 'PendulumSwingup', num_envs=2, steps=200,
                eval_every=200, eval_episodes=1, out=out,
                overrides={'warmup_steps': 100, 'batch_size': 32,
                           'hidden_sizes': (16, 16), 'action_repeat': 2},
                verbose=False, env_options={'episode_length': 40})
  return out


@needs_video
def test_play_writes_a_video_of_the_episode(tiny_run, tmp_path, capsys,
                                            gl_backend):
  out = tmp_path / 'videos' / 'rollout.mp4'
  code = cli.main(['play', '--run', tiny_run, '-o', str(out), '--steps', '20',
                   '--width', '64', '--height', '48', '--camera', 'fixed'])
  stdout, err = capsys.readouterr()
  assert code == 0, err
  assert '20 frames 64x48' in stdout  # Control steps, under action repeat 2.
  frames = play.read_video(str(out))
  assert frames.shape == (20, 48, 64, 3)
  assert frames.mean() > 10  # Not a black image.
  # The pendulum swings from its random start: frames change over time.
  change = [np.abs(f.astype(int) - frames[0]).mean() for f in frames]
  assert change[-1] > 0.5 and change[-1] > change[1]
  assert not list(tmp_path.glob('videos/*.tmp*'))


@needs_video
def test_play_return_is_that_of_evals_first_episode(tiny_run, tmp_path,
                                                    gl_backend):
  # A state policy under action repeat 2: play resets as `roxie eval --seed`
  # does (its first episode), holds each action 2 control steps, and adds
  # the rewards up as eval does.
  policy = export.policy_from_run(tiny_run, check=False)
  result = play.play(policy, str(tmp_path / 'r.mp4'), width=16, height=16,
                     seed=2)
  assert result.frames == 40  # Control steps: the whole episode.
  ev = export.evaluate_policy(policy, episodes=2, seed=2)
  assert result.episode_return == pytest.approx(float(ev.returns[0]),
                                                rel=1e-5, abs=1e-6)


@pytest.mark.slow  # An MJX compile, like the project's other MJX checks.
@needs_video
def test_play_an_exported_bundle_on_the_other_backend(tiny_run, tmp_path,
                                                      gl_backend):
  policy = export.policy_from_run(tiny_run)
  out = tmp_path / 'mjx.mp4'
  result = play.play(policy, str(out), backend='mjx', steps=5, width=32,
                     height=32)
  assert result.frames == 5 and result.backend == 'mjx'
  cpu = play.play(policy, str(tmp_path / 'cpu.mp4'), backend='cpu', steps=5,
                  width=32, height=32)
  # Same resets, same policy: the same episode on either physics backend.
  a = play.read_video(str(out)).astype(int)
  b = play.read_video(str(tmp_path / 'cpu.mp4')).astype(int)
  assert a.shape == b.shape == (5, 32, 32, 3)
  assert np.abs(a - b).mean() < 2.0
  assert abs(result.episode_return - cpu.episode_return) < 1e-2


def test_bad_options_fail_clearly(tiny_run, tmp_path, capsys, request):
  out = tmp_path / 'x.mp4'
  code = cli.main(['play', '--run', tiny_run, '-o', str(out), '--width',
                   '33'])
  assert code == 2 and 'must be even' in capsys.readouterr().err
  code = cli.main(['play', '--run', str(tmp_path / 'none'), '-o', str(out)])
  err = capsys.readouterr().err
  assert code == 2 and ('not a roxie run' in err or 'OpenGL' in err)
  if HAVE_FFMPEG:
    request.getfixturevalue('gl_backend')
    code = cli.main(['play', '--run', tiny_run, '-o', str(out), '--camera',
                     'nope', '--steps', '2'])
    err = capsys.readouterr().err
    assert code == 2 and "No camera 'nope'" in err and 'fixed' in err
  assert not out.exists()


def test_missing_gl_names_the_system_packages(tiny_run, tmp_path, capsys,
                                              monkeypatch):
  # The probing lives in roxie.gl (shared with pixel observations).
  monkeypatch.setattr(gl, '_chosen', None)
  monkeypatch.setattr(gl, '_failure', None)
  monkeypatch.setattr(
      gl, '_probe',
      lambda backend: f'lib{backend.upper()}.so: cannot open shared object')
  code = cli.main(['play', '--run', tiny_run, '-o', str(tmp_path / 'x.mp4')])
  err = capsys.readouterr().err
  assert code == 2
  assert 'No headless OpenGL backend' in err
  assert 'libegl1' in err and 'libgl1-mesa-dri' in err and 'libosmesa6' in err
  assert 'libEGL.so' in err  # What went wrong, per backend.
