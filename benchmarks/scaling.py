"""Scaling: cost per env step as num_envs grows, update cost as batch grows.

Three curves, measured in one run:

  env      us per env step (wall-clock per scan step / num_envs) of the
           environment alone, stepped with uniform random actions inside a
           jitted `lax.scan`, full env semantics (auto-reset, observation,
           reward); native backend ('cpu', mujoco.batch with all cores), and
           MJX with `--mjx`;
  loop     us per env step of the whole compiled training loop for PPO (the
           recipe whose work per env step does not depend on num_envs:
           rollout_length 32, 4 epochs x 4 minibatches), collection and
           learning included, at the same num_envs;
  update   ms per SAC update (and us per sample) as the batch grows, on
           CheetahRun-like shapes, 20 updates per program in a `lax.scan`
           (see update_cost.py).

Prints the tables, writes the figures to JSON (`--json`) and, where
matplotlib is importable, a PNG (`--png`; Agg backend). Without matplotlib it
says so and skips the PNG; the JSON can be plotted later by any interpreter
that has matplotlib (it needs neither jax nor roxie):

  python benchmarks/scaling.py --quick
  python benchmarks/scaling.py --mjx --envs 16,64,256,1024
  python benchmarks/scaling.py --plot-from scaling.json --png scaling.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as H  # pylint: disable=g-import-not-at-top


def env_curve(task, backend, env_counts, budget_steps, repeats):
  """[(num_envs, us per env step, compile s)] of the env alone."""
  import jax  # pylint: disable=g-import-not-at-top
  from roxie import envs  # pylint: disable=g-import-not-at-top
  out = []
  for n in env_counts:
    env = envs.make(task, backend=backend, num_envs=n)
    steps = max(4, budget_steps // n)
    actions = jax.random.uniform(jax.random.PRNGKey(0),
                                 (steps, n, env.spec.action_size),
                                 minval=-1., maxval=1.)

    def run(state, actions, env=env):
      def body(s, a):
        s, ts = env.step(s, a)
        return s, ts.reward
      state, r = jax.lax.scan(body, state, actions)
      return state, r.sum()
    state = jax.jit(env.reset)(jax.random.PRNGKey(1))
    t0 = time.perf_counter()
    compiled = jax.jit(run).lower(state, actions).compile()
    compile_s = time.perf_counter() - t0
    box = [state]

    def call(compiled=compiled, actions=actions, box=box):
      box[0], total = compiled(box[0], actions)
      jax.block_until_ready(total)
    t = H.interleaved([call], repeats)[0]
    us = 1e6 * H.median(t) / (steps * n)
    out.append((n, us, compile_s))
    print(f'  env {backend} {task} {n:5d} envs: {us:8.2f} us/env step '
          f'({1e6 / us:,.0f} steps/s), compile {compile_s:.1f} s [load '
          f'{H.load_now()}]', flush=True)
  return out


def loop_curve(task, backend, env_counts, budget_steps, repeats):
  """[(num_envs, us per env step, compile s)] of PPO's compiled loop."""
  import jax  # pylint: disable=g-import-not-at-top
  from roxie import envs, loops  # pylint: disable=g-import-not-at-top
  from roxie.agents import ppo  # pylint: disable=g-import-not-at-top
  out = []
  for n in env_counts:
    cfg = ppo.Config(rollout_length=32, num_epochs=4, num_minibatches=4)
    env = envs.make(task, backend=backend, num_envs=n)
    recipe = ppo.make(cfg, env.spec)
    per_iter = loops.env_steps_per_iteration(recipe, n)
    iterations = max(1, budget_steps // per_iter)
    init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
    state = init(jax.random.PRNGKey(0))
    t0 = time.perf_counter()
    compiled = run.lower(state).compile()
    compile_s = time.perf_counter() - t0
    box = [state]

    def call(compiled=compiled, box=box):
      box[0], o = compiled(box[0])
      jax.block_until_ready((box[0], o))
    t = H.interleaved([call], repeats)[0]
    us = 1e6 * H.median(t) / (iterations * per_iter)
    out.append((n, us, compile_s))
    print(f'  loop ppo {backend} {task} {n:5d} envs: {us:8.2f} us/env step '
          f'({1e6 / us:,.0f} steps/s), compile {compile_s:.1f} s [load '
          f'{H.load_now()}]', flush=True)
  return out


def update_curve(batch_sizes, updates, repeats):
  """[(batch, ms per update, us per sample)] of SAC's update."""
  import jax  # pylint: disable=g-import-not-at-top
  import update_cost as U  # pylint: disable=g-import-not-at-top
  from roxie.agents import sac  # pylint: disable=g-import-not-at-top
  out = []
  for bs in batch_sizes:
    recipe = sac.make(sac.Config(batch_size=bs), U.SPEC)
    state = jax.jit(lambda k, r=recipe: r.init(k, U.SPEC))(
        jax.random.PRNGKey(0))
    batches = U.synthetic_transitions(jax.random.PRNGKey(1), updates, bs)
    _, call = U.compile_and_runner(U.scanned(recipe.update), state, batches,
                                   jax.random.PRNGKey(2))
    t = H.interleaved([call], repeats)[0]
    ms = 1e3 * H.median(t) / updates
    out.append((bs, ms, 1e3 * ms / bs))
    print(f'  update sac batch {bs:5d}: {ms:8.3f} ms/update, '
          f'{1e3 * ms / bs:6.2f} us/sample [load {H.load_now()}]', flush=True)
  return out


def plot(data, png):
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    print(f'matplotlib is not installed here: PNG skipped ({png}); '
          'plot the JSON later with --plot-from.')
    return False
  fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
  for name, curve in data['curves'].items():
    if curve:
      xs, ys = zip(*[(c[0], c[1]) for c in curve])
      a.plot(xs, ys, 'o-', label=name)
  a.set_xscale('log', base=2)
  a.set_yscale('log')
  a.set_xlabel('num_envs')
  a.set_ylabel('us per env step (wall)')
  a.set_title(f'{data["task"]}: cost per env step')
  a.grid(True, which='both', alpha=0.3)
  a.legend(fontsize=8)
  if data['update']:
    xs, ms, us = zip(*data['update'])
    b.plot(xs, ms, 'o-', color='C3', label='ms per update')
    b.set_xscale('log', base=2)
    b.set_yscale('log')
    b.set_xlabel('batch size')
    b.set_ylabel('ms per SAC update')
    b2 = b.twinx()
    b2.plot(xs, us, 's--', color='C4', label='us per sample')
    b2.set_ylabel('us per sample')
    b.set_title('SAC update cost vs batch (obs 17, act 6)')
    b.grid(True, which='both', alpha=0.3)
    b.legend(loc='upper left', fontsize=8)
    b2.legend(loc='upper right', fontsize=8)
  fig.suptitle(data.get('machine', ''), fontsize=8)
  fig.tight_layout()
  fig.savefig(png, dpi=110)
  print(f'wrote {png}')
  return True


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--task', default='CheetahRun')
  parser.add_argument('--envs', default='16,32,64,128,256,512,1024')
  parser.add_argument('--batches', default='64,128,256,512,1024,2048')
  parser.add_argument('--budget', type=int, default=32_768,
                      help='env steps per timed call')
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--mjx', action='store_true',
                      help='also the MJX backend (slow compiles on a CPU)')
  parser.add_argument('--no-loop', action='store_true')
  parser.add_argument('--json', default='scaling.json')
  parser.add_argument('--png', default='scaling.png')
  parser.add_argument('--plot-from', default=None,
                      help='only plot a JSON written earlier')
  parser.add_argument('--quick', action='store_true')
  args = parser.parse_args(argv)
  if args.plot_from:
    with open(args.plot_from) as f:
      plot(json.load(f), args.png)
    return 0
  if args.quick:
    args.envs = '16,64,256,1024'
    args.batches = '64,256,1024'
    args.budget = min(args.budget, 16_384)
    args.repeats = min(args.repeats, 3)
  env_counts = [int(x) for x in args.envs.split(',') if x]
  batch_sizes = [int(x) for x in args.batches.split(',') if x]
  header = H.machine_header(
      f'scaling: {args.task}, num_envs {env_counts}, SAC batch {batch_sizes}',
      [f'{args.budget:,} env steps per timed call, median of {args.repeats}'])
  print(header, flush=True)
  curves = {f'env native ({args.task})': env_curve(
      args.task, 'cpu', env_counts, args.budget, args.repeats)}
  if args.mjx:
    curves[f'env mjx ({args.task})'] = env_curve(
        args.task, 'mjx', env_counts, max(1024, args.budget // 16),
        args.repeats)
  if not args.no_loop:
    curves[f'PPO loop native ({args.task})'] = loop_curve(
        args.task, 'cpu', env_counts, args.budget, args.repeats)
  update = update_curve(batch_sizes, 20 if not args.quick else 10,
                        args.repeats)

  print()
  names = list(curves)
  rows = []
  for i, n in enumerate(env_counts):
    row = [str(n)]
    for name in names:
      us = curves[name][i][1]
      row += [f'{us:.2f}', f'{1e6 / us:,.0f}']
    rows.append(row)
  head = ['num_envs']
  for name in names:
    head += [f'{name} us/step', 'steps/s']
  print(H.fmt_table(head, rows))
  for name in names:
    c = curves[name]
    print(f'{name}: per-step cost at {c[-1][0]} envs is '
          f'{c[-1][1] / c[0][1]:.2f}x that at {c[0][0]} envs')
  print()
  print(H.fmt_table(['batch', 'ms/update', 'us/sample'],
                    [[str(b), f'{ms:.3f}', f'{us:.2f}'] for b, ms, us in
                     update]))
  if len(update) > 1:
    print(f'us/sample at batch {update[-1][0]} is '
          f'{update[-1][2] / update[0][2]:.2f}x that at batch {update[0][0]}')
  machine = header.splitlines()[1]
  data = dict(task=args.task, machine=machine, curves=curves, update=update)
  with open(args.json, 'w') as f:
    json.dump(data, f, indent=1)
  print(f'wrote {args.json}')
  plot(data, args.png)
  print(f'\nload average at end: {H.load_now()}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
