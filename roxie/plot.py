"""Learning curves of training runs: `roxie plot DIR [DIR ...] -o out.png`.

Reads each run's `config.json` (agent, task, seed, settings) and
`metrics.csv`, and draws the evaluation return against environment steps
and against wall-clock time, in two panels. Runs of the same agent on the
same task with the same settings (seeds aside) form a group: each run is a
thin line, and the group's mean over runs a thick one with an interval
(standard error or min-max across runs), both interpolated onto a common x
grid where every run of the group has data. Where runs of one agent and
task differ in a setting (the members of a `--sweep`, say), each value is a
group of its own, labelled with it (`sac on CheetahRun, critic_lr=0.001`).

Needs matplotlib (`pip install 'roxie[plot]'`); drawing uses its Agg canvas
directly, so no display and no pyplot state are involved.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

CONFIG_FILE = 'config.json'  # As roxie.run writes them.
METRICS_FILE = 'metrics.csv'
INTERVALS = ('stderr', 'minmax', 'none')
_GRID_POINTS = 200


class PlotError(ValueError):
  """A run directory that cannot be plotted, and why."""


@dataclasses.dataclass
class RunCurve:
  """One run's learning curve.

  Attributes:
    path: the run directory.
    agent: the agent, from config.json.
    task: the task, from config.json.
    seed: the seed, from config.json (None if absent).
    env_steps: [N] environment steps of each evaluation, increasing.
    wall_time: [N] seconds since the run started (across resumes).
    value: [N] the plotted metric (by default the evaluation return).
  """
  path: str
  agent: str
  task: str
  seed: Optional[int]
  env_steps: np.ndarray
  wall_time: np.ndarray
  value: np.ndarray
  # The run's settings but the seed (the agent config's fields, the env
  # options, the steps per evaluation...), each value as JSON text.
  settings: Dict[str, str] = dataclasses.field(default_factory=dict)

  @property
  def group(self) -> Tuple[str, str]:
    return self.agent, self.task


# Settings that do not make runs differ (a resume may extend the total).
_NOT_SETTINGS = ('agent', 'task', 'seed', 'steps', 'config')


def _settings(cfg: dict) -> Dict[str, str]:
  """config.json's settings, flattened (agent config fields by their name)."""
  out = {k: json.dumps(v, sort_keys=True) for k, v in cfg.items()
         if k not in _NOT_SETTINGS}
  config = cfg.get('config')
  if isinstance(config, dict):
    out.update((k, json.dumps(v, sort_keys=True)) for k, v in config.items())
  return out


def groups_of(runs: Sequence[RunCurve]) -> Dict[str, List[RunCurve]]:
  """The runs by group label, in the order first seen.

  Runs of one agent and task are split by the settings in which they
  differ; the label names those settings (`sac on CheetahRun, tau=0.01`).
  """
  by_setup: Dict[Tuple[str, str], List[RunCurve]] = {}
  for r in runs:
    by_setup.setdefault(r.group, []).append(r)
  groups: Dict[str, List[RunCurve]] = {}
  for (agent, task), members in by_setup.items():
    keys = sorted(set().union(*(m.settings for m in members)))
    differ = [k for k in keys
              if len({m.settings.get(k) for m in members}) > 1]
    for m in members:
      label = f'{agent} on {task}' + ''.join(
          f', {k}={_plain(m.settings.get(k))}' for k in differ)
      groups.setdefault(label, []).append(m)
  return groups


def _plain(text: Optional[str]) -> str:
  """A setting's JSON text as a label shows it (numbers short, no quotes)."""
  if text is None:
    return '-'
  value = json.loads(text)
  if isinstance(value, float):
    return f'{value:g}'
  return value if isinstance(value, str) else json.dumps(value)


def _float(x: str) -> float:
  try:
    return float(x)
  except (TypeError, ValueError):
    return math.nan


def read_run(path: str, metric: str = 'eval_return') -> RunCurve:
  """Reads a run directory's config and metrics.

  Rows are ordered by env steps; where a resumed run logged the same env
  steps twice, the later row wins. If wall_time restarts (a resume that
  restarted the clock), later times are offset to continue the earlier ones.

  Args:
    path: a run directory written by `roxie train`.
    metric: the metrics.csv column to plot.

  Returns:
    The run's curve.

  Raises:
    PlotError: not a directory, not a run, or no usable metrics.
  """
  if not os.path.isdir(path):
    raise PlotError(f'{path} is not a directory.')
  cfg_path = os.path.join(path, CONFIG_FILE)
  if not os.path.isfile(cfg_path):
    raise PlotError(f'{path} is not a roxie run: no {CONFIG_FILE}.')
  try:
    with open(cfg_path) as f:
      cfg = json.load(f)
    agent, task = str(cfg['agent']), str(cfg['task'])
    if ':' in agent:  # A user's agent, SOURCE:FACTORY: its short name.
      from roxie import agents  # pylint: disable=g-import-not-at-top
      agent = agents.short_name(agent)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise PlotError(f'{cfg_path} is unreadable or lacks agent/task '
                    f'({e}).') from e
  seed = cfg.get('seed')
  settings = _settings(cfg)
  csv_path = os.path.join(path, METRICS_FILE)
  if not os.path.isfile(csv_path):
    raise PlotError(f'{path} has no {METRICS_FILE} yet (no evaluation has '
                    f'finished).')
  with open(csv_path, newline='') as f:
    reader = csv.DictReader(f)
    columns = reader.fieldnames or []
    rows = list(reader)
  needed = ('env_steps', 'wall_time', metric)
  missing = [c for c in needed if c not in columns]
  if missing:
    raise PlotError(f'{csv_path} has no column {", ".join(missing)} '
                    f'(columns: {", ".join(columns) or "none"}).')
  steps, wall, value = [], [], []
  offset, last = 0.0, None
  for row in rows:
    s, w, v = (_float(row.get(c)) for c in needed)
    if not math.isfinite(s):
      continue  # A torn last line of a killed run.
    if math.isfinite(w):
      if last is not None and w < last:
        offset += last  # The clock restarted.
      last = w
      w += offset
    steps.append(s)
    wall.append(w)
    value.append(v)
  by_step: Dict[float, Tuple[float, float]] = {}
  for s, w, v in zip(steps, wall, value):
    by_step[s] = (w, v)  # The later row wins.
  if not by_step:
    raise PlotError(f'{csv_path} has no rows yet.')
  order = sorted(by_step)
  return RunCurve(
      path=path, agent=agent, task=task,
      seed=int(seed) if isinstance(seed, (int, float)) else None,
      env_steps=np.asarray(order, np.float64),
      wall_time=np.asarray([by_step[s][0] for s in order], np.float64),
      value=np.asarray([by_step[s][1] for s in order], np.float64),
      settings=settings)


def aggregate(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray],
              interval: str = 'stderr', points: int = _GRID_POINTS
              ) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray,
                                  np.ndarray]]:
  """Mean and interval of several curves on a common x grid.

  Each curve is linearly interpolated onto `points` x values spanning the
  range that every curve covers (non-finite points are dropped first).

  Args:
    xs: each curve's x values (increasing).
    ys: each curve's y values.
    interval: 'stderr' (mean +/- standard error), 'minmax', or 'none'.
    points: grid size.

  Returns:
    (x [P], mean [P], low [P], high [P]), or None when the curves share no
    x range (or there are none).
  """
  if interval not in INTERVALS:
    raise ValueError(f'interval must be one of {INTERVALS}, got {interval!r}.')
  clean = []
  for x, y in zip(xs, ys):
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.any():
      clean.append((x[ok], y[ok]))
  if not clean:
    return None
  lo = max(x[0] for x, _ in clean)
  hi = min(x[-1] for x, _ in clean)
  if hi < lo:
    return None
  grid = np.linspace(lo, hi, points) if hi > lo else np.asarray([lo])
  table = np.stack([np.interp(grid, x, y) for x, y in clean])  # [R, P]
  mean = table.mean(0)
  if interval == 'minmax':
    low, high = table.min(0), table.max(0)
  elif interval == 'stderr' and len(clean) > 1:
    err = table.std(0, ddof=1) / math.sqrt(len(clean))
    low, high = mean - err, mean + err
  else:
    low = high = mean
  return grid, mean, low, high


def _import_matplotlib():
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        "roxie plot needs matplotlib, which is not installed: "
        "pip install 'roxie[plot]' (or pip install matplotlib).") from e
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  del matplotlib
  return Figure, FigureCanvasAgg


def plot_runs(run_dirs: Sequence[str], out: str, *,
              metric: str = 'eval_return', interval: str = 'stderr',
              width: int = 1200, height: int = 450, dpi: int = 100,
              title: Optional[str] = None) -> List[RunCurve]:
  """Draws the learning curves of runs to a PNG.

  Args:
    run_dirs: run directories (several seeds of a setup are grouped).
    out: the PNG file to write.
    metric: the metrics.csv column on the y axis.
    interval: the group band: 'stderr', 'minmax' or 'none'.
    width: image width in pixels.
    height: image height in pixels.
    dpi: dots per inch (text size scales with it).
    title: a title over both panels.

  Returns:
    The runs read, in the order given.

  Raises:
    PlotError: a run that cannot be read.
    ImportError: matplotlib is missing (the message names `roxie[plot]`).
  """
  if interval not in INTERVALS:
    raise PlotError(f'--interval must be one of {", ".join(INTERVALS)}.')
  if not run_dirs:
    raise PlotError('no run directories given.')
  runs = [read_run(d, metric) for d in run_dirs]
  Figure, FigureCanvasAgg = _import_matplotlib()  # pylint: disable=invalid-name

  groups = groups_of(runs)
  fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
  FigureCanvasAgg(fig)
  axes = fig.subplots(1, 2, sharey=True)
  wall_scale, wall_unit = _wall_unit(max(
      (np.nanmax(r.wall_time) for r in runs
       if np.isfinite(r.wall_time).any()), default=0.0))
  colors = [f'C{i % 10}' for i in range(len(groups))]
  for color, (name, members) in zip(colors, groups.items()):
    label = name + (f' ({len(members)} runs)' if len(members) > 1 else '')
    _draw_group(axes, members, color=color, label=label, interval=interval,
                wall_scale=wall_scale)
  _label_axes(axes, metric=metric, wall_unit=wall_unit, interval=interval,
              grouped=any(len(m) > 1 for m in groups.values()))
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  parent = os.path.dirname(os.path.abspath(out))
  os.makedirs(parent, exist_ok=True)
  fig.savefig(out, format='png')
  return runs


def _draw_group(axes, members: Sequence[RunCurve], *, color: str, label: str,
                interval: str, wall_scale: float) -> None:
  """Draws one group's curves on both panels (steps, then wall-clock time).

  A single run is one bold line; a group's runs are thin lines under their
  mean and its `interval` band, on the grid `aggregate` puts them on.
  """
  for ax, field, scale in ((axes[0], 'env_steps', 1.0),
                           (axes[1], 'wall_time', wall_scale)):
    xs = [getattr(r, field) / scale for r in members]
    ys = [r.value for r in members]
    single = len(members) == 1
    for x, y in zip(xs, ys):
      ax.plot(x, y, color=color, lw=2.0 if single else 0.8,
              alpha=1.0 if single else 0.35,
              marker='o' if len(x) < 3 else None, ms=3,
              label=label if single and ax is axes[0] else None)
    if single:
      continue
    agg = aggregate(xs, ys, interval)
    if agg is None:
      continue
    grid, mean, low, high = agg
    ax.plot(grid, mean, color=color, lw=2.0,
            label=label if ax is axes[0] else None)
    if interval != 'none':
      ax.fill_between(grid, low, high, color=color, alpha=0.2, lw=0)


def _label_axes(axes, *, metric: str, wall_unit: str, interval: str,
                grouped: bool) -> None:
  """Labels, titles and grids both panels, and adds the legend.

  The legend is titled by the band only when some group has several runs.
  """
  ylabel = metric.replace('_', ' ')
  axes[0].set_xlabel('environment steps')
  axes[0].set_ylabel(ylabel)
  axes[1].set_xlabel(f'wall-clock time ({wall_unit})')
  axes[0].set_title(f'{ylabel} vs environment steps', fontsize='medium')
  axes[1].set_title(f'{ylabel} vs wall-clock time', fontsize='medium')
  for ax in axes:
    ax.grid(True, alpha=0.3)
    ax.ticklabel_format(axis='x', style='sci', scilimits=(-3, 4),
                        useMathText=True)
  band = {'stderr': 'mean +/- standard error',
          'minmax': 'mean and min-max', 'none': 'mean'}[interval]
  axes[0].legend(loc='best', fontsize='small',
                 title=band if grouped else None, title_fontsize='small')


def _wall_unit(max_seconds: float) -> Tuple[float, str]:
  if max_seconds >= 3 * 3600:
    return 3600.0, 'hours'
  if max_seconds >= 180:
    return 60.0, 'minutes'
  return 1.0, 'seconds'


# -- command line ------------------------------------------------------------


def add_cli(sub: 'argparse._SubParsersAction') -> None:
  """Adds `roxie plot` to the CLI's subcommands."""
  p = sub.add_parser(
      'plot', help='plot learning curves of runs to a PNG',
      description='Plots evaluation return vs env steps and vs wall-clock '
      'time; runs of the same agent and task are grouped (mean and band), '
      'split by any setting in which they differ.')
  p.add_argument('runs', nargs='+', metavar='DIR', help='run directories')
  p.add_argument('-o', '--out', default='curves.png', help='PNG to write')
  p.add_argument('--metric', default='eval_return',
                 help='metrics.csv column to plot (default: eval_return)')
  p.add_argument('--interval', default='stderr', choices=INTERVALS,
                 help='band around a group mean (default: stderr)')
  p.add_argument('--width', type=int, default=1200, help='pixels')
  p.add_argument('--height', type=int, default=450, help='pixels')
  p.add_argument('--title', default=None)
  p.set_defaults(cli_main=cli_main)


def cli_main(args: argparse.Namespace) -> int:
  """Runs `roxie plot`."""
  import sys  # pylint: disable=g-import-not-at-top
  if args.width < 100 or args.height < 100:
    print('roxie: error: --width and --height must be >= 100 pixels.',
          file=sys.stderr)
    return 2
  try:
    runs = plot_runs(args.runs, args.out, metric=args.metric,
                     interval=args.interval, width=args.width,
                     height=args.height, title=args.title)
  except (PlotError, ImportError, OSError) as e:
    print(f'roxie: error: {e}', file=sys.stderr)
    return 2
  groups = len(groups_of(runs))
  print(f'wrote {args.out} ({len(runs)} runs, {groups} groups)')
  return 0
