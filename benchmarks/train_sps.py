"""End-to-end training throughput of the compiled loop, with compile times.

For every recipe in `roxie.agents.AGENTS` (one that fails to import or build
is skipped with the reason printed) and each backend ('cpu': native MuJoCo
through `mujoco.batch`; 'mjx': MuJoCo MJX in JAX), builds
`roxie.loops.make_compiled_loop(recipe, env, iterations=K)` and reports

  init s      first call of the jitted `init` (tracing, compiling and running
              the env reset and the replay allocation);
  compile s   tracing + lowering + compiling the loop's `run` program;
  first s     init s + compile s: the wait before training starts (the
              target is <= 30 s for SAC on the native backend on 2 cores);
              "first cpu s" is the same in process CPU seconds, a figure that
              other processes' load on a shared machine does not inflate;
  sps         env steps/s (all envs together; control steps, so a recipe
              whose Config sets action_repeat counts every repeated step, as
              `roxie.run.train` does) of `run` in the learning phase,
              timed over `--calls` calls after one warm-up call, including
              every gradient step; the uniform-action warm-up is set to 0 so
              that every timed iteration collects AND learns (at the default
              settings warm-up would skip updates for the first 5,000 steps);
  upd/s       gradient steps per second (off-policy: updates_per_iteration per
              iteration; PPO: epochs x minibatches per rollout).

Observations (`--obs`):
  state       the flat state vector (default);
  pixels      rendered camera frames (`--resolution`, frame stack 3, the
              native backend renders in its step callback, MJX on the host
              from its state), with each recipe's PIXEL_DEFAULTS applied
              (roxie train --obs pixels: 4 envs, action repeat 8, batch 128,
              conv encoder); recipes without them (PPO) are skipped;
  pixels+state  both.

Settings:
  default     each recipe's default Config (the 2-core CPU defaults: 8-16
              envs, batch 256, ...);
  --large     the published large-scale settings (shared/REFERENCES.md: 1024
              envs, batch 512, 20 gradient steps per 2,048 env steps, n-step
              5, replay 500k, 101-atom categorical critics on [-5, 120], MPO
              with 20 action samples, PPO 32 x 1024 rollouts with 5 epochs x 4
              minibatches). Slow on 2 cores: `--large-iterations` scales the
              timed budget down (the per-step cost is what is measured).

  python benchmarks/train_sps.py --quick
  python benchmarks/train_sps.py --task CheetahRun --backends cpu
  python benchmarks/train_sps.py --large --task CheetahRun --agents sac,ppo
  python benchmarks/train_sps.py --obs pixels --agents sac,ddpg --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import traceback

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # pylint: disable=g-import-not-at-top

import _harness as H  # pylint: disable=g-import-not-at-top
from roxie import envs, loops

_OFF_POLICY_LARGE = dict(
    num_envs=1024, steps_per_iteration=2, updates_per_iteration=20,
    batch_size=512, n_step=5, replay_capacity=500_000, warmup_steps=10_000,
    max_grad_norm=1.0, hidden_sizes=(256, 256), layer_norm=True,
    actor_lr=3e-4, critic_lr=3e-4, policy_lr=3e-4, discount=0.99, tau=0.005,
    noise_start=0.4, noise_end=0.1)
LARGE = {
    'ddpg': _OFF_POLICY_LARGE,
    'td3': dict(_OFF_POLICY_LARGE, policy_delay=2, target_noise=0.2,
                target_noise_clip=0.5),
    'sac': _OFF_POLICY_LARGE,
    'd4pg': dict(_OFF_POLICY_LARGE, num_atoms=101, v_min=-5., v_max=120.),
    'td4': dict(_OFF_POLICY_LARGE, num_atoms=101, v_min=-5., v_max=120.,
                policy_delay=2, target_noise=0.2, target_noise_clip=0.5),
    'mpo': dict(_OFF_POLICY_LARGE, num_samples=20, epsilon=0.1,
                epsilon_mean=1e-3, epsilon_std=1e-5, dual_lr=1e-2),
    'ppo': dict(num_envs=1024, rollout_length=32, num_epochs=5,
                num_minibatches=4, clip_epsilon=0.2, gae_lambda=0.95,
                entropy_coef=0.002),
}


def config_for(module, name: str, large: bool, obs: str = 'state'):
  """(Config, RunDefaults): default, or with the published settings applied.

  From pixels the recipe's PIXEL_DEFAULTS apply first (as `roxie train --obs
  pixels`); a recipe without them raises `roxie.run.RunError`. The number
  of envs and the action repeat are run settings (`roxie.types.RunDefaults`).
  """
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  overrides = {}
  if obs != 'state':
    overrides.update(run_lib.pixel_defaults(name))
  if large:
    names = set(config_lib.field_names(module.Config))
    overrides.update({k: v for k, v in LARGE[name].items()
                      if k in names or k in run_lib.RUN_SETTINGS})
  fields = run_lib.split_overrides(overrides)[1]
  return (config_lib.apply_overrides(module.Config(), fields),
          run_lib.resolve_run_defaults(module, overrides))


def measure(name: str, backend: str, args):
  from roxie import agents  # pylint: disable=g-import-not-at-top
  module = agents.get_agent(name)
  cfg, run_defaults = config_for(module, name, args.large, args.obs)
  if hasattr(cfg, 'warmup_steps'):
    # Time the learning phase: every timed iteration collects and learns.
    cfg = dataclasses.replace(cfg, warmup_steps=0)
  num_envs = run_defaults.num_envs
  repeat = run_defaults.action_repeat  # As roxie.run.train does off the table.
  pixels = None
  if args.obs != 'state':
    from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
    pixels = run_lib.env_kwargs({'pixels': run_lib.pixel_options(
        args.obs, resolution=(args.resolution,) * 2)})['pixels']
  env = envs.make(args.task, backend=backend, num_envs=num_envs,
                  action_repeat=repeat, pixels=pixels)
  recipe = module.make(cfg, env.spec)
  # Control steps (what env steps/s counts), as roxie.run.train counts them.
  per_iter = loops.env_steps_per_iteration(recipe, num_envs) * repeat
  budget = args.steps if not args.large else args.large_iterations * per_iter
  iterations = max(1, budget // (per_iter * args.calls))
  if recipe.on_policy:
    grads_per_iter = cfg.num_epochs * cfg.num_minibatches
  else:
    grads_per_iter = recipe.updates_per_iteration

  with H.Stopwatch() as t_init:
    init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
    state = init(jax.random.PRNGKey(0))
    jax.block_until_ready(state)
  with H.Stopwatch() as t_compile:
    compiled = run.lower(state).compile()

  state, out = compiled(state)  # warm-up call (also fills replay a little)
  jax.block_until_ready((state, out))
  updates = 0
  with H.Stopwatch() as t_run:
    for _ in range(args.calls):
      state, out = compiled(state)
      updates += int(out.updates)  # one small host read per call, as train
    jax.block_until_ready(state)
  steps = args.calls * iterations * per_iter
  learned = updates == args.calls * iterations
  return dict(agent=name, backend=backend, envs=num_envs, repeat=repeat,
              batch=getattr(cfg, 'batch_size', '-'),
              per_call=iterations * per_iter, init_s=t_init.wall,
              compile_s=t_compile.wall,
              first_cpu=t_init.cpu + t_compile.cpu, sps=steps / t_run.wall,
              cpu_us=1e6 * t_run.cpu / steps,
              ups=args.calls * iterations * grads_per_iter / t_run.wall,
              learned=learned)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--task', default='CartpoleSwingup')
  parser.add_argument('--agents', default=None,
                      help='comma-separated (default: all of roxie.agents)')
  parser.add_argument('--backends', default='cpu,mjx')
  parser.add_argument('--steps', type=int, default=8192,
                      help='env steps per timed call set (default settings)')
  parser.add_argument('--calls', type=int, default=3,
                      help='timed calls of run (after one warm-up call)')
  parser.add_argument('--large', action='store_true',
                      help='the published large-scale settings')
  parser.add_argument('--large-iterations', type=int, default=3,
                      help='--large: loop iterations timed in all (each is '
                      '2,048 env steps off-policy, 32,768 for PPO)')
  parser.add_argument('--obs', default='state',
                      choices=('state', 'pixels', 'pixels+state'),
                      help='observations (pixels: the PIXEL_DEFAULTS apply)')
  parser.add_argument('--resolution', type=int, default=64,
                      help='--obs pixels: square frame size (default 64)')
  parser.add_argument('--quick', action='store_true',
                      help='small budgets; MJX for sac and ppo only')
  args = parser.parse_args(argv)
  from roxie import agents  # pylint: disable=g-import-not-at-top
  names = args.agents.split(',') if args.agents else list(agents.AGENTS)
  backends = [b for b in args.backends.split(',') if b]
  mjx_names = names
  if args.quick:
    args.steps = min(args.steps, 2048)
    args.calls = min(args.calls, 2)
    args.large_iterations = min(args.large_iterations, 2)
    if not args.agents:
      mjx_names = [n for n in names if n in ('sac', 'ppo')]
  cache = jax.config.jax_compilation_cache_dir
  print(H.machine_header(
      f'train_sps: compiled loop end to end, task {args.task}, '
      f'{"published large" if args.large else "default CPU"} settings, '
      f'observations: {args.obs}'
      f'{f" {args.resolution}x{args.resolution}" if args.obs != "state" else ""}',
      [f'persistent compilation cache: {cache or "off"} (compile times are '
       'cold only when off)',
       f'timed: {args.calls} calls after 1 warm-up call; uniform-action '
       'warm-up set to 0 (learning phase)']), flush=True)
  rows = []
  for backend in backends:
    for name in (mjx_names if backend == 'mjx' else names):
      t0 = time.perf_counter()
      try:
        r = measure(name, backend, args)
      except Exception as e:  # an agent still being written: report, go on
        print(f'  {name}/{backend}: SKIPPED ({type(e).__name__}: {e})',
              flush=True)
        if os.environ.get('ROXIE_BENCH_DEBUG'):
          traceback.print_exc()
        continue
      first = r['init_s'] + r['compile_s']
      target = '-'
      if name == 'sac' and backend == 'cpu':
        target = f'{"yes" if first <= 30 else "NO"} (<=30 s)'
      print(f'  {name}/{backend}: {r["envs"]} envs, {r["sps"]:,.0f} env '
            f'steps/s, {r["ups"]:,.1f} grad steps/s, init {r["init_s"]:.1f} s '
            f'+ compile {r["compile_s"]:.1f} s [{time.perf_counter() - t0:.0f}'
            f' s, load {H.load_now()}]', flush=True)
      if not r['learned']:
        print(f'    note: not every timed iteration learned', flush=True)
      rows.append([name, backend, str(r['envs']), str(r['repeat']),
                   str(r['batch']),
                   f'{r["per_call"]:,}',
                   f'{r["sps"]:,.0f}', f'{r["cpu_us"]:,.1f}',
                   f'{r["ups"]:,.1f}', f'{r["init_s"]:.1f}',
                   f'{r["compile_s"]:.1f}', f'{first:.1f}',
                   f'{r["first_cpu"]:.1f}', target])
  print()
  print('cpu us/step and first cpu s: process CPU time (all threads), which '
        "other processes' load does not inflate")
  print(H.fmt_table(['agent', 'backend', 'envs', 'repeat', 'batch',
                     'steps/call',
                     'env steps/s',
                     'cpu us/step', 'grad steps/s', 'init s', 'compile s',
                     'first s', 'first cpu s', 'target'], rows))
  by = {(r[0], r[1]): r for r in rows}
  ratios = []
  for name in names:
    if (name, 'cpu') in by and (name, 'mjx') in by:
      c = float(by[(name, 'cpu')][6].replace(',', ''))
      m = float(by[(name, 'mjx')][6].replace(',', ''))
      ratios.append(f'{name} {c / m:.2f}x' if m > 0 else f'{name} -')
  if ratios:
    print('native / mjx env steps/s: ' + ', '.join(ratios))
  print(f'\nload average at end: {H.load_now()}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
