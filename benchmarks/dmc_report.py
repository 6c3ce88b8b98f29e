"""The DMC benchmark's report: DMC.md and its plots, from the result CSVs.

Reads `dmc.csv` (one row per agent, task, seed, budget, variant) and
`dmc_curves.csv` (every evaluation of each finished run), both written by
`benchmarks/dmc.py`, and writes beside them (or into `--out-dir`):

- `DMC.md`: one table per env-step budget: per task and agent (and
  variant), the seeds, the mean over seeds, the interquartile mean (IQM)
  with its 95% stratified-bootstrap interval (`roxie.stats`, Agarwal et al.
  2021, https://arxiv.org/abs/2108.13264), the published State-SAC figure
  of CURL's Table 1 (https://arxiv.org/abs/2004.04136) and whether the IQM
  reaches it, and CPU minutes per run; an aggregate row per agent over the
  tasks; where the rows came from (machine, version, commits);
- `dmc_curves.png`: evaluation return against env steps per task, the mean
  over seeds and its bootstrap band, each seed's curve linearly
  interpolated onto a common grid;
- `dmc_aggregate.png`: the aggregate IQM per budget with its interval, and
  the performance profile (fraction of runs above each return) per budget.

Partial data is the normal case (a benchmark still running): missing seeds,
budgets or tasks show as "-", rows may come from several commits, and the
same cell written twice keeps its last row. A row that took another
evaluation than `dmc.budget_evaluation` picks (rows of dmc.py up to commit
773bf3f took the first at or after the budget, not the nearest) is
re-picked from its run's curve, and the table says so.

  python benchmarks/dmc_report.py            # benchmarks/results/DMC.md
  python benchmarks/dmc_report.py --results r/dmc.csv --curves r/c.csv \
      --out-dir r
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # dmc.py is a sibling script, not a package.
  sys.path.insert(0, HERE)
if os.path.dirname(HERE) not in sys.path:  # roxie from this checkout.
  sys.path.insert(0, os.path.dirname(HERE))

import dmc  # pylint: disable=g-import-not-at-top,wrong-import-position
from roxie import stats  # pylint: disable=g-import-not-at-top,wrong-import-position

# CURL (Laskin et al. 2020, https://arxiv.org/abs/2004.04136), Table 1, the
# "State SAC" row: mean return at 100k and 500k env steps (action-repeated
# steps, as dmc.py counts them). CURL names BallInCup ball_in_cup_catch.
REFERENCE_SOURCE = ('CURL (Laskin et al. 2020, arXiv 2004.04136) Table 1, '
                    'State SAC')
REFERENCE: Dict[int, Dict[str, float]] = {
    100_000: {'CartpoleSwingup': 835, 'ReacherEasy': 746, 'FingerSpin': 811,
              'CheetahRun': 616, 'WalkerWalk': 891, 'BallInCup': 746},
    500_000: {'CartpoleSwingup': 848, 'ReacherEasy': 923, 'FingerSpin': 923,
              'CheetahRun': 795, 'WalkerWalk': 948, 'BallInCup': 974},
}
# Each recipe's target, as a fraction of the reference (issue 13's table):
# SAC, TD3, D4PG and TD4 are held to CURL's figure itself, DDPG and MPO to
# within 10% of it; PPO's 100k and 500k rows are only reported, and past
# 500k env steps (its budget, up to 20M) it is held to within 25% of the
# 500k column. Past 500k every other recipe is held to the 500k column.
TARGET_FRACTION: Dict[str, float] = {'ddpg': 0.9, 'mpo': 0.9}
LONG_BUDGET_FRACTION: Dict[str, float] = {'ppo': 0.75}
REPORTED_ONLY = frozenset({'ppo'})  # At the standard budgets: no target.
LONG_BUDGET_MAX = 20_000_000  # PPO's budget: up to 20M env steps.
CONFIDENCE = 0.95
FEW_SEEDS = 5  # Below this a bootstrap interval over seeds is rough.
STEPS_TOLERANCE = 0.03  # Show a row's env steps when this far off its budget.
CURVE_POINTS = 100
MARKDOWN = 'DMC.md'
CURVES_PNG = 'dmc_curves.png'
AGGREGATE_PNG = 'dmc_aggregate.png'

Key = Tuple[str, str]  # (agent, variant)


def reference(budget: int) -> Dict[str, float]:
  """The published figure a row at `budget` is compared with, per task.

  CURL's own column at 100k and 500k; past 500k (PPO's budget) the 500k
  column; none at other budgets below 500k.
  """
  if budget in REFERENCE:
    return REFERENCE[budget]
  last = max(REFERENCE)
  if budget > last:
    return dict(REFERENCE[last])
  return {}


def target_fraction(agent: str, budget: int) -> Optional[float]:
  """The fraction of `reference(budget)` that `agent` is held to.

  None where the agent's rows are only reported (PPO at 100k and 500k).
  """
  if budget > max(REFERENCE):
    return LONG_BUDGET_FRACTION.get(agent, 1.0)
  if agent in REPORTED_ONLY:
    return None
  return TARGET_FRACTION.get(agent, 1.0)


def target(agent: str, budget: int, task: str) -> Optional[float]:
  """The return `agent` must reach on `task` at `budget`, or None."""
  ref, fraction = reference(budget).get(task), target_fraction(agent, budget)
  return None if ref is None or fraction is None else fraction * ref


class Row:
  """One budget row of dmc.csv, typed."""

  def __init__(self, r: Dict[str, str]):
    self.agent, self.task, self.variant = r['agent'], r['task'], r['variant']
    self.seed, self.budget = int(r['seed']), int(r['budget'])
    self.env_steps = int(float(r['env_steps']))
    self.eval_return = float(r['eval_return'])
    self.cpu_s = dmc.float_or_nan(r['cpu_s'])
    self.wall_s = dmc.float_or_nan(r['wall_s'])
    self.version, self.commit = r['version'], r['commit']
    self.machine, self.overrides = r['machine'], r['overrides']
    self.row_env_steps = None  # Set when the curves gave a nearer evaluation.

  @property
  def key(self) -> Key:
    return self.agent, self.variant


def _order(key: Key):
  """Agents alphabetically, each one's default variant first."""
  return key[0], key[1] != 'default', key[1]


def _label(key: Key) -> str:
  agent, variant = key
  return agent if variant == 'default' else f'{agent} ({variant})'


def curve_points(raw_curves: Sequence[Dict[str, str]]):
  """The curve CSV's rows as points (dmc.CURVE_COLUMNS; humanoid's too).

  Returns:
    ({(agent, task, seed, variant, env steps): return}, the same keys'
    CPU seconds, the number of unreadable rows). A later row of a key
    replaces an earlier one; non-finite returns are left out.
  """
  points: Dict[tuple, float] = {}
  cpu: Dict[tuple, float] = {}
  bad = 0
  for r in raw_curves:
    try:
      key = (r['agent'], r['task'], int(r['seed']), r['variant'],
             int(float(r['env_steps'])))
      value = float(r['eval_return'])
    except (TypeError, ValueError):
      bad += 1
      continue
    if math.isfinite(value):
      points[key] = value
      cpu[key] = dmc.float_or_nan(r['cpu_s'])
  return points, cpu, bad


def load(results: str, curves: str):
  """The rows and curve points of the two CSVs, deduplicated.

  A cell (agent, task, seed, budget, variant) or curve point (agent, task,
  seed, variant, env steps) that appears twice keeps its last row. Rows
  whose numbers cannot be read are dropped and counted.

  Where a row took another evaluation than `dmc.budget_evaluation` picks
  from the same run's curve (rows of the first dmc.py took the first
  evaluation at or after the budget, not the nearest), the row's return,
  env steps and CPU time are those of the curve's evaluation, and
  `row_env_steps` keeps the row's own env steps.

  Returns:
    (rows, {(agent, task, seed, variant, env steps): return}, number of
    unreadable rows).

  Raises:
    dmc.UsageError: a CSV with other columns than dmc.py writes.
  """
  raw = dmc.read_rows(results, dmc.COLUMNS)
  raw_curves = dmc.read_rows(curves, dmc.CURVE_COLUMNS)
  bad = 0
  cells: Dict[tuple, Row] = {}
  for r in raw:
    try:
      row = Row(r)
    except (TypeError, ValueError):
      bad += 1
      continue
    if not math.isfinite(row.eval_return):
      bad += 1
      continue
    cells[(row.agent, row.task, row.seed, row.budget, row.variant)] = row
  points, cpu, unreadable = curve_points(raw_curves)
  bad += unreadable
  by_run: Dict[tuple, List[dict]] = collections.defaultdict(list)
  for key, value in points.items():
    by_run[key[:4]].append(dict(env_steps=key[4], eval_return=value,
                                cpu_s=cpu[key]))
  for row in cells.values():
    e = dmc.budget_evaluation(
        by_run.get((row.agent, row.task, row.seed, row.variant), []),
        row.budget)
    if e is not None and e['env_steps'] != row.env_steps:
      row.row_env_steps = row.env_steps
      row.env_steps, row.eval_return = e['env_steps'], e['eval_return']
      row.cpu_s = e['cpu_s']
  return list(cells.values()), points, bad


def _fmt(x: Optional[float], digits: int = 0) -> str:
  if x is None or not math.isfinite(x):
    return '-'
  return f'{x:.{digits}f}'


def _steps(n: float) -> str:
  return f'{n / 1000:.0f}k' if n >= 1000 else f'{n:.0f}'


def accelerated_machine(machine: str) -> bool:
  """A row trained with JAX on an accelerator: `dmc.py --machine`'s
  '<device> + N-core host' label (its CPU seconds are the host's alone)."""
  return ' + ' in machine


def _cell_stats(rows: Sequence[Row], resamples: int, seed: int) -> dict:
  scores = np.asarray([r.eval_return for r in rows])
  ci = stats.confidence_interval([scores], confidence=CONFIDENCE,
                                 num_resamples=resamples, seed=seed)
  return dict(n=len(rows), mean=float(scores.mean()), iqm=float(ci.point),
              low=float(ci.low), high=float(ci.high),
              cpu_min=float(np.nanmean([r.cpu_s for r in rows])) / 60.0
              if any(math.isfinite(r.cpu_s) for r in rows) else math.nan,
              env_steps=max(r.env_steps for r in rows))


def _meets(s: dict, ref: Optional[float]) -> str:
  if ref is None:
    return '-'
  if s['iqm'] >= ref:
    return 'yes'
  if s['high'] >= ref:  # Below it, but the interval does not exclude it.
    return 'within CI'
  return 'no'


def _seeds_text(n: int) -> str:
  return f'{n}' if n >= FEW_SEEDS else f'{n}*'


def _aggregate(rows: Sequence[Row], budget: int, resamples: int, seed: int
               ) -> Tuple[Optional[stats.Interval], Optional[stats.Interval],
                          int, int]:
  """Aggregate IQM over tasks: raw returns, and returns / the reference."""
  by_task: Dict[str, List[float]] = collections.defaultdict(list)
  for r in rows:
    by_task[r.task].append(r.eval_return)
  raw = stats.confidence_interval(list(by_task.values()),
                                  confidence=CONFIDENCE,
                                  num_resamples=resamples, seed=seed)
  refs = reference(budget)
  normed = [np.asarray(v) / refs[t] for t, v in by_task.items() if t in refs]
  norm = (stats.confidence_interval(normed, confidence=CONFIDENCE,
                                    num_resamples=resamples, seed=seed)
          if normed else None)
  return raw, norm, len(by_task), len(normed)


def _budget_text(n: int) -> str:
  return f'{n / 1e6:g}M' if n >= 1_000_000 else _steps(n)


def _standing_cell(s: Optional[dict], goal: Optional[float]) -> str:
  """One task's cell of the standing table: the IQM and its verdict."""
  if s is None:
    return 'no rows'
  if goal is None:
    return f'{s["iqm"]:.0f} reported'
  verdict = _meets(s, goal)
  if verdict == 'yes':
    return f'{s["iqm"]:.0f} met'
  gap = f'{s["iqm"]:.0f} ({s["iqm"] - goal:+.0f}'
  return gap + (', CI reaches)' if verdict == 'within CI' else ')')


def standing_lines(agents: Sequence[str], cells: Dict[tuple, list],
                   cell_stats: Callable[[tuple], dict],
                   owed: Callable[..., bool],
                   budgets: Sequence[int]) -> List[str]:
  """The defaults' grid: recipe x budget rows, the six tasks as columns.

  At each standard budget a cell reads its IQM and "met", or its gap to the
  target (", CI reaches" when the interval does), "reported" where there
  is no target, "no rows" where the cell has none (a budget's row is left
  out when it has no cell and `owed(key, budget)` says none is owed: PPO's
  500k, which its longer budget stands for). A recipe held to a longer
  budget (PPO) gets one more row: per task the smallest budget past 500k
  whose cell meets its target, else the largest it ran, named in brackets.
  """
  tasks = dmc.STANDARD_TASKS
  lines = ['| recipe | env steps | ' + ' | '.join(tasks) + ' | met |',
           '|---|---|' + '---|' * len(tasks) + '---:|']

  def stats_of(agent, task, budget):
    cell = ((agent, 'default'), task, budget)
    return cell_stats(cell) if cell in cells else None

  for agent in agents:
    for budget in dmc.BUDGETS:
      if not owed((agent, 'default'), budget) and not any(
          stats_of(agent, t, budget) for t in tasks):
        continue
      texts, met, held = [], 0, 0
      for task in tasks:
        s, goal = stats_of(agent, task, budget), target(agent, budget, task)
        texts.append(_standing_cell(s, goal))
        held += goal is not None
        met += s is not None and goal is not None and _meets(s, goal) == 'yes'
      count = f'{met}/{held}' if held else '-'
      lines.append(f'| {agent} | {_steps(budget)} | ' + ' | '.join(texts)
                   + f' | {count} |')
    if agent not in LONG_BUDGET_FRACTION:
      continue
    longer = [b for b in budgets if max(dmc.BUDGETS) < b <= LONG_BUDGET_MAX]
    texts, met = [], 0
    for task in tasks:
      ran = [b for b in longer if stats_of(agent, task, b) is not None]
      hit = [b for b in ran if _meets(stats_of(agent, task, b),
                                      target(agent, b, task)) == 'yes']
      if not ran:
        texts.append('no rows')
        continue
      b = hit[0] if hit else ran[-1]
      met += bool(hit)
      cell = _standing_cell(stats_of(agent, task, b), target(agent, b, task))
      texts.append(f'{cell} ({_budget_text(b)})')
    lines.append(f'| {agent} | up to {_budget_text(LONG_BUDGET_MAX)} | '
                 + ' | '.join(texts) + f' | {met}/{len(tasks)} |')
  return lines


def write_markdown(rows: Sequence[Row], points: dict, bad: int, path: str,
                   args, plots: Sequence[str]) -> None:
  """Writes DMC.md (atomically: a reader never sees half a file)."""
  # Every agent's default is listed, even before its first row (its cells
  # are owed); other variants as they have rows.
  keys = sorted({r.key for r in rows} | {(r.agent, 'default') for r in rows},
                key=_order)
  tasks = list(dmc.STANDARD_TASKS) + sorted(
      {r.task for r in rows} - set(dmc.STANDARD_TASKS))
  budgets = sorted(set(dmc.BUDGETS) | {r.budget for r in rows})
  cells: Dict[tuple, List[Row]] = collections.defaultdict(list)
  for r in rows:
    cells[(r.key, r.task, r.budget)].append(r)

  stats_of_cell: Dict[tuple, dict] = {}

  def cell_stats(cell: tuple) -> dict:
    # Each cell's bootstrap once: the table and `met_before` both read it.
    if cell not in stats_of_cell:
      stats_of_cell[cell] = _cell_stats(cells[cell], args.resamples,
                                        args.seed)
    return stats_of_cell[cell]

  def met_before(key, task, budget) -> bool:
    # Past the standard budgets a task whose target was met at a smaller
    # such budget owes nothing more (PPO runs on toward 20M only where it is
    # short).
    return any(
        b not in dmc.BUDGETS and b < budget and (key, task, b) in cells
        and _meets(cell_stats((key, task, b)),
                   target(key[0], b, task)) == 'yes'
        for b in budgets)

  def owed(key, budget, task=None) -> bool:
    # A default's missing cells are listed (they are owed) at the standard
    # budgets and at any other budget the agent has a row at, unless the
    # task met its target at a smaller one; another variant's are not
    # (variants are run where they are asked about).
    if key[0] in LONG_BUDGET_FRACTION and budget == max(REFERENCE):
      return False  # PPO's 500k column is its own budget's (up to 20M).
    return key[1] == 'default' and (
        budget in dmc.BUDGETS or (
            any((key, t, budget) in cells for t in tasks)
            and not (task and met_before(key, task, budget))))
  out = []
  w = out.append
  w('# DMC benchmark (state observations, native CPU backend)\n')
  w('Generated by `benchmarks/dmc_report.py` from `dmc.csv` and '
    '`dmc_curves.csv` (written by `benchmarks/dmc.py`). Regenerate with:\n')
  w('```\npython benchmarks/dmc.py --report\n'
    '# or: python benchmarks/dmc_report.py --results '
    f'{_rel(args.results)} --curves {_rel(args.curves)}\n```\n')
  w('The variant `default` is each recipe\'s default Config with one '
    'per-task setting, the action repeat of the task table '
    '`roxie.envs.tasks.ACTION_REPEAT` (PlaNet\'s: CartpoleSwingup 8, '
    'ReacherEasy, CheetahRun and BallInCup 4, FingerSpin and WalkerWalk 2), '
    'which `roxie train` applies to every recipe (dmc.py also passes it as '
    '`--set action_repeat=N` to the recipes whose Config has the field); '
    'other variants list their overrides in dmc.csv and appear only on '
    'the tasks they ran.\n\n')
  w('Each run trains one agent on one task with one seed; a budget\'s score '
    'is the run\'s own evaluation (mean return of `eval_episodes` '
    'deterministic 1000-step episodes) at that many env steps '
    '(action-repeated steps, as in CURL). **IQM** is the interquartile mean '
    'over seeds (rliable\'s: floor(n/4) runs trimmed at each end, so with '
    '3 seeds or fewer it equals the mean), with its '
    f'{CONFIDENCE:.0%} percentile bootstrap interval ({args.resamples:,} '
    'resamples of the seeds with replacement). **ref** is the published '
    f'figure of {REFERENCE_SOURCE}, its 500k column past 500k env steps '
    '(PPO\'s budget, up to 20M). **target** is the return the recipe is '
    'held to (issue 13): the reference itself for SAC, TD3, D4PG and TD4; '
    + ', '.join(f'{1 - f:.0%} below it for ' + ' and '.join(
        sorted(a.upper() for a, g in TARGET_FRACTION.items() if g == f))
                for f in sorted(set(TARGET_FRACTION.values())))
    + '; PPO\'s 100k and 500k rows are only reported (no target), and past '
    '500k ' + ', '.join(f'{a.upper()} is held to {1 - f:.0%} below it'
                        for a, f in sorted(LONG_BUDGET_FRACTION.items()))
    + '. **meets** is "yes" when the IQM reaches the target, '
    '"within CI" when only the interval does. **CPU min/run** is the user + '
    'system CPU minutes a run took to reach that evaluation (mean over '
    'seeds; evaluations included), on whatever shared machine ran it: '
    'sessions\' machines have differed by ~2x for the same code, so compare '
    'cost across rows with care, and side by side with '
    '`benchmarks/run_cost.py`; a cell trained with JAX on an accelerator '
    '(machine "<device> + N-core host", `dmc.py --machine`) counts the '
    'host\'s CPU alone, and its note gives the wall minutes. `*`: fewer than '
    f'{FEW_SEEDS} seeds, the interval is rough (with 1 seed there is none). '
    '**note** gives the env steps of the evaluation used when they are more '
    f'than {STEPS_TOLERANCE:.0%} off the budget: evaluations land where a '
    'compiled call ends (a multiple of num_envs x action repeat env '
    'steps, at most 1,000 iterations), so with action repeat 2 they fall at '
    '80k and 112k, and with 8 at 99,840 and 119,808. dmc.py takes the '
    'evaluation nearest the budget; rows written by dmc.py up to commit '
    '773bf3f took the first at or after it (CartpoleSwingup\'s 100k rows '
    'at 119,808), and where such a row\'s run has the nearer evaluation in '
    'dmc_curves.csv this report uses that one and says so.\n')
  if not rows:
    w('No results yet.\n')
  else:
    agents = sorted({k[0] for k in keys}, key=lambda a: _order((a, 'default')))
    w('\n## Where each default stands\n')
    w('Each recipe\'s default on the six tasks (issue 13\'s Done-when): the '
      'IQM over seeds, then "met" or the gap to the target (", CI reaches" '
      'when the interval reaches it); "no rows" where the cell is owed, '
      '"reported" where there is no target. PPO\'s last row is its own '
      f'budget, up to {_budget_text(LONG_BUDGET_MAX)} env steps: per task the '
      'smallest budget that meets the target, else the largest run. The '
      'tables below give the seeds, intervals and CPU minutes.\n')
    for line in standing_lines(agents, cells, cell_stats, owed, budgets):
      w(line)
  for budget in budgets:
    w(f'\n## {_steps(budget)} env steps\n')
    w('| task | agent | seeds | mean | IQM [95% CI] | ref | target | meets '
      '| CPU min/run | note |')
    w('|---|---|---:|---:|---|---:|---:|---|---:|---|')
    ref_table = reference(budget)
    for task in tasks:
      ref = ref_table.get(task)
      ref_text = _fmt(ref) if ref is not None else '-'
      for key in keys or [None]:
        members = cells.get((key, task, budget), []) if key else []
        agent = _label(key) if key else '-'
        if not members:
          if key is None or owed(key, budget, task):
            goal = _fmt(target(key[0], budget, task)) if key else '-'
            w(f'| {task} | {agent} | 0 | - | - | {ref_text} | {goal} '
              '| - | - | |')
          continue
        s = cell_stats((key, task, budget))
        goal = target(key[0], budget, task)
        notes = []
        off = [r for r in members
               if abs(r.env_steps - budget) > STEPS_TOLERANCE * budget]
        if off:
          notes.append('at ' + ', '.join(
              f'{n:,}' for n in sorted({r.env_steps for r in off}))
                       + ' env steps' + (f' ({len(off)} of {s["n"]} seeds)'
                                         if len(off) < s['n'] else ''))
        moved = collections.Counter((r.row_env_steps, r.env_steps)
                                    for r in members
                                    if r.row_env_steps is not None)
        for (was, now), k in sorted(moved.items()):
          notes.append(f'{_plural(k, "seed")} re-picked from the curves: '
                       f'{now:,} env steps (dmc.csv row: {was:,})')
        accelerated = sorted({r.machine for r in members
                              if accelerated_machine(r.machine)})
        if accelerated:
          wall = max(r.wall_s for r in members) / 60.0
          notes.append(f'on {"; ".join(accelerated)}: CPU min is the '
                       f'host\'s, {wall:.1f} wall min for the seeds')
        note = '; '.join(notes)
        ci = (f'{s["iqm"]:.0f}' if s['n'] == 1 else
              f'{s["iqm"]:.0f} [{s["low"]:.0f}, {s["high"]:.0f}]')
        w(f'| {task} | {agent} | {_seeds_text(s["n"])} | {s["mean"]:.0f} '
          f'| {ci} | {ref_text} | {_fmt(goal)} | {_meets(s, goal)} '
          f'| {_fmt(s["cpu_min"], 1)} | {note} |')
    for key in keys:
      members = [r for r in rows if r.key == key and r.budget == budget]
      if not members:
        if owed(key, budget):
          w(f'| **all tasks** | {_label(key)} | 0 | - | - | - | - | - | - '
            '| |')
        continue
      raw, norm, n_tasks, n_ref = _aggregate(members, budget, args.resamples,
                                             args.seed)
      norm_text = (f'IQM of return / ref over {n_ref} task(s): '
                   f'{norm.point:.2f}' + (
                       f' [{norm.low:.2f}, {norm.high:.2f}]'
                       if len(members) > 1 else '')
                   if norm is not None else 'no reference for these tasks')
      cpu = np.nanmean([r.cpu_s for r in members]) / 60.0
      runs = f'{len(members)} run{"s" if len(members) > 1 else ""}'
      raw_text = (f'{raw.point:.0f}' if len(members) == 1 else
                  f'{raw.point:.0f} [{raw.low:.0f}, {raw.high:.0f}]')
      fraction = target_fraction(key[0], budget)
      meets = (_meets(dict(iqm=norm.point, high=norm.high), fraction)
               if norm is not None and fraction is not None else '-')
      goal = f'{fraction:.0%}' if fraction is not None else '-'
      w(f'| **all tasks** ({n_tasks}) | {_label(key)} | {runs} '
        f'| {np.mean([r.eval_return for r in members]):.0f} '
        f'| {raw_text} | - | {goal} '
        f'| {meets} '
        f'| {_fmt(cpu, 1)} | {norm_text} |')
  w('\nThe **all tasks** rows pool every run of every task with a row at '
    'that budget: the IQM of raw returns (DMC\'s common 0-1000 scale) with '
    'a stratified bootstrap interval (seeds resampled within each task), '
    'and in the note the same over returns divided by the reference '
    '(1.00 = the **ref** column\'s figure); their **target** is the '
    'recipe\'s fraction of the reference, and "meets" is "yes" when that '
    'normalised IQM reaches it. An aggregate over fewer than the six tasks '
    'is not comparable with one over all six.\n')
  if plots:
    w('\n## Plots\n')
    for p in plots:
      w(f'![{p}]({p})\n')
    w('`dmc_curves.png`: evaluation return vs env steps, per task; thin '
      'lines are seeds, the thick line the mean over seeds with its 95% '
      'bootstrap band (seeds evaluate at slightly different env steps, so '
      f'each seed is linearly interpolated onto a {CURVE_POINTS}-point grid '
      'and the band is drawn where at least two seeds have data); crosses '
      'mark the reference. `dmc_aggregate.png`: the aggregate IQM per '
      'budget with its interval, and the performance profile (fraction of '
      'all runs scoring above each return) with its bootstrap band.\n')
  w('\n## Where these rows come from\n')
  if rows:
    by_commit = collections.Counter((r.commit, r.version) for r in rows)
    w('| commit | roxie version | rows |')
    w('|---|---|---:|')
    for (commit, version), n in sorted(by_commit.items()):
      w(f'| {commit} | {version} | {n} |')
    w('')
    machines = sorted({r.machine for r in rows})
    w(f'Machine{"s" if len(machines) > 1 else ""}: '
      + '; '.join(machines) + '.')
    overrides = sorted({(r.variant, r.overrides) for r in rows
                        if r.overrides})
    for variant, text in overrides:
      w(f'Variant `{variant}`: `{text}`.')
    w(f'\n{len(rows)} budget rows and {len(points)} curve points read'
      + (f'; {bad} unreadable row(s) skipped.' if bad else '.'))
  else:
    w('No rows yet.')
  text = '\n'.join(out).rstrip() + '\n'
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    f.write(text)
  os.replace(tmp, path)


def _rel(path: str) -> str:
  try:
    rel = os.path.relpath(path, os.path.dirname(HERE))
  except ValueError:
    return path
  return path if rel.startswith('..') else rel


# -- plots -------------------------------------------------------------------


def _curves_by_group(points: dict):
  """{(key, task): {seed: (steps [N], returns [N])}} sorted by steps."""
  groups: Dict[tuple, Dict[int, list]] = collections.defaultdict(
      lambda: collections.defaultdict(list))
  for (agent, task, seed, variant, step), value in points.items():
    groups[((agent, variant), task)][seed].append((step, value))
  out = {}
  for g, seeds in groups.items():
    out[g] = {}
    for s, pts in seeds.items():
      pts.sort()
      out[g][s] = (np.asarray([p[0] for p in pts], np.float64),
                   np.asarray([p[1] for p in pts], np.float64))
  return out


def band_on_grid(curves: Sequence[Tuple[np.ndarray, np.ndarray]],
                 resamples: int, seed: int, points: int = CURVE_POINTS):
  """Mean over seeds and its bootstrap band on a common env-step grid.

  Each seed's curve is linearly interpolated (never extrapolated) onto
  `points` steps spanning all seeds' evaluations; at each grid step the
  seeds covering it give the mean and a percentile bootstrap interval of
  the mean over seeds (the mean itself where one seed covers it).

  Args:
    curves: per seed, (env steps [N], returns [N]), steps increasing.
    resamples: bootstrap resamples.
    seed: bootstrap seed.
    points: grid size.

  Returns:
    (grid [P], mean [P], low [P], high [P]); NaN where no seed covers.
  """
  lo = min(x[0] for x, _ in curves)
  hi = max(x[-1] for x, _ in curves)
  grid = np.linspace(lo, hi, points) if hi > lo else np.asarray([lo])
  table = np.full((len(curves), grid.size), np.nan)
  for i, (x, y) in enumerate(curves):
    inside = (grid >= x[0]) & (grid <= x[-1])
    table[i, inside] = np.interp(grid[inside], x, y)
  mean = np.full(grid.size, np.nan)
  low, high = mean.copy(), mean.copy()
  mean_stat = lambda v: v.mean(axis=-1)
  for j in range(grid.size):
    col = table[:, j][np.isfinite(table[:, j])]
    if col.size == 0:
      continue
    ci = stats.confidence_interval([col], mean_stat, confidence=CONFIDENCE,
                                   num_resamples=resamples, seed=seed)
    mean[j], low[j], high[j] = ci.point, ci.low, ci.high
  return grid, mean, low, high


def plot_curves(points: dict, path: str, resamples: int, seed: int,
                title: str = ('DMC from states: evaluation return (mean over '
                              'seeds, 95% bootstrap band)')) -> bool:
  """Return vs env steps per task (one panel each); False when no curves.

  `points` as `load` returns them; the humanoid report draws its curves
  here too, with its own `title` (its tasks have no CURL mark).
  """
  groups = _curves_by_group(points)
  if not groups:
    return False
  Figure, FigureCanvasAgg = _matplotlib()  # pylint: disable=invalid-name
  tasks = [t for t in dmc.STANDARD_TASKS if any(g[1] == t for g in groups)]
  tasks += sorted({g[1] for g in groups} - set(tasks))
  keys = sorted({g[0] for g in groups}, key=_order)
  colors = {k: f'C{i % 10}' for i, k in enumerate(keys)}
  cols = min(3, len(tasks))
  rows = math.ceil(len(tasks) / cols)
  fig = Figure(figsize=(max(4.2 * cols, 7.0), 3.3 * rows + 0.6), dpi=100)
  FigureCanvasAgg(fig)
  axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).reshape(-1)
  for ax, task in zip(axes, tasks):
    for key in keys:
      seeds = groups.get((key, task))
      if not seeds:
        continue
      color = colors[key]
      curves = [seeds[s] for s in sorted(seeds)]
      for x, y in curves:
        ax.plot(x, y, color=color, lw=0.7, alpha=0.35)
      grid, mean, low, high = band_on_grid(curves, resamples, seed)
      ax.plot(grid, mean, color=color, lw=2.0,
              label=f'{_label(key)} ({_plural(len(curves), "seed")})')
      if len(curves) > 1:
        ax.fill_between(grid, low, high, color=color, alpha=0.2, lw=0)
    refs = [(b, REFERENCE[b][task]) for b in sorted(REFERENCE)
            if task in REFERENCE[b]]
    if refs:
      ax.plot([b for b, _ in refs], [v for _, v in refs], 'kx', ms=8, mew=2,
              label='CURL State-SAC')
    ax.set_title(task, fontsize='medium')
    ax.set_ylim(0, 1000)
    ax.grid(True, alpha=0.3)
    ax.ticklabel_format(axis='x', style='sci', scilimits=(-3, 4),
                        useMathText=True)
    ax.set_xlabel('env steps')
    ax.set_ylabel('eval return')
    ax.legend(loc='best', fontsize='x-small')
  for ax in axes[len(tasks):]:
    ax.set_visible(False)
  fig.suptitle(title, fontsize='medium')
  fig.tight_layout()
  _save(fig, path)
  return True


def _plural(n: int, word: str) -> str:
  return f'{n} {word}' + ('' if n == 1 else 's')


def plot_aggregate(rows: Sequence[Row], path: str, resamples: int,
                   seed: int) -> bool:
  """Aggregate IQM per budget and performance profiles; False if no rows.

  The left panel shows the IQM of return / reference (1 = the published
  figure, comparable whichever tasks have rows yet); where no task with a
  row has a reference, the IQM of raw returns instead.
  """
  if not rows:
    return False
  Figure, FigureCanvasAgg = _matplotlib()  # pylint: disable=invalid-name
  keys = sorted({r.key for r in rows}, key=_order)
  budgets = sorted({r.budget for r in rows})
  fig = Figure(figsize=(11, 4.2), dpi=100)
  FigureCanvasAgg(fig)
  left, right = fig.subplots(1, 2)
  taus = np.linspace(0, 1000, 101)
  styles = ['-', '--', ':', '-.']
  normalised = any(r.task in reference(r.budget) for r in rows)
  for i, key in enumerate(keys):
    color = f'C{i % 10}'
    xs, ys, lows, highs = [], [], [], []
    for j, budget in enumerate(budgets):
      members = [r for r in rows if r.key == key and r.budget == budget]
      if not members:
        continue
      raw, norm, n_tasks, _ = _aggregate(members, budget, resamples, seed)
      point = norm if normalised else raw
      if point is not None:
        xs.append(budget)
        ys.append(float(point.point))
        lows.append(float(point.low))
        highs.append(float(point.high))
      by_task: Dict[str, List[float]] = collections.defaultdict(list)
      for r in members:
        by_task[r.task].append(r.eval_return)
      prof = stats.performance_profile(list(by_task.values()), taus,
                                       confidence=CONFIDENCE,
                                       num_resamples=resamples, seed=seed)
      right.plot(taus, prof.fraction, color=color,
                 ls=styles[j % len(styles)],
                 label=f'{_label(key)} @ {_steps(budget)} '
                       f'({_plural(len(members), "run")}, '
                       f'{_plural(n_tasks, "task")})')
      right.fill_between(taus, prof.low, prof.high, color=color, alpha=0.15,
                         lw=0)
    if xs:
      y = np.asarray(ys)
      left.errorbar(xs, y, yerr=[y - np.asarray(lows),
                                 np.asarray(highs) - y],
                    color=color, marker='o', capsize=4, label=_label(key))
  if normalised:
    left.axhline(1.0, color='k', ls='--', lw=1,
                 label='CURL State-SAC (= 1 on every task)')
    left.set_ylabel('IQM of eval return / reference')
    left.set_ylim(0, 1.2)
  else:
    left.set_ylabel('IQM of eval return')
    left.set_ylim(0, 1000)
  left.set_xlabel('env steps (budget)')
  left.set_title('aggregate IQM over runs of all tasks, 95% stratified '
                 'bootstrap CI', fontsize='medium')
  left.set_xlim(0, max(budgets) * 1.1)
  left.ticklabel_format(axis='x', style='sci', scilimits=(-3, 4),
                        useMathText=True)
  left.legend(loc='lower right', fontsize='small')
  right.set_xlabel('eval return threshold tau')
  right.set_ylabel('fraction of runs with return > tau')
  right.set_title('performance profile, 95% bootstrap band',
                  fontsize='medium')
  right.set_ylim(0, 1.02)
  right.legend(loc='lower left', fontsize='x-small')
  for ax in (left, right):
    ax.grid(True, alpha=0.3)
  fig.tight_layout()
  _save(fig, path)
  return True


def _matplotlib():
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  return Figure, FigureCanvasAgg


def _can_plot() -> bool:
  try:
    _matplotlib()
  except ImportError:
    return False
  return True


def _save(fig, path: str) -> None:
  tmp = path + '.tmp.png'
  fig.savefig(tmp, format='png')
  os.replace(tmp, path)


# -- command line ------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--results', default=os.path.join(dmc.RESULTS, 'dmc.csv'))
  p.add_argument('--curves',
                 default=os.path.join(dmc.RESULTS, 'dmc_curves.csv'))
  p.add_argument('--out-dir', default=None,
                 help='where DMC.md and the PNGs go (default: the folder '
                      'of --results)')
  p.add_argument('--resamples', type=int, default=2000,
                 help='bootstrap resamples (default 2000)')
  p.add_argument('--seed', type=int, default=0, help='bootstrap seed')
  p.add_argument('--no-plots', action='store_true',
                 help='write DMC.md only (no matplotlib needed)')
  return p.parse_args(argv)


def main(argv=None) -> int:
  """Writes DMC.md (and the plots); 2 on bad input, with nothing written.

  Holds dmc.py's locks on the CSVs from the read to the last write, so a
  benchmark job's rows appended meanwhile wait, and the last DMC.md written
  holds every row (run by hand or by dmc.py beside other jobs).
  """
  args = parse_args(argv)
  out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.results))
  try:
    if args.resamples < 1:
      raise dmc.UsageError('--resamples must be >= 1')
    if not os.path.isdir(out_dir):
      raise dmc.UsageError(f'--out-dir {out_dir} is not a directory')
    load(args.results, args.curves)  # Checked before any lock file is made.
    with dmc.locked_all((args.results, args.curves)):
      rows, points, bad = load(args.results, args.curves)
      return _write_all(args, out_dir, rows, points, bad)
  except dmc.UsageError as e:
    print(f'dmc_report.py: error: {e}', file=sys.stderr)
    return 2


def _write_all(args, out_dir: str, rows, points, bad) -> int:
  """Writes the plots and DMC.md from the loaded rows."""
  plots = []
  if not args.no_plots and not _can_plot():
    print('dmc_report.py: matplotlib is not installed, so DMC.md is written '
          'without its plots (pip install -e ".[plot]" draws them; '
          '--no-plots says this is meant)', file=sys.stderr)
  elif not args.no_plots:
    if plot_curves(points, os.path.join(out_dir, CURVES_PNG), args.resamples,
                   args.seed):
      plots.append(CURVES_PNG)
    if plot_aggregate(rows, os.path.join(out_dir, AGGREGATE_PNG),
                      args.resamples, args.seed):
      plots.append(AGGREGATE_PNG)
  md = os.path.join(out_dir, MARKDOWN)
  write_markdown(rows, points, bad, md, args, plots)
  print(f'wrote {md} ({len(rows)} rows, {len(points)} curve points'
        + (f', {", ".join(plots)}' if plots else '') + ')')
  return 0


if __name__ == '__main__':
  sys.exit(main())
