"""Learning curves of the seven recipes on CartpoleSwingup (native CPU backend).

For each agent, trains with its default config (plus `--set` overrides) and
prints every evaluation, then a summary: env steps and wall-clock at which
the evaluation return first reached the threshold (default 800), the final
return, and env steps/s. Each run's metrics.csv stays in `--out`.

  python benchmarks/cartpole_curves.py                      # all seven, defaults
  python benchmarks/cartpole_curves.py --agents sac,td3 --steps 150000
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import time

from roxie import run
from roxie.agents import AGENTS


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--agents', default=','.join(AGENTS))
  p.add_argument('--task', default='CartpoleSwingup')
  p.add_argument('--backend', default='cpu', choices=('cpu', 'mjx'))
  p.add_argument('--steps', type=int, default=None,
                 help='env steps per run (default: each config\'s)')
  p.add_argument('--threshold', type=float, default=800.0)
  p.add_argument('--eval-every', type=int, default=10_000)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--out', default='runs/curves')
  p.add_argument('--set', dest='overrides', action='append', default=[])
  args = p.parse_args()
  print(f'# {platform.processor() or platform.machine()}, {os.cpu_count()} '
        f'cores, load average {os.getloadavg()[0]:.1f}')
  summary = []
  for agent in args.agents.split(','):
    out = os.path.join(args.out, f'{agent}-{args.task}-seed{args.seed}')
    overrides = dict(o.split('=', 1) for o in args.overrides)
    t0 = time.time()
    try:
      result = run.train(agent, args.task, backend=args.backend,
                         steps=args.steps, seed=args.seed, out=out,
                         overrides=overrides, eval_every=args.eval_every)
    except Exception as e:  # Report and go on with the other agents.
      print(f'{agent}: failed: {e}')
      summary.append((agent, None, None, float('nan'), 0.0))
      continue
    with open(os.path.join(out, 'metrics.csv')) as f:
      rows = list(csv.DictReader(f))
    hit = next((r for r in rows
                if float(r['eval_return']) >= args.threshold), None)
    summary.append((agent, hit and int(hit['env_steps']),
                    hit and float(hit['wall_time']), result.eval_return,
                    result.sps))
    print(f'{agent}: done in {time.time() - t0:.0f}s')
  print(f'\n{"agent":6s} {"steps to " + str(int(args.threshold)):>14s} '
        f'{"wall s to it":>12s} {"final return":>12s} {"env steps/s":>11s}')
  for agent, steps, wall, final, sps in summary:
    print(f'{agent:6s} {steps if steps else "not reached":>14} '
          f'{f"{wall:.0f}" if wall else "-":>12s} {final:12.1f} {sps:11.0f}')


if __name__ == '__main__':
  main()
