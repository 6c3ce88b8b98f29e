"""Videos of a policy: `roxie play --run DIR -o rollout.mp4`.

One evaluation episode (the deterministic action, from the reset of `roxie
eval`'s first episode) runs through the roxie environment itself, built as
the policy was trained (`Policy.make_env`: a pixel policy sees its camera
frames, frame stack and cadence; the action repeat), on either backend, one
control step at a time on the host; after every step the physics state is
copied into a plain `mujoco.MjData` of the task's model and drawn with
MuJoCo's own renderer (`mujoco.Renderer`), headless, at the video's size. So
the video shows exactly the physics that `roxie eval` scores, whichever
backend the policy was trained on, and the same return.

Headless OpenGL: EGL (Mesa's llvmpipe on a machine without a GPU) is tried
first, then OSMesa; `MUJOCO_GL=egl|osmesa` puts one first. Each is probed in
a short subprocess, since a failed GL import cannot be undone in-process. The
GL context belongs to one thread, so the renderer is created, used and
closed on one dedicated thread. Settings are lean by default (no MSAA,
shadows or reflections; an offscreen buffer of the image's size), ~10x
faster than MuJoCo's defaults on a CPU; `--quality high` restores them.

Frames go to a video through imageio-ffmpeg (`pip install 'roxie[video]'`),
whose wheel ships its own ffmpeg binary.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import dataclasses
import os
import sys
import warnings
from typing import Any, Optional, Union

# The GL probing lives in roxie.gl (pixel observations use it too).
from roxie.gl import GL_BACKENDS, GL_PACKAGES, RenderingUnavailable, gl_backend  # pylint: disable=unused-import,g-multiple-import

QUALITIES = ('fast', 'high')


class PlayError(ValueError):
  """Bad play options (camera, size, output), and why."""


class _Renderer:
  """`mujoco.Renderer` living on one dedicated thread (its GL context's)."""

  def __init__(self, model, width: int, height: int, camera: Any,
               quality: str):
    import mujoco  # pylint: disable=g-import-not-at-top
    self._mujoco = mujoco
    model = copy.copy(model)  # Own visual settings; the env's stays as is.
    model.vis.global_.offwidth = max(width, 1)
    model.vis.global_.offheight = max(height, 1)
    lean = quality == 'fast'
    if lean:
      model.vis.quality.offsamples = 0
    self.model = model
    self.camera = camera
    self._pool = concurrent.futures.ThreadPoolExecutor(
        1, thread_name_prefix='roxie-render')
    self._renderer = self._pool.submit(self._create, width, height,
                                       lean).result()

  def _create(self, width, height, lean):
    r = self._mujoco.Renderer(self.model, height, width)
    if lean:
      flags = self._mujoco.mjtRndFlag
      # The skybox stays: ~3-10 ms a frame here, and a video is for looking.
      for flag in (flags.mjRND_SHADOW, flags.mjRND_REFLECTION):
        r.scene.flags[flag] = 0
    return r

  def _draw(self, data):
    self._renderer.update_scene(data, camera=self.camera)
    return self._renderer.render()

  def render(self, data):
    """An RGB frame [H, W, 3] uint8 of `data` (an MjData of `self.model`)."""
    return self._pool.submit(self._draw, data).result()

  def close(self):
    try:
      self._pool.submit(self._renderer.close).result()
    finally:
      self._pool.shutdown()


def _camera(model, camera: Union[None, int, str]) -> int:
  """A camera id: the model's first camera by default, -1 the free camera."""
  import mujoco  # pylint: disable=g-import-not-at-top
  names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i)
           for i in range(model.ncam)]
  choices = f'cameras: {", ".join(names) or "none"}; -1 is the free camera'
  if camera is None:
    return 0 if model.ncam else -1
  text = str(camera)
  try:
    cam = int(text)
  except ValueError:
    if text not in names:
      raise PlayError(f'No camera {text!r} in this model ({choices}).'
                      ) from None
    return names.index(text)
  if not -1 <= cam < model.ncam:
    raise PlayError(f'No camera {cam} in this model ({choices}).')
  return cam


def _physics_rows(env, env_state):
  """The env's physics state as MuJoCo state rows [B, S] (integration)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  if hasattr(env, 'get_host_state'):  # Native: the host MjData themselves.
    return np.asarray(env.get_host_state())
  import mujoco  # pylint: disable=g-import-not-at-top
  # MJX: an mjx.Data; lay its fields out as mjSTATE_INTEGRATION rows.
  d = env_state.physics
  model = env.model
  data = mujoco.MjData(model)
  spec = mujoco.mjtState.mjSTATE_INTEGRATION
  rows = []
  for i in range(env.num_envs):
    for name in ('qpos', 'qvel', 'act', 'mocap_pos', 'mocap_quat',
                 'qacc_warmstart', 'ctrl', 'qfrc_applied', 'xfrc_applied',
                 'eq_active'):
      value = getattr(d, name, None)
      if value is not None and getattr(data, name).size:
        getattr(data, name)[:] = np.asarray(value[i]).reshape(
            getattr(data, name).shape)
    data.time = float(np.asarray(d.time)[i])
    row = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, row, spec)
    rows.append(row)
  return np.stack(rows)


@dataclasses.dataclass
class PlayResult:
  """What `play` did."""
  path: str
  frames: int
  width: int
  height: int
  fps: float
  episode_return: float
  gl_backend: str
  backend: str


def _open_writer(path: str, width: int, height: int, fps: float):
  try:
    import imageio_ffmpeg  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        "roxie play needs imageio-ffmpeg to write videos, which is not "
        "installed: pip install 'roxie[video]' (or pip install "
        "imageio-ffmpeg).") from e
  with warnings.catch_warnings():
    # JAX warns on any fork; this one execs ffmpeg at once, which is safe.
    warnings.filterwarnings('ignore', message='os.fork', category=RuntimeWarning)
    writer = imageio_ffmpeg.write_frames(
        path, (width, height), fps=fps, codec='libx264', quality=7,
        macro_block_size=1, pix_fmt_out='yuv420p', ffmpeg_log_level='error')
    writer.send(None)  # Starts ffmpeg.
  return writer


def play(policy, out: str, *, backend: str = 'cpu',
         camera: Union[None, int, str] = None, width: int = 320,
         height: int = 240, steps: Optional[int] = None, seed: int = 0,
         fps: Optional[float] = None, quality: str = 'fast') -> PlayResult:
  """Renders one evaluation episode of a policy to a video file.

  Args:
    policy: a `roxie.export.Policy` (from `load_policy` or
      `policy_from_run`).
    out: the video file (.mp4, or any container ffmpeg writes H.264 into).
    backend: physics backend of the episode, 'cpu' or 'mjx' (either works
      for a policy trained on either).
    camera: a camera name or id of the task's model (default its first
      camera; -1 is MuJoCo's free camera).
    width: frame width in pixels (even, for H.264's yuv420p).
    height: frame height in pixels (even).
    steps: frames to render, one per control step (default and at most the
      episode length).
    seed: PRNG seed of the reset (as `roxie eval --seed`).
    fps: frames per second of the video (default real time).
    quality: 'fast' (lean GL settings) or 'high' (MuJoCo's defaults).

  Returns:
    A `PlayResult`.

  Raises:
    PlayError: bad options.
    RenderingUnavailable: no headless GL backend (names the packages).
    ImportError: imageio-ffmpeg is missing (names `roxie[video]`).
  """
  _check_options(width=width, height=height, steps=steps, quality=quality)
  gl = gl_backend()
  from roxie.envs import wrappers  # pylint: disable=g-import-not-at-top

  # The env exactly as in training (`Policy.make_env`: pixel spec, frame
  # stack, render cadence, action repeat), so the policy sees the
  # observations it was trained on. Under an action repeat the episode steps
  # the wrapped env one control step at a time, holding each action for
  # `repeat` of them, as `ActionRepeat.step` does (and a pixel env counts its
  # frame cadence in agent steps itself), so every control step is a frame.
  # The video is drawn by this module's own renderer, at its own size and
  # camera, not from the policy's (small) frames.
  env = policy.make_env(num_envs=1, backend=backend)
  repeat = 1
  if isinstance(env, wrappers.ActionRepeat):
    env, repeat = env.env, env.repeat
  cam = _camera(env.model, camera)
  n = min(int(steps or env.spec.episode_length), env.spec.episode_length)
  fps = float(fps or 1.0 / env.spec.control_timestep)
  if fps <= 0:
    raise PlayError(f'--fps must be > 0, got {fps}.')

  renderer = _Renderer(env.model, width, height, cam, quality)
  parent = os.path.dirname(os.path.abspath(out))
  os.makedirs(parent, exist_ok=True)
  tmp = f'{out}.tmp-{os.getpid()}{os.path.splitext(out)[1]}'
  writer = None
  try:
    writer = _open_writer(tmp, width, height, fps)
    frames, total = _record_episode(policy, env, repeat=repeat,
                                    renderer=renderer, writer=writer, n=n,
                                    seed=seed)
    writer.close()
    writer = None
    os.replace(tmp, out)
  finally:
    renderer.close()
    if writer is not None:
      writer.close()
    if os.path.exists(tmp):
      os.remove(tmp)
  return PlayResult(path=out, frames=frames, width=width, height=height,
                    fps=fps, episode_return=float(total), gl_backend=gl,
                    backend=backend)


def _check_options(*, width: int, height: int, steps: Optional[int],
                   quality: str) -> None:
  """Raises `PlayError` for bad `play` options, before anything is opened."""
  if width < 2 or height < 2 or width % 2 or height % 2:
    raise PlayError(f'--width and --height must be even and >= 2 (H.264 '
                    f'video), got {width}x{height}.')
  if quality not in QUALITIES:
    raise PlayError(f'quality must be one of {QUALITIES}, got {quality!r}.')
  if steps is not None and steps < 1:
    raise PlayError(f'--steps must be >= 1, got {steps}.')


def _record_episode(policy, env, *, repeat: int, renderer: _Renderer,
                    writer, n: int, seed: int):
  """Steps one episode of `policy`, sending a frame per control step.

  Args:
    policy: the `roxie.export.Policy` that acts.
    env: its environment, without the `ActionRepeat` wrapper (one env).
    repeat: the action repeat taken off `env`: each action is held for
      `repeat` control steps.
    renderer: draws the frames.
    writer: the started ffmpeg writer the frames [H, W, 3] uint8 go to.
    n: frames (control steps) at most; fewer when the episode terminates.
    seed: PRNG seed of the reset.

  Returns:
    (frames written, the episode's return as a float32 scalar).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import mujoco  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  reset = jax.jit(env.reset)
  step = jax.jit(env.step)
  act = jax.jit(policy.apply)
  data = mujoco.MjData(renderer.model)
  spec = mujoco.mjtState.mjSTATE_INTEGRATION
  # The return adds up in float32 per agent step, as `roxie eval` does (the
  # ActionRepeat sum, then the episode's), so the two agree to the bit for
  # the same physics.
  total = np.float32(0.0)
  held = np.float32(0.0)  # Reward of the current agent step so far.
  frames = 0
  # The reset of `roxie eval --seed` (`loops.make_evaluator`): its first
  # episode is this one.
  state = reset(jax.random.split(jax.random.PRNGKey(seed))[0])
  action = None
  for t in range(n):
    # Draw the state, then step: n frames, n control steps, never the
    # automatic reset after the episode's last step.
    jax.block_until_ready(state)
    mujoco.mj_setState(renderer.model, data, _physics_rows(env, state)[0],
                       spec)
    mujoco.mj_forward(renderer.model, data)
    writer.send(np.ascontiguousarray(renderer.render(data)))
    frames += 1
    if t % repeat == 0:
      action = act(policy.params, state.obs)
    state, ts = step(state, action)
    reward = np.asarray(ts.reward, np.float32)[0]
    held = reward if t % repeat == 0 else np.float32(held + reward)
    ended = bool(ts.terminated[0])
    if ended or t % repeat == repeat - 1 or t == n - 1:
      total = np.float32(total + held)
    if ended:
      break  # A task with terminations: the episode is over.
  return frames, total


def read_video(path: str):
  """Decodes a video to frames [T, H, W, 3] uint8 (for checks and tests)."""
  import imageio_ffmpeg  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  reader = imageio_ffmpeg.read_frames(path)
  with warnings.catch_warnings():  # As in _open_writer: fork, then exec.
    warnings.filterwarnings('ignore', message='os.fork',
                            category=RuntimeWarning)
    meta = next(reader)  # Starts ffmpeg.
  w, h = meta['size']
  frames = [np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in reader]
  return np.stack(frames) if frames else np.zeros((0, h, w, 3), np.uint8)


# -- command line ------------------------------------------------------------


def add_cli(sub: 'argparse._SubParsersAction') -> None:
  """Adds `roxie play` to the CLI's subcommands."""
  p = sub.add_parser(
      'play', help="render an evaluation episode of a policy to a video",
      description="Renders one evaluation episode (deterministic policy) "
      "with MuJoCo's renderer, headless, to a video file.")
  source = p.add_mutually_exclusive_group(required=True)
  source.add_argument('--run', help='run directory (its saved agent state)')
  source.add_argument('--policy', metavar='FOLDER',
                      help='an exported policy bundle, or a shipped name')
  p.add_argument('-o', '--out', default='rollout.mp4', help='video to write')
  p.add_argument('--backend', default='cpu', choices=('cpu', 'mjx'),
                 help='physics backend of the episode (default cpu)')
  p.add_argument('--camera', default=None,
                 help="camera name or id (default: the model's first; -1 "
                 'free camera)')
  p.add_argument('--width', type=int, default=320)
  p.add_argument('--height', type=int, default=240)
  p.add_argument('--steps', type=int, default=None,
                 help='frames (control steps); default the whole episode')
  p.add_argument('--fps', type=float, default=None,
                 help='video frame rate (default: real time)')
  p.add_argument('--seed', type=int, default=0, help='reset seed')
  p.add_argument('--quality', default='fast', choices=QUALITIES,
                 help='fast: no MSAA, shadows or reflections (default)')
  p.set_defaults(cli_main=cli_main)


def load_source(run: Optional[str], policy: Optional[str]):
  """The policy of `--run DIR` or `--policy FOLDER|NAME`."""
  from roxie import export  # pylint: disable=g-import-not-at-top
  if run:
    return export.policy_from_run(run, check=False)
  return export.load_policy(policy)


def cli_main(args: argparse.Namespace) -> int:
  """Runs `roxie play`."""
  def fail(message):
    print(f'roxie: error: {message}', file=sys.stderr)
    return 2
  if args.width % 2 or args.height % 2 or args.width < 2 or args.height < 2:
    return fail(f'--width and --height must be even and >= 2 (H.264 video), '
                f'got {args.width}x{args.height}.')
  if args.steps is not None and args.steps < 1:
    return fail(f'--steps must be >= 1, got {args.steps}.')
  try:
    gl_backend()  # Before loading anything: the commonest failure here.
    policy = load_source(args.run, args.policy)
    result = play(policy, args.out, backend=args.backend, camera=args.camera,
                  width=args.width, height=args.height, steps=args.steps,
                  seed=args.seed, fps=args.fps, quality=args.quality)
  except (RenderingUnavailable, ImportError, FileNotFoundError, ValueError,
          KeyError) as e:
    return fail(str(e.args[0] if isinstance(e, KeyError) else e))
  print(f'wrote {result.path}: {result.frames} frames {result.width}x'
        f'{result.height} at {result.fps:g} fps, episode return '
        f'{result.episode_return:.1f} ({result.backend} physics, '
        f'{result.gl_backend} rendering)')
  return 0

