"""Pixel observations: rendering frames/s inside the compiled loop, per backend.

For each backend and env count, roxie.envs.make(task, pixels=...) is stepped
in a jitted lax.scan (random actions drawn in JAX beforehand, [T, B, A]), one
frame per env step (render_every=1, frame_stack=3), and prints
  raw        env steps/s of the same env without pixels (flat state), measured
             in the same run, interleaved with the others;
  rgb        frames/s (= env steps/s) with 64x64 RGB observations;
  rgb+depth  frames/s with 64x64 RGB and depth;
  ratio      frames/s / raw env steps/s: the speed kept with rendering on;
and, once, `renderer`: the host renderer alone (mjv_updateScene, mjr_render,
mjr_readPixels of a fixed state in a Python loop), the ceiling for 'cpu'.

The native backend ('cpu') renders from its step callback; MJX renders on
the host from its state through a pure_callback (see roxie/envs/pixels.py).
With --warp, MJX also renders with MJX's Warp renderer
(PixelSpec(renderer='warp'), rows 'rgb warp' and 'rgb+depth warp'; needs
NVIDIA Warp, roxie's optional `warp` extra; on Warp's CPU device where JAX
runs on the CPU). Timings are the best of `--repeats` runs (the machine is
shared).

  python benchmarks/render_throughput.py            # 16 and 64 envs, both
  python benchmarks/render_throughput.py --quick    # 16 envs, cpu only
  python benchmarks/render_throughput.py --backends mjx --envs 16
  python benchmarks/render_throughput.py --backends mjx --envs 16 --warp
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # pylint: disable=g-import-not-at-top,wrong-import-position

import roxie.envs as envs  # pylint: disable=g-import-not-at-top,wrong-import-position
from roxie import gl  # pylint: disable=g-import-not-at-top,wrong-import-position

MODES = {
    'raw': None,
    'rgb': dict(rgb=True, depth=False),
    'rgb+depth': dict(rgb=True, depth=True),
}
WARP_MODES = {
    'rgb warp': dict(rgb=True, depth=False, renderer='warp'),
    'rgb+depth warp': dict(rgb=True, depth=True, renderer='warp'),
}


def _runner(env, steps: int):
  """A blocking fn() that steps env `steps` times in one jitted scan."""
  @jax.jit
  def run(state, actions):
    def body(state, action):
      state, ts = env.step(state, action)
      return state, ts.reward
    return jax.lax.scan(body, state, actions)

  key = jax.random.key(0)
  actions = jax.random.uniform(
      key, (steps, env.num_envs, env.spec.action_size), jnp.float32, -1, 1)
  box = [jax.jit(env.reset)(key)]

  def fn():
    box[0], rewards = run(box[0], actions)
    jax.block_until_ready(rewards)
  return fn


def _renderer_alone(task: str, size: int, depth: bool, frames: int) -> float:
  """Frames/s of the host renderer by itself, one fixed state (best of 3)."""
  env = envs.make(task, num_envs=1, pixels=envs.PixelSpec(
      height=size, width=size, depth=depth))
  jax.block_until_ready(jax.jit(env.reset)(jax.random.key(0)))
  renderer = env.physics.renderer
  rgb = np.empty((1, size, size, 3), np.uint8)
  zbuf = np.empty((1, size, size), np.float32) if depth else None
  load = env.physics._load  # pylint: disable=protected-access
  ids = np.zeros(frames, np.int64)
  renderer.render(load, ids[:20], rgb, zbuf)
  best = float('inf')
  for _ in range(3):
    t0 = time.perf_counter()
    renderer.render(load, ids, rgb, zbuf)
    best = min(best, time.perf_counter() - t0)
  renderer.close()
  return frames / best


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--task', default='CartpoleSwingup')
  p.add_argument('--envs', default='16,64', help='env counts, comma-separated')
  p.add_argument('--backends', default='cpu,mjx')
  p.add_argument('--size', type=int, default=64, help='image height = width')
  p.add_argument('--steps', type=int, default=40, help='env steps per scan')
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--quick', action='store_true',
                 help='16 envs, cpu only, 2 repeats')
  p.add_argument('--warp', action='store_true',
                 help="mjx: also PixelSpec(renderer='warp') (needs Warp)")
  args = p.parse_args(argv)
  counts = [int(x) for x in args.envs.split(',')]
  backends = args.backends.split(',')
  if args.quick:
    counts, backends, args.repeats = [16], ['cpu'], 2
  if args.warp:
    from roxie.envs import warp_render  # pylint: disable=g-import-not-at-top
    if not warp_render.warp_installed():
      p.error(f'--warp needs NVIDIA Warp: {warp_render.install_hint()}')
  gl_name = gl.gl_backend()
  print(_harness.machine_header(
      'render_throughput: pixel observations in a jitted scan',
      [f'task {args.task}, {args.size}x{args.size} images, frame_stack 3, '
       f'render_every 1, {args.steps} steps per scan, best of '
       f'{args.repeats}; GL: {gl_name}']), flush=True)

  alone = {d: _renderer_alone(args.task, args.size, d, 200)
           for d in (False, True)}
  print(f'renderer alone (host, Python loop, one state): '
        f'{alone[False]:,.0f} frames/s RGB, {alone[True]:,.0f} frames/s '
        f'RGB+depth', flush=True)

  rows = []
  for backend in backends:
    for b in counts:
      fns, compile_s = {}, {}
      modes = dict(MODES)
      if args.warp and backend == 'mjx':
        modes.update(WARP_MODES)
      for mode, opts in modes.items():
        spec = None if opts is None else envs.PixelSpec(
            height=args.size, width=args.size, **opts)
        env = envs.make(args.task, backend=backend, num_envs=b, pixels=spec)
        fn = _runner(env, args.steps)
        t0 = time.perf_counter()
        fn()  # Compile (and warm up).
        compile_s[mode] = time.perf_counter() - t0
        fns[mode] = fn
      times = _harness.interleaved(list(fns.values()), args.repeats,
                                   warmup=1)
      rate = {mode: args.steps * b / min(t)
              for mode, t in zip(fns, times)}
      for mode in modes:
        rows.append([backend, str(b), mode, f'{rate[mode]:,.0f}',
                     f'{rate[mode] / rate["raw"]:.3f}',
                     f'{compile_s[mode]:.1f}'])
      print(_harness.fmt_table(
          ['backend', 'envs', 'obs', 'steps/s (=frames/s)', 'ratio to raw',
           'first call s'], rows[-len(modes):]), flush=True)
  print()
  print(_harness.fmt_table(
      ['backend', 'envs', 'obs', 'steps/s (=frames/s)', 'ratio to raw',
       'first call s'], rows))
  print(f'load average at end: {_harness.load_now()}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
