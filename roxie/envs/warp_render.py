"""Pixel frames from MJX's batch renderer (MuJoCo Warp), inside the program.

`PixelSpec(renderer='warp')` (or 'auto' where it works) on backend 'mjx':
frames are ray traced by `mujoco.mjx.render` (MuJoCo Warp's renderer, vendored
in mujoco-mjx as `mujoco.mjx.third_party.mujoco_warp`) on Warp's device for
JAX's default backend: CUDA next to a JAX GPU, Warp's CPU device next to
JAX's CPU. It needs NVIDIA Warp, the version the installed mujoco-mjx names
(`pip install 'mujoco-mjx[warp]'`, or roxie's `warp` extra; warp-lang 1.18.0
for mujoco-mjx 3.17.0); no OpenGL.

Per call, for all envs at once: the poses (qpos, mocap) of the envs' MJX
state go into a MuJoCo Warp `mjx.Data` of the model with contacts and
constraints disabled (poses are all a frame needs), `mjx.forward` computes
the geom, camera and light frames (MuJoCo Warp has no position-stage-only
call that includes cameras and lights: `mjx.kinematics` leaves them at
zero), `mjx.refit_bvh` refits the scene's bounding volumes and `mjx.render`
traces the image. The render context is made for exactly `num_envs` worlds,
so the frame function must not be vmapped (roxie never does).

Frames are the host renderer's (`roxie.envs.pixels`) up to the two
renderers' differences, measured at 64x64 on 4 random poses per task:
- depth: the same planar camera distance; metres agree to 1e-5 mean, 2e-3
  max (cartpole); the uint8 depth differs by at most 1 except at a few
  silhouette pixels (0.01% of pixels in cheetah, walker, humanoid; 0.2% in
  ball_in_cup);
- RGB: the same silhouettes; colours differ by 3.6-3.8 of 255 on average
  (median 1, 90th percentile 7) where lighting is similar (cartpole,
  cheetah), 9-11 on humanoid and walker, ~16 on pendulum (OpenGL lights its
  floor per vertex, MuJoCo Warp per pixel, so a spot light's pool shows only
  in Warp's), ~20-28 where MuJoCo's specular highlights show (fish,
  ball_in_cup); MuJoCo Warp does not draw what mjv_updateScene adds as
  decor (e.g. ball_in_cup's tendon rope), and samples textures without
  mipmaps (the skybox's stars alias).
Model cameras only: the free camera (camera=-1) has no Warp counterpart.
Speed: on the shared 2-core CPU (Warp's CPU device) 600-650 frames/s at 16
envs, 64x64 CartpoleSwingup, against 1,500 for the host renderer
(benchmarks/RESULTS.md); the renderer is meant for GPUs (unmeasured here).
The render context (bounding volumes, output buffers) is shared by all calls
of one env: calls are ordered within a program (the token), but two
programs using one env must not run at the same time.
"""

from __future__ import annotations

import copy
import importlib.metadata
from typing import Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np


class WarpUnavailable(RuntimeError):
  """MJX's Warp renderer cannot run here; the message says why, what to do."""


def warp_requirement() -> str:
  """The Warp requirement the installed mujoco-mjx names (its 'warp' extra)."""
  try:
    requires = importlib.metadata.requires('mujoco-mjx') or []
  except importlib.metadata.PackageNotFoundError:
    requires = []
  for req in requires:
    spec, _, marker = req.partition(';')
    if spec.strip().startswith('warp-lang') and "'warp'" in marker.replace(
        '"', "'"):
      return spec.strip().replace(' ', '')
  return 'warp-lang'


def install_hint() -> str:
  return (f"pip install 'mujoco-mjx[warp]' (i.e. {warp_requirement()}; "
          f"roxie's extra: pip install 'roxie[warp]')")


def warp_installed() -> bool:
  """Whether the installed MJX imported NVIDIA Warp."""
  import mujoco.mjx.warp as mjxw  # pylint: disable=g-import-not-at-top
  return bool(mjxw.WARP_INSTALLED)


def _warp_device() -> Optional[str]:
  """Warp's device for JAX's default backend (None: Warp's default)."""
  return 'cpu' if jax.default_backend() == 'cpu' else None


class WarpRenderer:
  """MJX's batch renderer for `num_envs` envs of one model and camera.

  `frames(qpos, mocap_pos, mocap_quat, mask, token)` (traced) returns
  ({'image': uint8 [B, H, W, 3], 'distance': float32 [B, H, W] metres, inf
  where the ray hits nothing}, token), top row first, for the entries the
  spec asks for. All envs are drawn when any of `mask` is set (none
  otherwise). `token` orders calls: pass the one the previous call returned
  (None for the first in a program); Warp's render context holds one scene
  per world, so two calls in one program must not run concurrently.
  """

  name = 'warp'

  def __init__(self, model: mujoco.MjModel, pixel_obs):
    if not warp_installed():
      raise WarpUnavailable(
          f"PixelSpec(renderer='warp') renders with MJX's Warp renderer, "
          f'which needs NVIDIA Warp; it is not installed: {install_hint()}. '
          f"Or use renderer='host' (MuJoCo's OpenGL renderer).")
    if pixel_obs.camera < 0:
      raise WarpUnavailable(
          "PixelSpec(renderer='warp') draws the model's cameras only; the "
          "free camera (camera=-1) needs renderer='host'.")
    from mujoco import mjx  # pylint: disable=g-import-not-at-top
    spec = pixel_obs.spec
    self.height, self.width = spec.height, spec.width
    self.num_envs = pixel_obs.num_envs
    self.rgb, self.depth = bool(spec.rgb), bool(spec.depth)
    skybox = bool(np.any(model.tex_type ==
                         int(mujoco.mjtTexture.mjTEXTURE_SKYBOX)))
    device = _warp_device()
    # Only the poses matter here: no contacts or constraints to compute.
    poses = copy.copy(model)
    poses.opt.disableflags |= (int(mujoco.mjtDisableBit.mjDSBL_CONTACT) |
                               int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT))
    try:
      self.mx = mjx.put_model(poses, impl='warp')
      self.template = mjx.make_data(poses, impl='warp')
      # Keep this object alive: dropping it frees the Warp buffers.
      self.context = mjx.create_render_context(
          model, nworld=self.num_envs,
          devices=None if device is None else [device],
          cam_res=(self.width, self.height), cam_active=[pixel_obs.camera],
          render_rgb=self.rgb, render_depth=self.depth,
          render_skybox=skybox, use_shadows=False)
    except Exception as e:  # pylint: disable=broad-except
      raise WarpUnavailable(
          f"MJX's Warp renderer failed to set up for this model: "
          f'{type(e).__name__}: {e}') from e
    self._rgb_adr = int(self.context.rgb_adr.numpy()[0])
    self._depth_adr = int(self.context.depth_adr.numpy()[0])
    self._mjx = mjx

  def frame_shapes(self) -> Dict[str, jax.ShapeDtypeStruct]:
    lead = (self.num_envs, self.height, self.width)
    out = {}
    if self.rgb:
      out['image'] = jax.ShapeDtypeStruct(lead + (3,), jnp.uint8)
    if self.depth:
      out['distance'] = jax.ShapeDtypeStruct(lead, jnp.float32)
    return out

  def _unpack(self, rgb: jax.Array, depth: jax.Array) -> Dict[str, jax.Array]:
    b, h, w = self.num_envs, self.height, self.width
    out = {}
    if self.rgb:
      # Packed 0xAARRGGBB per pixel, rows top first.
      p = rgb[:, self._rgb_adr:self._rgb_adr + h * w].reshape(b, h, w)
      out['image'] = jnp.stack([(p >> 16) & 0xFF, (p >> 8) & 0xFF, p & 0xFF],
                               axis=-1).astype(jnp.uint8)
    if self.depth:
      d = depth[:, self._depth_adr:self._depth_adr + h * w].reshape(b, h, w)
      out['distance'] = jnp.where(d > 0, d, jnp.inf).astype(jnp.float32)
    return out

  def frames(self, qpos: jax.Array, mocap_pos: jax.Array,
             mocap_quat: jax.Array, mask: jax.Array,
             token: Optional[jax.Array] = None
             ) -> Tuple[Dict[str, jax.Array], jax.Array]:
    mjx, m, t = self._mjx, self.mx, self.template
    # pylint: disable=protected-access
    if token is None:
      token = jnp.broadcast_to(t._impl._jax_token,
                               (self.num_envs,) + t._impl._jax_token.shape)

    def draw(token):
      def load(q, p, r, k):
        d = t.replace(qpos=q.astype(t.qpos.dtype),
                      mocap_pos=p.astype(t.mocap_pos.dtype),
                      mocap_quat=r.astype(t.mocap_quat.dtype))
        return d.tree_replace({'_impl._jax_token': k})
      d = jax.vmap(load)(qpos, mocap_pos, mocap_quat, token)
      rc = self.context.pytree()
      d = jax.vmap(lambda d: mjx.forward(m, d))(d)
      d = jax.vmap(lambda d: mjx.refit_bvh(m, d, rc))(d)
      rgb, depth, d = jax.vmap(lambda d: mjx.render(m, d, rc))(d)
      return self._unpack(rgb, depth), d._impl._jax_token

    def skip(token):
      return ({k: jnp.zeros(s.shape, s.dtype)
               for k, s in self.frame_shapes().items()}, token)
    # pylint: enable=protected-access
    return jax.lax.cond(jnp.any(mask), draw, skip, token)

  def close(self) -> None:
    self.context = None


__all__ = ['WarpRenderer', 'WarpUnavailable', 'warp_installed',
           'warp_requirement', 'install_hint']
