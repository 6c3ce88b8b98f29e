"""Pixel and mixed observations: camera frames, depth, sensors, state.

  env = roxie.envs.make('CartpoleSwingup', num_envs=16,
                        pixels=roxie.envs.PixelSpec(height=64, width=64))
  state = env.reset(key)
  state.obs['pixels']  # [16, 64, 64, 9] uint8: 3 RGB frames, oldest first.

With `pixels` set, observations (`EnvState.obs`, `TimeStep.obs`,
`TimeStep.final_obs`) are dicts, keys sorted, of per-env arrays:

  'depth'    uint8 [B, H, W, S]   if `depth` (S = frame_stack)
  'pixels'   uint8 [B, H, W, 3S]  if `rgb`
  'sensors'  float32 [B, K]       if `sensors` names any
  'state'    float32 [B, O]       if `state`: the task's usual flat vector

`env.spec.obs_shapes` lists them as (key, per-env shape, dtype name);
`env.spec.frame_stack` = S; `env.spec.obs_size` = O (0 without state).

Frames are rendered by MuJoCo's own OpenGL renderer (mjv_updateScene,
mjr_render, mjr_readPixels), headless through EGL or OSMesa (`roxie.gl`), on
the host, from inside the compiled program:
- backend 'cpu': by the same host callback that steps `mujoco.batch`, for all
  envs of the call, reading pixels straight into the callback's output buffer
  (`mjr_readPixels` writes the XLA buffer itself; the image flip and the depth
  conversion are then fused into the JAX code that builds the stack).
- backend 'mjx': by a `jax.pure_callback` from the MJX state (qpos and mocap
  poses are copied into an `MjData`, `mj_fwdPosition`, render).
Both draw the same scene the same way, so frames of equal states agree up to
float32 rounding (MJX) of the poses.

`PixelSpec.renderer` picks the renderer: 'host' (default) is the above;
'warp' (backend 'mjx' only) is MJX's batch renderer, MuJoCo Warp's ray
tracer (`mujoco.mjx.render`), run inside the program on Warp's device for
JAX's backend (CUDA, or Warp's CPU device), no OpenGL needed; it needs NVIDIA
Warp (`pip install 'roxie[warp]'`) and a model camera, and its frames differ
slightly from the host renderer's (see `roxie.envs.warp_render`: depth
equal to +-1, RGB colours a few levels apart, no decor such as tendons);
'auto' is 'warp' where that works (backend 'mjx', Warp installed, a model
camera), else 'host'. `renderer_of(env)` says which one an env uses. The
observation layout, dtypes, cadence and depth mapping are the same whichever
renders.

A GL context belongs to one thread, while XLA runs host callbacks on threads
of its own choosing; each renderer therefore owns one dedicated thread on
which its context is created, current and used, and the callback hands it the
batch (one hand-over per call, not per env).

Rendering settings are lean: no MSAA, shadows or reflections (the skybox
stays), an offscreen buffer of the image's size; ~4x faster than MuJoCo's
defaults on a CPU.

Frame stacking and render cadence (a "step" is one `env.step` call as the
agent sees it, i.e. `action_repeat` control steps under an action repeat;
k counts the steps of the current episode, k = 0 for its first observation):
- Reset: every env's first frame is rendered and repeated S times.
- Step k: the stack shifts by one frame (the oldest drops out). The new
  newest frame is rendered if k % render_every == 0 or the step ends the
  episode (time limit or termination); otherwise it repeats the previous
  newest frame (the last frame is held). The 'state' and 'sensors' entries
  are always current.
- Where an episode ends, `final_obs` is the stack at its true last step (its
  newest frame rendered from the final state) and `obs` the next episode's
  first stack (its first frame repeated). An env whose physics diverged gets
  its previous observation as `final_obs`, as with flat observations.
Under an action repeat the inner control steps between two agent steps
neither render nor shift the stack. After a termination inside a repeat the
new episode's cadence counts from its own start.

Depth: metres from the camera (its z distance, per MuJoCo's depth buffer),
mapped linearly onto uint8 over a fixed per-task range [lo, hi]:
  depth_uint8 = round(255 * clip((d - lo) / (hi - lo), 0, 1)),
so 0 is at `lo` or nearer and 255 at `hi` or farther (the sky included).
The range is `PixelSpec.depth_range` when given, else the task's
[max(0, D - e), D + e] metres, with e = `model.stat.extent` (the model's size)
and D the camera's distance to the model's centre (`model.stat.center`) at
the reference pose (qpos0; a tracking camera keeps it as the body moves;
1.5 e for the free camera), so the scene sits mid-range: e.g. 1-5 m for
cheetah, 0-8.2 m for cartpole, 0.46-1.8 m for ball_in_cup, 0.8-3.5 m for
pendulum. `depth_range_of(env)` gives the one in use.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import copy
import dataclasses
import queue
import threading
import weakref
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

IMAGE_KEYS = ('depth', 'pixels')
RENDERERS = ('host', 'warp', 'auto')
_CHANNELS = {'pixels': 3, 'depth': 1}


@dataclasses.dataclass(frozen=True)
class PixelSpec:
  """Which observations a pixel task exposes; see the module docstring.

  Attributes:
    height: image height in pixels.
    width: image width in pixels.
    camera: camera id or name of the task's model; -1 is MuJoCo's free
      camera. The default 0 is the camera dm_control renders pixels from
      (a tracking camera in the locomotion domains, e.g. cheetah's 'side').
    rgb: expose 'pixels', RGB uint8 [B, H, W, 3 * frame_stack].
    depth: expose 'depth', uint8 [B, H, W, frame_stack]: metres mapped
      linearly over `depth_range` (0 = near end, 255 = far end and beyond).
    frame_stack: S, frames per image entry, oldest first, newest last.
    render_every: render a new frame every this many steps of an episode
      (always on its first and final observation); hold the last in between.
      Steps are agent steps: under `make(..., action_repeat=r)`, r control
      steps each (frames are stacked per agent step too).
    state: expose 'state', the task's flat float32 observation [B, O].
    sensors: names of MuJoCo sensors of the model (e.g. 'touch_toe') to
      expose as 'sensors', float32 [B, K], their values concatenated in order.
    depth_range: (lo, hi) metres of the depth mapping; None: the task's
      (centred on the scene as the camera sees it; see the module docstring).
    renderer: 'host' (MuJoCo's OpenGL renderer), 'warp' (MJX's Warp
      renderer; backend 'mjx', needs NVIDIA Warp) or 'auto' ('warp' where it
      works, else 'host'); see the module docstring.
  """
  height: int = 64
  width: int = 64
  camera: Union[int, str] = 0
  rgb: bool = True
  depth: bool = False
  frame_stack: int = 3
  render_every: int = 1
  state: bool = True
  sensors: Tuple[str, ...] = ()
  depth_range: Optional[Tuple[float, float]] = None
  renderer: str = 'host'

  def __post_init__(self):
    if self.renderer not in RENDERERS:
      raise ValueError(f'Unknown PixelSpec.renderer {self.renderer!r}; choose '
                       f'one of {RENDERERS}.')
    if isinstance(self.sensors, str):
      object.__setattr__(self, 'sensors', (self.sensors,))
    else:
      object.__setattr__(self, 'sensors', tuple(self.sensors))
    for name in ('height', 'width', 'frame_stack', 'render_every'):
      if int(getattr(self, name)) < 1:
        raise ValueError(f'PixelSpec.{name} must be >= 1, got '
                         f'{getattr(self, name)}.')
    if not (self.rgb or self.depth or self.state or self.sensors):
      raise ValueError('PixelSpec exposes nothing: set rgb, depth, state or '
                       'sensors.')
    if self.depth_range is not None:
      lo, hi = self.depth_range
      if not 0 <= lo < hi:
        raise ValueError(f'depth_range must be 0 <= lo < hi metres, got '
                         f'{self.depth_range}.')

  @property
  def renders(self) -> bool:
    return bool(self.rgb or self.depth)


def camera_id(model: mujoco.MjModel, camera: Union[int, str]) -> int:
  """A camera id of `model` (-1: the free camera); raises naming the choices."""
  names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i)
           for i in range(model.ncam)]
  choices = f'cameras: {", ".join(names) or "none"}; -1 is the free camera'
  if isinstance(camera, str) and camera not in names:
    try:
      camera = int(camera)
    except ValueError:
      raise ValueError(f'No camera {camera!r} in this model ({choices}).'
                       ) from None
  if isinstance(camera, str):
    return names.index(camera)
  cam = int(camera)
  if not -1 <= cam < model.ncam:
    raise ValueError(f'No camera {cam} in this model ({choices}).')
  return cam


def default_depth_range(model: mujoco.MjModel, cam: int
                        ) -> Tuple[float, float]:
  """[max(0, D - e), D + e]: see the module docstring."""
  e = float(model.stat.extent)
  if cam < 0:
    dist = 1.5 * e  # mjv_defaultFreeCamera's distance.
  else:
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    dist = float(np.linalg.norm(data.cam_xpos[cam] - model.stat.center))
  return max(0.0, dist - e), dist + e


def _sensor_index(model: mujoco.MjModel, names: Sequence[str]) -> np.ndarray:
  """Indices into sensordata of the named sensors' values, in order."""
  index = []
  for name in names:
    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
    if i < 0:
      have = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, j)
              for j in range(model.nsensor)]
      raise ValueError(f'No sensor {name!r} in this model (sensors: '
                       f'{", ".join(have) or "none"}).')
    adr, dim = int(model.sensor_adr[i]), int(model.sensor_dim[i])
    index.extend(range(adr, adr + dim))
  return np.asarray(index, np.int32)


def _tile(x: jax.Array, n: int) -> jax.Array:
  return jnp.concatenate([x] * n, axis=-1) if n > 1 else x


@dataclasses.dataclass(frozen=True, eq=False)
class PixelObs:
  """How a BatchedEnv turns views and host frames into dict observations.

  Built once by `make`; its methods are traced JAX.
  """
  spec: PixelSpec
  camera: int
  num_envs: int
  state_size: int
  action_repeat: int
  near: float  # Clip planes (metres) of the depth buffer.
  far: float
  orthographic: bool
  depth_lo: float
  depth_hi: float
  sensor_index: np.ndarray

  @classmethod
  def build(cls, model: mujoco.MjModel, spec: PixelSpec, num_envs: int,
            state_size: int, action_repeat: int = 1) -> 'PixelObs':
    cam = camera_id(model, spec.camera)
    extent = float(model.stat.extent)
    lo, hi = spec.depth_range or default_depth_range(model, cam)
    if cam >= 0:
      ortho = int(model.cam_projection[cam]) == int(
          mujoco.mjtProjection.mjPROJ_ORTHOGRAPHIC)
    else:
      ortho = bool(model.vis.global_.orthographic)
    return cls(spec=spec, camera=cam, num_envs=num_envs,
               state_size=state_size if spec.state else 0,
               action_repeat=int(action_repeat),
               near=float(model.vis.map.znear) * extent,
               far=float(model.vis.map.zfar) * extent, orthographic=ortho,
               depth_lo=float(lo), depth_hi=float(hi),
               sensor_index=_sensor_index(model, spec.sensors))

  def obs_shapes(self) -> Tuple[Tuple[str, Tuple[int, ...], str], ...]:
    s = self.spec
    shapes = []
    if s.depth:
      shapes.append(('depth', (s.height, s.width, s.frame_stack), 'uint8'))
    if s.rgb:
      shapes.append(('pixels', (s.height, s.width, 3 * s.frame_stack),
                     'uint8'))
    if s.sensors:
      shapes.append(('sensors', (len(self.sensor_index),), 'float32'))
    if s.state:
      shapes.append(('state', (self.state_size,), 'float32'))
    return tuple(shapes)

  @property
  def needs_sensordata(self) -> bool:
    return bool(self.spec.sensors)

  # -- host frames -> uint8 images (traced) ---------------------------------

  def host_frame_shapes(self, lead: Tuple[int, ...]) -> Dict[str, jax.ShapeDtypeStruct]:
    """What a renderer writes: GL rows (bottom row first)."""
    s = self.spec
    out = {}
    if s.rgb:
      out['rgb'] = jax.ShapeDtypeStruct(lead + (s.height, s.width, 3),
                                        jnp.uint8)
    if s.depth:
      out['zbuf'] = jax.ShapeDtypeStruct(lead + (s.height, s.width),
                                         jnp.float32)
    return out

  def images(self, frames: Dict[str, jax.Array]) -> Dict[str, jax.Array]:
    """Frames -> {'pixels' [B,H,W,3], 'depth' [B,H,W,1]} uint8.

    Host frames are {'rgb', 'zbuf'} (GL rows, bottom first); Warp frames
    (`roxie.envs.warp_render`) {'image', 'distance'} (top row first, metres).
    """
    out = {}
    if 'rgb' in frames:
      out['pixels'] = frames['rgb'][:, ::-1]
    if 'image' in frames:
      out['pixels'] = frames['image']
    metres = None
    if 'zbuf' in frames:
      # mjDEPTH_ZEROFAR: the buffer holds 0 at the far plane, 1 at the near.
      z = frames['zbuf'][:, ::-1].astype(jnp.float32)
      n, f = np.float32(self.near), np.float32(self.far)
      if self.orthographic:
        metres = f - z * (f - n)
      else:
        metres = (f * n / (f - n)) / (z + n / (f - n))
    if 'distance' in frames:
      metres = frames['distance'].astype(jnp.float32)
    if metres is not None:
      scaled = (metres - self.depth_lo) / (self.depth_hi - self.depth_lo)
      q = jnp.round(jnp.clip(scaled, 0.0, 1.0) * 255.0).astype(jnp.uint8)
      out['depth'] = q[..., None]
    return out

  # -- cadence ---------------------------------------------------------------

  def cadence(self, t_next: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """(agent-step boundary, render step) [B] bool for control step t_next."""
    r = self.action_repeat
    boundary = (t_next % r) == 0
    render = (t_next % (r * self.spec.render_every)) == 0
    return boundary, render

  # -- dict observations (traced) -------------------------------------------

  def _vectors(self, state_obs, extra):
    out = {}
    if self.spec.state:
      out['state'] = state_obs
    if self.spec.sensors:
      data = jnp.nan_to_num(extra['sensordata'].astype(jnp.float32))
      out['sensors'] = data[:, self.sensor_index]
    return out

  def first(self, state_obs: jax.Array, extra) -> Dict[str, jax.Array]:
    """An episode's first observation: its first frame repeated S times."""
    out = self._vectors(state_obs, extra)
    for k, image in self.images(extra.get('frames', {})).items():
      out[k] = _tile(image, self.spec.frame_stack)
    return dict(sorted(out.items()))

  def advance(self, prev: Dict[str, jax.Array], state_obs: jax.Array, extra,
              rendered: jax.Array, shift: jax.Array) -> Dict[str, jax.Array]:
    """The observation after a step: stacks shifted where `shift`.

    The new newest frame is the rendered one where `rendered`, else the held
    previous newest frame.
    """
    out = self._vectors(state_obs, extra)
    for k, image in self.images(extra.get('frames', {})).items():
      c = _CHANNELS[k]
      stack = prev[k]
      frame = jnp.where(rendered[:, None, None, None], image,
                        stack[..., -c:])
      shifted = jnp.concatenate([stack[..., c:], frame], axis=-1)
      out[k] = jnp.where(shift[:, None, None, None], shifted, stack)
    return dict(sorted(out.items()))

  def replace_newest(self, obs: Dict[str, jax.Array], frames,
                     mask: jax.Array) -> Dict[str, jax.Array]:
    """`obs` with the newest frame of its stacks from `frames` where `mask`."""
    out = dict(obs)
    for k, image in self.images(frames).items():
      c = _CHANNELS[k]
      stack = obs[k]
      patched = jnp.concatenate([stack[..., :-c], image], axis=-1)
      out[k] = jnp.where(mask[:, None, None, None], patched, stack)
    return out


class _Worker:
  """One daemon thread running the calls handed to it, in order.

  A daemon thread (not a ThreadPoolExecutor, whose threads are stopped before
  `atexit` handlers run) so the GL context can still be freed on its own
  thread at interpreter exit.
  """

  def __init__(self, name: str):
    self._queue = queue.SimpleQueue()
    self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
    self.thread.start()

  def _loop(self):
    while True:
      item = self._queue.get()
      if item is None:
        return
      fn, args, future = item
      try:
        future.set_result(fn(*args))
      except BaseException as e:  # pylint: disable=broad-except
        future.set_exception(e)

  def call(self, fn, *args):
    if not self.thread.is_alive():
      raise RuntimeError('The rendering thread has stopped.')
    future = concurrent.futures.Future()
    self._queue.put((fn, args, future))
    return future.result()

  def stop(self):
    self._queue.put(None)


class HostRenderer:
  """MuJoCo's OpenGL renderer for a batch, on one dedicated thread.

  `render(load, ids, rgb, zbuf)` draws env i for each i in `ids`: `load(i,
  data)` puts env i's state into `data` (an MjData of the model, with its
  kinematics current), then the frame is read into `rgb[i]` ([H, W, 3] uint8)
  and/or `zbuf[i]` ([H, W] float32, mjDEPTH_ZEROFAR), in GL row order (bottom
  row first). Both are caller-owned arrays (e.g. an XLA output buffer), written
  in place.
  """

  name = 'host'

  def __init__(self, model: mujoco.MjModel, pixel_obs: PixelObs):
    from roxie import gl  # pylint: disable=g-import-not-at-top
    gl.gl_backend()  # Raises RenderingUnavailable, naming the packages.
    spec = pixel_obs.spec
    model = copy.copy(model)  # Own visual settings; the env's stays as is.
    model.vis.global_.offwidth = spec.width
    model.vis.global_.offheight = spec.height
    model.vis.quality.offsamples = 0
    self.model = model
    self.height, self.width = spec.height, spec.width
    self.data = mujoco.MjData(model)
    self.camera = pixel_obs.camera
    self._worker = _Worker('roxie-pixels')
    parts = self._worker.call(self._create, gl.gl_context_class())
    self._gl, self._con, self._scene, self._option, self._cam = parts
    self._rect = mujoco.MjrRect(0, 0, spec.width, spec.height)
    self._finalizer = weakref.finalize(self, _close, self._worker, self._gl,
                                       self._con)
    # At exit, free the context before EGL's own exit hook (registered when
    # the first context was made; exit hooks run last-in, first-out)
    # terminates the display under it.
    atexit.register(self._finalizer)

  def _create(self, context_class):
    ctx = context_class(self.width, self.height)
    ctx.make_current()
    con = mujoco.MjrContext(self.model,
                            mujoco.mjtFontScale.mjFONTSCALE_150.value)
    mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, con)
    con.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR
    scene = mujoco.MjvScene(self.model, maxgeom=10000)
    for flag in (mujoco.mjtRndFlag.mjRND_SHADOW,
                 mujoco.mjtRndFlag.mjRND_REFLECTION):
      scene.flags[flag] = 0
    option = mujoco.MjvOption()
    cam = mujoco.MjvCamera()
    if self.camera < 0:
      cam.type = mujoco.mjtCamera.mjCAMERA_FREE
      mujoco.mjv_defaultFreeCamera(self.model, cam)
    else:
      cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
      cam.fixedcamid = self.camera
    return ctx, con, scene, option, cam

  def _draw(self, load: Callable[[int, mujoco.MjData], None], ids, rgb,
            zbuf) -> None:
    assert threading.current_thread() is self._worker.thread  # The context's.
    m, d = self.model, self.data
    cat = mujoco.mjtCatBit.mjCAT_ALL.value
    for i in ids:
      load(int(i), d)
      mujoco.mjv_updateScene(m, d, self._option, None, self._cam, cat,
                             self._scene)
      mujoco.mjr_render(self._rect, self._scene, self._con)
      mujoco.mjr_readPixels(None if rgb is None else rgb[i],
                            None if zbuf is None else zbuf[i], self._rect,
                            self._con)

  def render(self, load, ids, rgb: Optional[np.ndarray],
             zbuf: Optional[np.ndarray]) -> None:
    if len(ids):
      self._worker.call(self._draw, load, ids, rgb, zbuf)

  def close(self) -> None:
    self._finalizer()


def _close(worker, ctx, con) -> None:
  def free():
    con.free()
    ctx.free()
  try:
    worker.call(free)
  except Exception:  # pylint: disable=broad-except
    pass  # At interpreter exit GL may already be gone.
  worker.stop()


def host_frames(out) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
  """(rgb, zbuf) NumPy views of a frames output dict (None where absent)."""
  rgb = out.get('rgb')
  zbuf = out.get('zbuf')
  return (None if rgb is None else np.asarray(rgb),
          None if zbuf is None else np.asarray(zbuf))


def renderer_of(env) -> Optional[str]:
  """'host' or 'warp': what draws an env's frames (None: no images)."""
  renderer = getattr(env.physics, 'renderer', None)
  return None if renderer is None else renderer.name


def depth_range_of(env) -> Tuple[float, float]:
  """The (lo, hi) metres an env's 'depth' uint8 maps linearly onto 0..255."""
  p = env.pixel_obs
  return (p.depth_lo, p.depth_hi)


__all__ = ['PixelSpec', 'PixelObs', 'HostRenderer', 'depth_range_of',
           'renderer_of', 'camera_id', 'RENDERERS']
