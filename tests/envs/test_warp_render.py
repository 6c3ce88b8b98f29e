"""PixelSpec.renderer: MJX's Warp renderer against the host renderer.

The Warp tests need NVIDIA Warp (roxie's optional `warp` extra, not installed
in CI) and skip without it; where it is installed they run on Warp's CPU
device if no GPU is there. The choice's validation, the errors naming what to
install and the 'auto' fallback are checked everywhere (the fallback draws
with the host renderer, so it skips where no headless OpenGL works).

Tiny images (16x16), 3 envs, PendulumSwingup, inside `jax.jit`/`lax.scan`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import roxie.envs as envs
from roxie.envs import pixels as pixels_lib
from roxie.envs import warp_render
from test_backends import _rollout_fn  # pylint: disable=g-bad-import-order

B = 3
H = W = 16
TASK = 'PendulumSwingup'


def _warp_or_skip():
  if not warp_render.warp_installed():
    pytest.skip('NVIDIA Warp is not installed (optional: roxie[warp]).')


@functools.lru_cache(maxsize=None)
def _env(renderer, backend='mjx', **spec):
  spec = dict(dict(height=H, width=W, renderer=renderer), **spec)
  return envs.make(TASK, backend=backend, num_envs=B, episode_length=4,
                   pixels=envs.PixelSpec(**spec))


# -- everywhere ----------------------------------------------------------------


def test_renderer_choice_is_validated():
  with pytest.raises(ValueError, match="'host', 'warp', 'auto'"):
    envs.PixelSpec(renderer='gl')
  with pytest.raises(ValueError, match="backend='mjx'"):
    envs.make(TASK, backend='cpu', num_envs=1,
              pixels=envs.PixelSpec(renderer='warp'))


def test_missing_warp_names_what_to_install(monkeypatch):
  monkeypatch.setattr(warp_render, 'warp_installed', lambda: False)
  hint = r"pip install 'mujoco-mjx\[warp\]' \(i\.e\. warp-lang"
  with pytest.raises(warp_render.WarpUnavailable, match=hint):
    envs.make(TASK, backend='mjx', num_envs=1,
              pixels=envs.PixelSpec(height=H, width=W, renderer='warp'))
  with pytest.raises(ValueError, match=hint):
    envs.make(TASK, backend='mjx', num_envs=1, impl='warp')


def test_warp_requirement_is_the_one_mjx_names():
  # mujoco-mjx 3.17.0's 'warp' extra pins warp-lang==1.18.0.
  assert warp_render.warp_requirement().startswith('warp-lang')


def test_auto_falls_back_to_host(monkeypatch, gl_backend):
  spec = dict(height=H, width=W, renderer='auto')
  cpu = envs.make(TASK, backend='cpu', num_envs=1,
                  pixels=envs.PixelSpec(**spec))
  assert pixels_lib.renderer_of(cpu) == 'host'
  free = envs.make(TASK, backend='mjx', num_envs=1,
                   pixels=envs.PixelSpec(camera=-1, **spec))
  assert pixels_lib.renderer_of(free) == 'host'  # Warp: model cameras only.
  monkeypatch.setattr(warp_render, 'warp_installed', lambda: False)
  mjx = envs.make(TASK, backend='mjx', num_envs=1,
                  pixels=envs.PixelSpec(**spec))
  assert pixels_lib.renderer_of(mjx) == 'host'
  assert pixels_lib.renderer_of(envs.make(
      TASK, num_envs=1, pixels=envs.PixelSpec(rgb=False))) is None


# -- with Warp -----------------------------------------------------------------


def test_warp_refusals_say_why():
  _warp_or_skip()
  with pytest.raises(warp_render.WarpUnavailable, match='free camera'):
    envs.make(TASK, backend='mjx', num_envs=1,
              pixels=envs.PixelSpec(height=H, width=W, camera=-1,
                                    renderer='warp'))
  auto = _env('auto', depth=True, render_every=2)
  assert pixels_lib.renderer_of(auto) == 'warp'


def test_warp_frames_match_host_frames(gl_backend):
  """Same key and actions on MJX: Warp's frames against the host's.

  The same scene from two renderers (a ray tracer against OpenGL): depth is
  the same planar distance (uint8 equal but for a rare silhouette pixel);
  colours differ (MuJoCo's OpenGL lights the floor per vertex, MuJoCo Warp
  per pixel: ~16 of 255 on average here, 3-4 on cartpole and cheetah).
  Layout, dtypes, states and cadence are identical.
  """
  _warp_or_skip()
  warp = _env('warp', depth=True, render_every=2)
  host = _env('host', depth=True, render_every=2)
  assert pixels_lib.renderer_of(warp) == 'warp'
  assert warp.spec == host.spec
  rng = np.random.default_rng(6)
  actions = jnp.asarray(rng.uniform(-1, 1, (6, B, warp.spec.action_size)),
                        jnp.float32)
  f_w, (ts_w, _, _) = _rollout_fn(warp)(jax.random.key(6), actions)
  f_h, (ts_h, _, _) = _rollout_fn(host)(jax.random.key(6), actions)
  for a, b in ((f_w, f_h), (ts_w.obs, ts_h.obs),
               (ts_w.final_obs, ts_h.final_obs)):
    assert list(a) == list(b) == ['depth', 'pixels', 'state']
    for key in ('depth', 'pixels'):
      assert a[key].shape == b[key].shape and a[key].dtype == np.uint8
    depth = np.abs(np.asarray(a['depth'], int) - np.asarray(b['depth'], int))
    assert (depth > 1).mean() < 0.002, depth.max()
    rgb = np.abs(np.asarray(a['pixels'], int) - np.asarray(b['pixels'], int))
    assert rgb.mean() < 24, rgb.mean()
    np.testing.assert_array_equal(a['state'], b['state'])
  # The frames follow the state: the swinging pole moves between renders.
  moved = np.abs(np.diff(np.asarray(ts_w.obs['depth'][..., -1], int), axis=0))
  assert (moved > 0).any()
