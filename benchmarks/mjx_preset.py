"""The 'playground' physics preset against dm_control's: speed and returns.

For each task, builds the env twice, `physics='dm_control'` (default) and
`physics='playground'` (mujoco_playground's solver options, see
roxie/envs/presets.py), on the same backend, and runs one full episode of a
FIXED policy from the same reset key in a jitted `lax.scan`:
  zero     action 0 everywhere;
  random   a seeded uniform [-1, 1] action sequence [T, B, A], the same array
           for both presets.
It prints
  sps      env steps/s of the episode scan (best of --repeats, the two
           presets timed in alternation; compile time apart), and the ratio
           playground / dm_control from the same run;
  return   each env's undiscounted episode return under each preset (mean
           and range over the B envs), and the mean absolute difference;
  drift    max |obs_dm_control - obs_playground| over the batch at a few
           steps: how fast the two physics part ways under the same actions.

  python benchmarks/mjx_preset.py                          # MJX, 16 envs
  python benchmarks/mjx_preset.py --backend cpu --envs 16
"""

from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp
import numpy as np

import _harness  # pylint: disable=import-error
import roxie.envs as envs

PRESETS = ('dm_control', 'playground')
DRIFT_AT = (1, 10, 100, 1000)


def _episode_fn(env):
  """jit(key, actions [T, B, A]) -> (rewards [T, B], obs [T, B, O])."""

  @jax.jit
  def episode(key, actions):
    state = env.reset(key)

    def body(state, action):
      state, ts = env.step(state, action)
      # final_obs: the last step's observation before the auto-reset.
      return state, (ts.reward, ts.final_obs)

    _, out = jax.lax.scan(body, state, actions)
    return out

  return episode


def _run_task(name, backend, num_envs, repeats, seed):
  """Prints one task's table: sps and returns for both presets."""
  built = {p: envs.make(name, backend=backend, num_envs=num_envs, physics=p)
           for p in PRESETS}
  spec = built[PRESETS[0]].spec
  steps = int(spec.episode_length)
  key = jax.random.key(seed)
  policies = {
      'zero': jnp.zeros((steps, num_envs, spec.action_size), jnp.float32),
      'random': jax.random.uniform(jax.random.key(seed + 1),
                                   (steps, num_envs, spec.action_size),
                                   jnp.float32, -1., 1.),
  }
  fns = {p: _episode_fn(built[p]) for p in PRESETS}
  compile_s = {}
  for p in PRESETS:
    with _harness.Stopwatch() as t:
      jax.block_until_ready(fns[p](key, policies['random']))
    compile_s[p] = t.wall
  cpu = []
  times = _harness.interleaved(
      [functools.partial(lambda f: jax.block_until_ready(
          f(key, policies['random'])), fns[p]) for p in PRESETS],
      repeats, warmup=0, cpu=cpu)
  sps = {p: steps * num_envs / min(ts) for p, ts in zip(PRESETS, times)}
  cps = {p: steps * num_envs / min(c) for p, c in zip(PRESETS, cpu)}
  _harness.flush_print(
      f'\n{name} on {backend}, {num_envs} envs x {steps} steps '
      f'(load now {_harness.load_now()})')
  rows = [[p, f'{compile_s[p]:.1f}', f'{sps[p]:,.0f}', f'{cps[p]:,.0f}']
          for p in PRESETS]
  _harness.flush_print(_harness.fmt_table(
      ['preset', 'first call s', 'sps (wall)', 'sps (cpu-s)'], rows))
  _harness.flush_print(
      f'ratio playground/dm_control: {sps["playground"] / sps["dm_control"]:.2f}x'
      f' wall, {cps["playground"] / cps["dm_control"]:.2f}x per cpu-s')
  rows = []
  for policy, actions in policies.items():
    out = {p: jax.device_get(fns[p](key, actions)) for p in PRESETS}
    ret = {p: np.asarray(out[p][0], np.float64).sum(0) for p in PRESETS}
    obs = {p: np.asarray(out[p][1], np.float64) for p in PRESETS}
    gap = np.abs(obs['dm_control'] - obs['playground'])
    drift = ' '.join(f'{gap[t - 1].max():.2g}' for t in DRIFT_AT if t <= steps)
    cells = [policy]
    for p in PRESETS:
      r = ret[p]
      cells.append(f'{r.mean():.1f} [{r.min():.1f}, {r.max():.1f}]')
    cells += [f'{np.abs(ret["dm_control"] - ret["playground"]).mean():.1f}',
              drift]
    rows.append(cells)
  _harness.flush_print(_harness.fmt_table(
      ['policy', 'return dm_control', 'return playground', '|diff| mean',
       'obs drift at t=' + ','.join(str(t) for t in DRIFT_AT)], rows))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--tasks', default='CartpoleSwingup,CheetahRun')
  parser.add_argument('--backend', default='mjx', choices=envs.BACKENDS)
  parser.add_argument('--envs', type=int, default=16)
  parser.add_argument('--repeats', type=int, default=2)
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  _harness.flush_print(_harness.machine_header(
      'mjx_preset: physics preset playground vs dm_control'))
  for name in args.tasks.split(','):
    _run_task(name, args.backend, args.envs, args.repeats, args.seed)
  _harness.flush_print(f'# load average at the end {_harness.load_now()}')


if __name__ == '__main__':
  main()
