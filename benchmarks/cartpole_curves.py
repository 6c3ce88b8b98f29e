"""Learning curves of the seven recipes on CartpoleSwingup (native CPU backend).

For each agent, runs `roxie train` (its default config plus `--set`
overrides) in a child process, prints every evaluation as it lands in the
run's metrics.csv, and stops the run once an evaluation reaches the threshold
(default 800) or after `--max-minutes`. Then prints a summary: env steps,
wall-clock and process CPU time at which the evaluation return first reached
the threshold, the best and last returns, and env steps/s.

CPU seconds (user + system of the training process) are the figure to compare
on a shared machine: wall-clock grows with the load, CPU time much less.
Wall-clock counts from the process start, so it includes imports and the
first compile. Each run's metrics.csv stays in `--out`.

  python benchmarks/cartpole_curves.py                      # all seven
  python benchmarks/cartpole_curves.py --agents sac,td3 --max-minutes 20
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from typing import List, Optional

from roxie.agents import AGENTS


def _read_rows(path: str) -> List[dict]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [r for r in csv.DictReader(f) if r.get('eval_return')]


def _cpu_seconds(pid: int) -> Optional[float]:
  """User + system CPU time of a live process (Linux /proc), in seconds."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except OSError:
    return None
  ticks = os.sysconf('SC_CLK_TCK')
  # After the command name: state is field 3, utime 14, stime 15 (1-based).
  return (int(fields[11]) + int(fields[12])) / ticks


def run_agent(agent: str, args) -> dict:
  out = os.path.join(args.out, f'{agent}-{args.task}-seed{args.seed}')
  if os.path.exists(out):
    shutil.rmtree(out)
  cmd = [sys.executable, '-m', 'roxie.cli', 'train', '--agent', agent,
         '--task', args.task, '--backend', args.backend, '--seed',
         str(args.seed), '--out', out, '--eval-every', str(args.eval_every),
         '--no-save-replay', '--quiet']
  if args.steps:
    cmd += ['--steps', str(args.steps)]
  for o in args.overrides:
    cmd += ['--set', o]
  metrics = os.path.join(out, 'metrics.csv')
  t0 = time.time()
  proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  seen, hit, cpu = 0, None, 0.0
  while True:
    done = proc.poll() is not None
    cpu = _cpu_seconds(proc.pid) or cpu
    rows = _read_rows(metrics)
    for r in rows[seen:]:
      ret = float(r['eval_return'])
      print(f'{agent}: env_steps={int(r["env_steps"]):>8d} '
            f'eval_return={ret:7.1f} wall={time.time() - t0:6.0f}s '
            f'cpu={cpu:6.0f}s', flush=True)
      if hit is None and ret >= args.threshold:
        hit = dict(steps=int(r['env_steps']), wall=time.time() - t0, cpu=cpu)
    seen = len(rows)
    if done:
      break
    if hit is not None or time.time() - t0 > 60 * args.max_minutes:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
      break
    time.sleep(2.0)
  err = proc.stderr.read() if proc.stderr else ''
  returns = [float(r['eval_return']) for r in rows]
  sps = [float(r['sps']) for r in rows if r.get('sps')]
  failed = proc.returncode not in (0, -signal.SIGKILL)
  if failed:
    print(f'{agent}: failed (exit {proc.returncode}): {err.strip()[-500:]}')
  return dict(agent=agent, hit=hit, best=max(returns, default=float('nan')),
              last=returns[-1] if returns else float('nan'),
              steps=int(rows[-1]['env_steps']) if rows else 0,
              sps=sps[-1] if sps else float('nan'), cpu=cpu,
              wall=time.time() - t0, failed=failed)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--agents', default=','.join(AGENTS))
  p.add_argument('--task', default='CartpoleSwingup')
  p.add_argument('--backend', default='cpu', choices=('cpu', 'mjx'))
  p.add_argument('--steps', type=int, default=None,
                 help='env step budget per run (default: each config\'s)')
  p.add_argument('--threshold', type=float, default=800.0)
  p.add_argument('--max-minutes', type=float, default=30.0,
                 help='wall-clock cap per run')
  p.add_argument('--eval-every', type=int, default=10_000)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--out', default='runs/curves')
  p.add_argument('--set', dest='overrides', action='append', default=[])
  args = p.parse_args()
  print(f'# {platform.processor() or platform.machine()}, {os.cpu_count()} '
        f'cores, load average {os.getloadavg()[0]:.1f}', flush=True)
  results = [run_agent(a, args) for a in args.agents.split(',')]
  print(f'# load average at the end {os.getloadavg()[0]:.1f}')
  thr = int(args.threshold)
  print(f'\n{"agent":6s} {f"steps to {thr}":>14s} {"wall s":>7s} '
        f'{"cpu s":>7s} {"best":>7s} {"last":>7s} {"steps run":>9s} '
        f'{"sps":>7s} {"cpu s run":>9s}')
  for r in results:
    h = r['hit']
    to_hit = (f'{h["steps"]:>14d} {h["wall"]:7.0f} {h["cpu"]:7.0f}' if h else
              f'{"not reached":>14s} {"-":>7s} {"-":>7s}')
    print(f'{r["agent"]:6s} {to_hit} {r["best"]:7.1f} {r["last"]:7.1f} '
          f'{r["steps"]:9d} {r["sps"]:7.0f} {r["cpu"]:9.0f}'
          + ('  FAILED' if r['failed'] else ''))

if __name__ == '__main__':
  main()
