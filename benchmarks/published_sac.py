"""The State SAC the DMC tables cite, from its authors' own result file.

CURL's Table 1 (arXiv 2004.04136) and DrQ's Table 1 (arXiv 2004.13649) both
compare against a "State SAC". DrQ's is Denis Yarats's pytorch_sac
(github.com/denisyarats/pytorch_sac), whose repository publishes every
evaluation of its DeepMind Control runs in `data/sac.csv`. Its protocol is
not the pixel agents': no action repeat (dmc2gym's default frame skip of 1,
as its author confirms in denisyarats/drq issue 14), one gradient update per
env step after 5,000 uniform steps, 1024-unit layers, batch 1024, learning
rates 1e-4, critic target tau 0.005 every second update
(`config/agent/sac.yaml`). So 100k env steps there are ~95k updates, where
roxie's defaults make 6k-25k (action repeat 8 to 2, one update per two agent
steps).

This script reads that file and prints, for the six standard tasks, each
budget's evaluation (the mean return of 10 episodes logged at that env
step) per seed, their mean, and CURL's figure beside it:

  git clone https://github.com/denisyarats/pytorch_sac
  python benchmarks/published_sac.py pytorch_sac/data/sac.csv

The task list and CURL's figures are dmc.py's and dmc_report.py's (the
ones DMC.md is judged against); each task's dm_control name comes from
roxie's task registry. Exit status 2 on a file it cannot read (missing, or
without the columns env / seed / step / episode_reward).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
from typing import Dict, List, Mapping, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # dmc_report.py is a sibling script.
  sys.path.insert(0, HERE)

# dmc_report puts this checkout's roxie on the path.
import dmc_report  # pylint: disable=g-import-not-at-top,wrong-import-position
from roxie.envs import tasks as roxie_tasks  # pylint: disable=g-import-not-at-top,wrong-import-position

REQUIRED = ('env', 'seed', 'step', 'episode_reward')

# {env: {step: {seed: return}}}
Evaluations = Dict[str, Dict[int, Dict[str, float]]]


def read(path: str) -> Evaluations:
  """Every evaluation in a pytorch_sac result CSV.

  Raises:
    ValueError: when a required column is missing.
  """
  out: Evaluations = {}
  with open(path, newline='') as f:
    reader = csv.DictReader(f)
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
      raise ValueError(f'{path} has no column(s) {", ".join(missing)}; '
                       'expected pytorch_sac\'s data/sac.csv')
    for row in reader:
      step = int(float(row['step']))
      out.setdefault(row['env'], {}).setdefault(step, {})[row['seed']] = (
          float(row['episode_reward']))
  return out


def table(evals: Evaluations, budgets: Sequence[int]
          ) -> List[Tuple[str, int, List[float], float, int]]:
  """(task, budget, per-seed returns, their mean, CURL's figure) rows.

  A task or budget the file lacks gets no row; CURL's figure is -1 at a
  budget other than 100k and 500k.
  """
  rows = []
  for name in dmc_report.dmc.STANDARD_TASKS:
    for budget in budgets:
      seeds: Mapping[str, float] = evals.get(dm_control_name(name), {}).get(
          budget, {})
      if not seeds:
        continue
      returns = [seeds[s] for s in sorted(seeds)]
      ref = dmc_report.REFERENCE.get(budget, {}).get(name, -1)
      rows.append((name, budget, returns, statistics.fmean(returns), ref))
  return rows


def dm_control_name(task: str) -> str:
  """A roxie task's dm_control name: BallInCup -> ball_in_cup_catch."""
  t = roxie_tasks.get_task(task)
  return f'{t.domain}_{t.dmc_task}'


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('csv', help="pytorch_sac's data/sac.csv")
  parser.add_argument('--budgets', default='100000,500000',
                      help='comma-separated env steps (default 100k, 500k)')
  args = parser.parse_args(argv)
  try:
    budgets = [int(b) for b in args.budgets.split(',')]
    evals = read(args.csv)
  except (OSError, ValueError) as e:
    print(f'published_sac.py: {e}', file=sys.stderr)
    return 2
  print('| task | env steps | seeds | per seed | mean | CURL State SAC |')
  print('|---|---:|---:|---|---:|---:|')
  for name, budget, returns, mean, ref in table(evals, budgets):
    per_seed = ' / '.join(f'{r:.0f}' for r in returns)
    print(f'| {name} | {budget:,} | {len(returns)} | {per_seed} | '
          f'{mean:.0f} | {ref if ref >= 0 else "-"} |')
  return 0


if __name__ == '__main__':
  sys.exit(main())
