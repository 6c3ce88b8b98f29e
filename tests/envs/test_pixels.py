"""Pixel and mixed observations (roxie.envs.PixelSpec) on both backends.

Tiny images (16x16), few envs, PendulumSwingup (the quickest compile), always
inside `jax.jit` and `lax.scan`. Frames are checked against an independent
render of the same physics state (`mujoco.Renderer`), against each other
(stacking, holding, resets) and across backends. Tests that draw frames skip,
with the reason, where no headless OpenGL backend works.
"""

import copy
import dataclasses
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from roxie import gl
import roxie.envs as envs
from roxie.envs import pixels as pixels_lib
from test_backends import _rollout_fn  # pylint: disable=g-bad-import-order

B = 3
H = W = 16
TASK = 'PendulumSwingup'


pytestmark = pytest.mark.usefixtures('gl_backend')  # Skips without GL.


@functools.lru_cache(maxsize=None)
def _env(backend='cpu', episode_length=None, task=TASK, action_repeat=1,
         **spec):
  spec = dict(dict(height=H, width=W), **spec)
  return envs.make(task, backend=backend, num_envs=B,
                   episode_length=episode_length, action_repeat=action_repeat,
                   pixels=envs.PixelSpec(**spec))


def _actions(steps, env, seed=0):
  rng = np.random.default_rng(seed)
  return jnp.asarray(rng.uniform(-1, 1, (steps, B, env.spec.action_size)),
                     jnp.float32)


def _frames(stack, c=3):
  """[..., H, W, c*S] -> [..., S, H, W, c], oldest first."""
  stack = np.asarray(stack)
  s = stack.shape[-1] // c
  parts = np.split(stack, s, axis=-1)
  return np.stack(parts, axis=-4)


def _reference_render(env, rows, depth=False):
  """Frames drawn by mujoco.Renderer (lean settings) from host state rows."""
  model = copy.copy(env.model)
  model.vis.global_.offwidth, model.vis.global_.offheight = W, H
  model.vis.quality.offsamples = 0
  r = mujoco.Renderer(model, H, W)
  for flag in (mujoco.mjtRndFlag.mjRND_SHADOW,
               mujoco.mjtRndFlag.mjRND_REFLECTION):
    r.scene.flags[flag] = 0
  if depth:
    r.enable_depth_rendering()
  data = mujoco.MjData(model)
  out = []
  try:
    for row in rows:
      mujoco.mj_setState(model, data, row,
                         mujoco.mjtState.mjSTATE_INTEGRATION)
      mujoco.mj_forward(model, data)
      r.update_scene(data, camera=env.pixel_obs.camera)
      out.append(r.render().copy())
  finally:
    r.close()
  return np.stack(out)


# -- spec and shapes ---------------------------------------------------------


def test_spec_shapes_and_dtypes():
  env = _env(depth=True, frame_stack=3)
  spec = env.spec
  assert spec.frame_stack == 3 and spec.obs_size == 3
  assert spec.obs_shapes == (('depth', (H, W, 3), 'uint8'),
                             ('pixels', (H, W, 9), 'uint8'),
                             ('state', (3,), 'float32'))
  state = jax.jit(env.reset)(jax.random.key(0))
  assert list(state.obs) == ['depth', 'pixels', 'state']
  for key, shape, dtype in spec.obs_shapes:
    assert state.obs[key].shape == (B,) + shape, key
    assert state.obs[key].dtype == np.dtype(dtype), key
  # 'state' is the flat observation of the same task, as without pixels.
  flat = envs.make(TASK, num_envs=B)
  np.testing.assert_array_equal(state.obs['state'],
                                jax.jit(flat.reset)(jax.random.key(0)).obs)
  assert flat.spec.obs_shapes is None and flat.spec.frame_stack == 1


def test_pixel_spec_validation_and_camera_errors():
  with pytest.raises(ValueError, match='frame_stack'):
    envs.PixelSpec(frame_stack=0)
  with pytest.raises(ValueError, match='exposes nothing'):
    envs.PixelSpec(rgb=False, state=False)
  with pytest.raises(ValueError, match='cameras: fixed, lookat'):
    envs.make(TASK, num_envs=1, pixels=envs.PixelSpec(camera='nope'))
  with pytest.raises(ValueError, match='No sensor'):
    envs.make(TASK, num_envs=1, pixels=envs.PixelSpec(sensors=('nope',)))


def test_missing_gl_fails_at_make_naming_packages(monkeypatch):
  monkeypatch.setattr(gl, '_chosen', None)
  monkeypatch.setattr(gl, '_failure', None)
  monkeypatch.setattr(gl, '_probe', lambda backend: f'{backend}: not here')
  with pytest.raises(gl.RenderingUnavailable, match='libegl1.*libosmesa6'):
    envs.make(TASK, num_envs=1, pixels=envs.PixelSpec(height=H, width=W))
  # Without images no GL is needed.
  env = envs.make(TASK, num_envs=1, pixels=envs.PixelSpec(rgb=False))
  assert env.spec.obs_shapes == (('state', (3,), 'float32'),)


# -- frames ------------------------------------------------------------------


def test_frames_match_mujoco_renderer_and_change_with_state():
  env = _env(depth=True)
  state = jax.jit(env.reset)(jax.random.key(1))
  jax.block_until_ready(state)
  rows = env.get_host_state()
  ref_rgb = _reference_render(env, rows)
  ref_depth = _reference_render(env, rows, depth=True)
  newest = _frames(state.obs['pixels'])[:, -1]
  diff = np.abs(newest.astype(int) - ref_rgb.astype(int))
  assert diff.mean() < 1.0 and (diff > 8).mean() < 0.01
  lo, hi = pixels_lib.depth_range_of(env)
  assert (lo, hi) == pixels_lib.default_depth_range(env.model, 0)
  assert 0 < lo < 1.5 < hi < 4  # Pendulum: camera 2.1 m from its centre.
  want = np.round(255 * np.clip((ref_depth - lo) / (hi - lo), 0, 1))
  got = np.asarray(state.obs['depth'][..., -1], float)
  assert np.abs(got - want).max() <= 2
  assert 50 < got.min() < 200 and got.max() == 255  # Pendulum mid, sky far.
  # Different start angles, different frames; stepping changes them.
  assert np.abs(newest[0].astype(int) - newest[1]).sum() > 0
  actions = jnp.ones((5, B, 1))
  _, (ts, _, _) = _rollout_fn(env)(jax.random.key(1), actions)
  later = _frames(ts.obs['pixels'][-1])[:, -1]
  assert np.abs(later.astype(int) - newest).mean() > 0.05


def test_reset_repeats_the_first_frame_and_stack_shifts():
  env = _env(depth=True, frame_stack=3)
  first, (ts, _, _) = _rollout_fn(env)(jax.random.key(2),
                                    _actions(4, env))
  for key, c in (('pixels', 3), ('depth', 1)):
    f0 = _frames(first[key], c)
    assert (f0 == f0[:, :1]).all(), key
    seq = [f0] + [_frames(ts.obs[key][k], c) for k in range(4)]
    for prev, cur in zip(seq, seq[1:]):
      np.testing.assert_array_equal(cur[:, :-1], prev[:, 1:])  # Shifted.
  new = _frames(ts.obs['pixels'][3])[:, -1]
  assert (new != _frames(ts.obs['pixels'][2])[:, -1]).any()  # Rendered anew.


def test_render_every_holds_the_last_frame():
  """render_every=3 shows exactly the every-step frames of steps 0, 3, 6, ..."""
  steps = 8
  every = _env(frame_stack=2, render_every=1)
  held = _env(frame_stack=2, render_every=3)
  actions = _actions(steps, every, seed=3)
  f_every, (ts_every, _, _) = _rollout_fn(every)(jax.random.key(3), actions)
  f_held, (ts_held, _, _) = _rollout_fn(held)(jax.random.key(3), actions)
  np.testing.assert_array_equal(f_every['pixels'], f_held['pixels'])
  want = [_frames(f_every['pixels'])[:, -1]]
  got = [_frames(f_held['pixels'])[:, -1]]
  for k in range(steps):
    want.append(_frames(ts_every.obs['pixels'][k])[:, -1])
    got.append(_frames(ts_held.obs['pixels'][k])[:, -1])
  for k in range(steps + 1):  # k: the observation's step in the episode.
    np.testing.assert_array_equal(got[k], want[k - k % 3], err_msg=f'k={k}')
  assert (want[1] != want[0]).any()  # The held frames are really stale.
  # The stack still shifts every step, repeating the held frame.
  for k in range(steps):
    prev = f_held['pixels'] if k == 0 else ts_held.obs['pixels'][k - 1]
    np.testing.assert_array_equal(_frames(ts_held.obs['pixels'][k])[:, 0],
                                  _frames(prev)[:, 1])
  np.testing.assert_array_equal(ts_every.obs['state'], ts_held.obs['state'])


def test_truncation_final_obs_holds_the_true_final_frame():
  """Episodes of 4 steps, rendering every 3: the final frame is rendered."""
  length, steps = 4, 6
  env = _env(episode_length=length, frame_stack=2, render_every=3)
  ref = _env(frame_stack=2, render_every=1)  # Same physics, no time limit.
  actions = _actions(steps, env, seed=4)
  _, (ts, t, _) = _rollout_fn(env)(jax.random.key(4), actions)
  _, (ts_ref, _, _) = _rollout_fn(ref)(jax.random.key(4), actions)
  k = length - 1  # The truncating step: its obs would be held (4 % 3 != 0).
  assert ts.truncated[k].all() and (np.asarray(t[k]) == 0).all()
  final = _frames(ts.final_obs['pixels'][k])
  np.testing.assert_array_equal(final[:, -1],
                                _frames(ts_ref.final_obs['pixels'][k])[:, -1])
  np.testing.assert_array_equal(final[:, 0],  # Older: the held step-3 frame.
                                _frames(ts_ref.obs['pixels'][2])[:, -1])
  np.testing.assert_array_equal(ts.final_obs['state'][k],
                                ts_ref.final_obs['state'][k])
  # obs: the new episode's first frame, repeated; not the final one.
  new = _frames(ts.obs['pixels'][k])
  assert (new == new[:, :1]).all()
  assert (new[:, -1] != final[:, -1]).any()
  # Elsewhere final_obs is obs.
  for name in ('pixels', 'state'):
    np.testing.assert_array_equal(ts.obs[name][:k], ts.final_obs[name][:k])


def _terminating_pendulum():
  base = envs.get_task(TASK)
  def terminate(view, task_state, consts):
    del task_state
    return jnp.abs(view['qvel'][consts['hinge_qvel']]) > 1.0
  return dataclasses.replace(base, name='PendulumTerminating',
                             terminate=terminate)


@pytest.mark.parametrize('backend', ['cpu', 'mjx'])
def test_termination_final_obs_renders_the_terminal_state(backend):
  """A termination between render steps: drawn by the reset call, then reset.

  The reference is native physics without the termination (MJX's float32
  frames agree with it up to a few edge pixels).
  """
  task = _terminating_pendulum()
  env = envs.make(task, backend=backend, num_envs=B, pixels=envs.PixelSpec(
      height=H, width=W, frame_stack=2, render_every=1000))
  ref = _env(frame_stack=2, render_every=1)  # Same physics, no termination.
  steps = 30
  actions = jnp.ones((steps, B, 1))
  _, (ts, _, _) = _rollout_fn(env)(jax.random.key(2), actions)
  _, (ts_ref, _, _) = _rollout_fn(ref)(jax.random.key(2), actions)
  term = np.asarray(ts.terminated)
  assert term.any(axis=0).all()
  for i in range(B):
    k = int(np.argmax(term[:, i]))
    final = _frames(ts.final_obs['pixels'][k, i:i + 1])[0]
    want = _frames(ts_ref.obs['pixels'][k, i:i + 1])[0, -1]
    if backend == 'cpu':
      np.testing.assert_array_equal(final[-1], want)
    else:
      diff = np.abs(final[-1].astype(int) - want)
      assert diff.mean() < 0.5 and (diff > 16).mean() < 0.02
    assert k > 0
    held = _frames(ts.obs['pixels'][k - 1, i:i + 1])[0, -1]
    assert (final[0] == held).all()  # The stack shifted once, as usual.
    assert (final[-1] != held).any()  # The terminal frame, newly drawn.
    new = _frames(ts.obs['pixels'][k, i:i + 1])[0]
    assert (new == new[:1]).all() and (new[-1] != final[-1]).any()


def test_action_repeat_stacks_agent_steps():
  """Under action_repeat=2 the stack shifts once per agent step."""
  rep = _env(frame_stack=2, action_repeat=2)
  one = _env(frame_stack=2)
  actions = _actions(3, rep, seed=5)
  _, (ts_rep, _, _) = _rollout_fn(rep)(jax.random.key(5), actions)
  _, (ts_one, _, _) = _rollout_fn(one)(jax.random.key(5),
                                    jnp.repeat(actions, 2, axis=0))
  for k in range(3):  # Agent step k is control step 2k + 1.
    np.testing.assert_array_equal(
        _frames(ts_rep.obs['pixels'][k]),
        np.stack([_frames(ts_one.obs['pixels'][2 * k - 1])[:, -1]
                  if k else _frames(ts_one.obs['pixels'][0])[:, 0],
                  _frames(ts_one.obs['pixels'][2 * k + 1])[:, -1]], axis=1))


def test_sensors_without_images_need_no_renderer():
  env = envs.make('HopperHop', num_envs=2, pixels=envs.PixelSpec(
      rgb=False, state=False, sensors=('touch_toe', 'touch_heel')))
  assert env.spec.obs_shapes == (('sensors', (2,), 'float32'),)
  assert env.spec.obs_size == 0 and env.physics.renderer is None
  state = jax.jit(env.reset)(jax.random.key(0))
  step = jax.jit(env.step)
  for _ in range(30):
    state, ts = step(state, jnp.zeros((2, env.spec.action_size)))
  jax.block_until_ready(ts)
  data = mujoco.MjData(env.model)
  for i in range(2):
    env.physics.batch.get_data(i, data)
    toe = data.sensor('touch_toe').data[0]
    heel = data.sensor('touch_heel').data[0]
    np.testing.assert_allclose(ts.obs['sensors'][i], [toe, heel], rtol=1e-5)


# -- MJX -----------------------------------------------------------------------


def test_mjx_frames_agree_with_native():
  """Same key and actions: frames of the same states agree across backends.

  MJX simulates in float32, so poses differ by ~1e-5 and a few edge pixels
  may flip; frames must agree closely, everywhere.
  """
  steps, length = 6, 4
  cpu = _env('cpu', length, depth=True, render_every=2)
  mjx = _env('mjx', length, depth=True, render_every=2)
  actions = _actions(steps, cpu, seed=6)
  f_cpu, (ts_cpu, _, _) = _rollout_fn(cpu)(jax.random.key(6), actions)
  f_mjx, (ts_mjx, _, _) = _rollout_fn(mjx)(jax.random.key(6), actions)
  assert mjx.spec == cpu.spec
  for a, b in ((f_cpu, f_mjx), (ts_cpu.obs, ts_mjx.obs),
               (ts_cpu.final_obs, ts_mjx.final_obs)):
    for key in ('pixels', 'depth'):
      diff = np.abs(np.asarray(a[key], int) - np.asarray(b[key], int))
      assert diff.mean() < 0.5 and (diff > 16).mean() < 0.01, key
    np.testing.assert_allclose(a['state'], b['state'], atol=2e-3)
  assert ts_cpu.truncated[length - 1].all()
