"""A run's own metrics on its critic: logged Q beside the value of its return.

When a DMC cell falls short, the first question is whether the critic or the
policy holds it back. This prints, for each run directory under `--runs`
(any `roxie train` run: `config.json` and `metrics.csv`; dmc.py's runs are
these), at each evaluation `--every` env steps and at the last one:

  return   the evaluation return (deterministic policy, whole episodes);
  q        the recipe's logged `q`: the mean critic value of the replay
           batch's state-action pairs over the last training call (SAC's
           is the soft value, entropy bonus included);
  v_ret    return x action_repeat / episode_length / (1 - discount): the
           discounted value of a policy that earns its evaluation return at
           an even rate per agent step;
  q/v_ret  their ratio.

A critic level with its policy sits a little under 1 (the replay holds older,
worse behaviour, and the behaviour policy explores); far under 1 and rising,
the critic lags the policy; far over 1, it overestimates, or starts high (a
categorical critic begins at its support's midpoint). v_ret assumes an even
reward rate, so read the ratio on tasks whose reward comes steadily
(FingerSpin, CheetahRun, WalkerWalk), not early in sparse ones.

  python benchmarks/dmc_metrics.py --runs runs/dmc --agents ddpg,d4pg \\
      --tasks FingerSpin --every 100000 --columns noise_std
  python benchmarks/dmc_metrics.py --runs runs/dmc --at 100000,500000

With `--at`, one markdown row per (folder, agent, task) and step: the seeds'
mean return, q and v_ret at the evaluations dmc.py takes for that budget
(the nearest, once the run is past it; within 5%), and each seed's q/v_ret.

Exit status 2 on bad input (no such directory, no run matching, a column no
matching run logs, no evaluation near an --at step); it writes nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dmc  # pylint: disable=g-import-not-at-top,wrong-import-position

# How far from an --at step an evaluation may land and still count: 5%
# (evaluations land where a compiled call ends, e.g. at 96k for 100k).
NEAR = 0.05


def find_runs(root: str) -> List[str]:
  """Run directories under root (root itself included), sorted."""
  found = []
  for path, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if d != 'checkpoints']
    if 'config.json' in files and 'metrics.csv' in files:
      found.append(path)
  return sorted(found)


def value_of_return(eval_return: float, action_repeat: int,
                    episode_length: int, discount: float) -> float:
  """Discounted value of earning eval_return evenly over an episode."""
  per_agent_step = eval_return * action_repeat / episode_length
  return per_agent_step / (1.0 - discount)


def read_config(run_dir: str) -> dict:
  """A run's config.json; a UsageError naming it when it is not readable."""
  path = os.path.join(run_dir, 'config.json')
  try:
    with open(path) as f:
      config = json.load(f)
    float(config['config']['discount'])
    str(config['agent']), str(config['task'])
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise dmc.UsageError(
        f'{path} is not a readable roxie run config ({e!r}); move that '
        'folder aside or pass --runs a folder without it') from None
  return config


def run_table(run_dir: str, config: dict, columns: Sequence[str],
              root: Optional[str] = None) -> Dict[str, object]:
  """Every evaluation of one run (its `read_config`), named by its path
  under root."""
  from roxie.envs import tasks  # pylint: disable=g-import-not-at-top
  task = config['task']
  options = config.get('env_options') or {}
  action_repeat = int(options.get('action_repeat', 1))
  episode_length = int(options.get('episode_length')
                       or tasks.get_task(task).episode_length)
  discount = float(config['config']['discount'])
  evals = dmc._metrics(run_dir)  # pylint: disable=protected-access
  rows = []
  for r in evals:
    ret = dmc.float_or_nan(r['eval_return'])
    q = dmc.float_or_nan(r.get('q'))
    v = value_of_return(ret, action_repeat, episode_length, discount)
    row = {'env_steps': int(r['env_steps']), 'return': ret, 'q': q,
           'v_ret': v, 'q/v_ret': q / v if v > 0 else math.nan}
    for name in columns:
      row[name] = dmc.float_or_nan(r.get(name))
    rows.append(row)
  name = os.path.relpath(run_dir, root) if root else os.path.basename(run_dir)
  return {'run': name, 'agent': config['agent'],
          'task': task, 'action_repeat': action_repeat, 'discount': discount,
          'logged': set(evals[0]) if evals else set(), 'rows': rows}


def every(rows: Sequence[dict], stride: int) -> List[dict]:
  """The first row in each stretch of `stride` env steps, and the last."""
  stretch = lambda r: r['env_steps'] // stride
  return [r for i, r in enumerate(rows)
          if i in (0, len(rows) - 1) or stretch(r) != stretch(rows[i - 1])]


def nearest(rows: Sequence[dict], step: int,
            tolerance: float = NEAR) -> Optional[dict]:
  """The row dmc.py would take for a `step` budget, if within `tolerance`.

  dmc.py's own rule (`dmc.budget_evaluation`), so the readings at 100k and
  500k are those of the evaluations that gave dmc.csv's rows.
  """
  best = dmc.budget_evaluation(rows, step)
  if best is None or abs(best['env_steps'] - step) > tolerance * step:
    return None
  return best


def summary(tables: Sequence[Dict[str, object]], steps: Sequence[int]
            ) -> List[Dict[str, object]]:
  """Seeds of one (folder, agent, task) together, at each of `steps`.

  Runs are grouped by the folder that holds them (dmc.py keeps a variant's
  runs in a folder of its own) with their agent and task; a run counts at a
  step when it has the evaluation dmc.py would take there (`nearest`).
  """
  groups: Dict[tuple, list] = {}
  for t in tables:
    key = (os.path.dirname(t['run']) or '.', t['agent'], t['task'])
    groups.setdefault(key, []).append(t)
  out = []
  for (folder, agent, task), members in sorted(groups.items()):
    for step in steps:
      picked = [(t['run'], nearest(t['rows'], step)) for t in members]
      picked = [(run, r) for run, r in picked if r is not None]
      if not picked:
        continue
      mean = lambda k: sum(r[k] for _, r in picked) / len(picked)
      out.append({'folder': folder, 'agent': agent, 'task': task,
                  'env_steps': step, 'seeds': len(picked),
                  'return': mean('return'), 'q': mean('q'),
                  'v_ret': mean('v_ret'),
                  'q/v_ret per run': '/'.join(
                      _text(r['q/v_ret']) for _, r in picked)})
  return out


def _text(value: object) -> str:
  if isinstance(value, float):
    if math.isnan(value):
      return '-'
    return f'{value:.2f}' if abs(value) < 10 else f'{value:.1f}'
  return str(value)


def format_table(table: Dict[str, object], columns: Sequence[str],
                 stride: int) -> str:
  head = ['env_steps', 'return', 'q', 'v_ret', 'q/v_ret', *columns]
  lines = [f"{table['run']} ({table['agent']} {table['task']}, action repeat "
           f"{table['action_repeat']}, discount {table['discount']})",
           '  ' + '  '.join(f'{h:>9}' for h in head)]
  for row in every(table['rows'], stride):
    lines.append('  ' + '  '.join(f'{_text(row[h]):>9}' for h in head))
  return '\n'.join(lines)


def format_summary(rows: Sequence[Dict[str, object]]) -> str:
  head = ['folder', 'agent', 'task', 'env_steps', 'seeds', 'return', 'q',
          'v_ret', 'q/v_ret per run']
  lines = ['| ' + ' | '.join(head) + ' |',
           '|' + '|'.join('---' if i < 3 else '---:' for i in range(len(head)))
           + '|']
  for row in rows:
    lines.append('| ' + ' | '.join(_text(row[h]) for h in head) + ' |')
  return '\n'.join(lines)


def parse_args(argv=None):
  p = argparse.ArgumentParser(
      description=__doc__.split('\n', 1)[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--runs', required=True,
                 help='a run directory, or a folder holding run directories')
  p.add_argument('--agents', default='', help='comma list; default all')
  p.add_argument('--tasks', default='', help='comma list; default all')
  p.add_argument('--every', type=int, default=100000,
                 help='print the first evaluation in each stretch of this '
                      'many env steps, and the last (default 100000)')
  p.add_argument('--at', default='',
                 help='comma list of env steps: instead of one table a run, '
                      'one markdown row per (folder, agent, task) and step, '
                      'its seeds together (e.g. 100000,500000)')
  p.add_argument('--columns', default='',
                 help='more logged metrics to print, comma list (e.g. '
                      'noise_std, entropy, alpha, temperature)')
  return p.parse_args(argv)


def main(argv=None) -> int:
  args = parse_args(argv)
  split = lambda s: [x for x in s.split(',') if x]
  agents, task_names, columns = (split(args.agents), split(args.tasks),
                                 split(args.columns))
  try:
    if args.every < 1:
      raise dmc.UsageError(f'--every must be >= 1, got {args.every}')
    steps = (dmc._parse_list(args.at, int, 'at')  # pylint: disable=protected-access
             if args.at else [])
    if any(step < 1 for step in steps):
      raise dmc.UsageError(f'--at takes env steps >= 1, got {args.at}')
    if steps and columns:
      raise dmc.UsageError('--columns prints with the per-run tables; '
                           'drop it or --at')
    if not os.path.isdir(args.runs):
      raise dmc.UsageError(f'--runs {args.runs} is not a directory')
    tables = []
    for run_dir in find_runs(args.runs):
      config = read_config(run_dir)
      if agents and config.get('agent') not in agents:
        continue
      if task_names and config.get('task') not in task_names:
        continue
      tables.append(run_table(run_dir, config, columns, args.runs))
    tables = [t for t in tables if t['rows']]
    if not tables:
      raise dmc.UsageError(
          f'no run under {args.runs} with evaluations matches --agents '
          f'{args.agents or "(all)"} --tasks {args.tasks or "(all)"}')
    for name in columns:
      if not any(name in t['logged'] for t in tables):
        raise dmc.UsageError(
            f'--columns {name}: no matching run logs it; the runs log '
            f'{", ".join(sorted(set().union(*(t["logged"] for t in tables))))}')
  except dmc.UsageError as e:
    print(f'dmc_metrics.py: error: {e}', file=sys.stderr)
    return 2
  if steps:
    rows = summary(tables, steps)
    if not rows:
      print(f'dmc_metrics.py: error: no matching run has an evaluation within '
            f'{NEAR:.0%} of --at {args.at}', file=sys.stderr)
      return 2
    print(format_summary(rows))
  else:
    print('\n\n'.join(format_table(t, columns, args.every) for t in tables))
  return 0


if __name__ == '__main__':
  sys.exit(main())
