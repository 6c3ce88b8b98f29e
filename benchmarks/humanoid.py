"""The humanoid benchmark: agents x {Stand, Walk, Run} x seeds at a budget.

Each (agent, task) trains its seeds as one population (`roxie train
--seeds`, one program) to `--steps` env steps on `--backend` ('cpu', native
MuJoCo, or 'mjx'), through the DMC benchmark's machinery
(`benchmarks/dmc.py`'s `train_pending_seeds`, with this script's
`--backend` added): each seed's row appended whole to
`benchmarks/results/humanoid.csv` (dmc.csv's columns) and every evaluation
to `humanoid_curves.csv`; resumable cell by cell (a cell with its row is
skipped; a killed population resumes from its last checkpoints in `--runs`,
exactly). A member is charged 1/P of the population's CPU seconds.

`--large` applies the original release's published large-scale settings
(shared/REFERENCES.md; `PUBLISHED` below): 1,024 envs, batch 512, 20 gradient
steps per 2,048 env steps, n-step 5, replay 500k (10k warm-up), [256, 256]
LayerNorm MLPs, Adam 3e-4, gradient clip 1, categorical critics of 101 atoms
on [-5, 120], MPO with 20 action samples, PPO 32-step rollouts x 1,024 envs,
5 epochs x 4 minibatches. It prints which Config field each setting became for
each agent and refuses (exit status 2, nothing written) a setting that an
agent's Config cannot take. The action repeat is the task's
(`roxie.envs.tasks.action_repeat`: 1 for the humanoid, as in the release).

`benchmarks/results/HUMANOID.md` puts roxie's score beside the release's
(score = the mean of the last 10 evaluations, as there), with env steps/s and
hours per cell, and links `humanoid_curves.png` (the learning curves, drawn
where matplotlib is installed). The release trained 500M env steps with one seed per cell.

  python benchmarks/humanoid.py --agents sac --tasks HumanoidWalk --steps 200000
  python benchmarks/humanoid.py --agents sac,ppo --large --backend mjx --seeds 3
  python benchmarks/humanoid.py --report        # HUMANOID.md only
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dmc  # pylint: disable=g-import-not-at-top,wrong-import-position

RESULTS = dmc.RESULTS
TASKS = ('HumanoidStand', 'HumanoidWalk', 'HumanoidRun')
MARKDOWN = 'HUMANOID.md'
CURVES_PNG = 'humanoid_curves.png'
LAST_EVALS = 10  # The release's score: the mean of the last 10 evaluations.
# A humanoid policy ships (roxie/policies/, beside CartpoleSwingup-sac) only
# from a run whose score reaches this: half of a perfect episode's 1,000, a
# humanoid that holds the task's posture or gait for most of an episode. The
# release's CPU cell scores 836-960 on HumanoidStand (its off-policy agents).
SHIP_THRESHOLD = 500.

OFF_POLICY = ('ddpg', 'td3', 'd4pg', 'td4', 'sac', 'mpo')
# The agents that explore with Gaussian action noise (SAC and MPO sample
# their own stochastic policies).
NOISY = ('ddpg', 'td3', 'd4pg', 'td4')


@dataclasses.dataclass(frozen=True)
class Setting:
  """One published setting, as the release states it, and where it goes.

  Attributes:
    text: the setting in the release's words.
    fields: for each agent it applies to, the Config fields and values.
  """
  text: str
  fields: Dict[str, Dict[str, Any]]


def _same(agents: Sequence[str], **fields) -> Dict[str, Dict[str, Any]]:
  return {a: dict(fields) for a in agents}


# The original release's large-scale settings (shared/REFERENCES.md, "The
# original Roxie release"), each mapped onto roxie's Config fields.
PUBLISHED: Tuple[Setting, ...] = (
    Setting('1,024 parallel envs', _same(OFF_POLICY + ('ppo',),
                                         num_envs=1024)),
    Setting('batch 512', _same(OFF_POLICY, batch_size=512)),
    Setting('20 gradient steps per 2,048 env steps',
            _same(OFF_POLICY, steps_per_iteration=2,
                  updates_per_iteration=20)),
    Setting('n-step 5', _same(OFF_POLICY, n_step=5)),
    Setting('replay 500k (min 10k)',
            _same(OFF_POLICY, replay_capacity=500_000, warmup_steps=10_000)),
    Setting('MLP [256, 256] with LayerNorm',
            _same(OFF_POLICY, hidden_sizes=(256, 256), layer_norm=True)),
    Setting('Adam 3e-4', {
        **_same(NOISY, actor_lr=3e-4, critic_lr=3e-4),
        'sac': dict(actor_lr=3e-4, critic_lr=3e-4, alpha_lr=3e-4),
        'mpo': dict(policy_lr=3e-4, critic_lr=3e-4)}),
    Setting('grad clip 1', _same(OFF_POLICY, max_grad_norm=1.0)),
    Setting('gamma 0.99, tau 0.005', _same(OFF_POLICY, discount=0.99,
                                           tau=0.005)),
    Setting('Gaussian exploration noise 0.4 -> 0.1',
            _same(NOISY, noise_start=0.4, noise_end=0.1)),
    Setting('categorical critics, 101 atoms on [-5, 120]',
            _same(('d4pg', 'td4'), num_atoms=101, v_min=-5.0, v_max=120.0)),
    Setting('TD3 target smoothing 0.2 (clip 0.5), policy delay 2',
            _same(('td3', 'td4'), target_noise=0.2, target_noise_clip=0.5,
                  policy_delay=2)),
    Setting('MPO: 20 action samples', _same(('mpo',), num_samples=20)),
    Setting('MPO: epsilon 0.1, KL bounds 1e-3 (mean) and 1e-5 (std), dual '
            'learning rate 1e-2',
            _same(('mpo',), epsilon=0.1, epsilon_mean=1e-3, epsilon_std=1e-5,
                  dual_lr=1e-2)),
    Setting('PPO: 32-step rollouts x 1,024 envs',
            _same(('ppo',), rollout_length=32)),
    Setting('PPO: 5 epochs x 4 minibatches',
            _same(('ppo',), num_epochs=5, num_minibatches=4)),
    Setting('PPO: clip 0.2, GAE lambda 0.95, entropy 0.002',
            _same(('ppo',), clip_epsilon=0.2, gae_lambda=0.95,
                  entropy_coef=0.002)),
)

# The release's figures (shared/REFERENCES.md): final score per task and
# hours per cell, for its CPU cell (EnvPool) and GPU cell (MuJoCo Warp).
REFERENCE = {
    'ddpg': dict(cpu=(924, 812, 498), cpu_h=7, gpu=(848, 846, 119), gpu_h=2.3),
    'td3': dict(cpu=(922, 820, 534), cpu_h=7.5, gpu=(860, 830, 140),
                gpu_h=2.5),
    'd4pg': dict(cpu=(960, 952, 692), cpu_h=10, gpu=(898, 378, 161),
                 gpu_h=2.4),
    'td4': dict(cpu=(957, 908, 616), cpu_h=13, gpu=(38, 985, 150), gpu_h=2.6),
    'sac': dict(cpu=(917, 841, 475), cpu_h=9.2, gpu=(925, 573, 450),
                gpu_h=2.6),
    'mpo': dict(cpu=(836, 775, 589), cpu_h=22.7, gpu=(725, 826, 153),
                gpu_h=3.0),
    'ppo': dict(cpu=(6, 830, 761), cpu_h=4.7, gpu=(229, 25, 7), gpu_h=1.8),
}
REFERENCE_STEPS = 500_000_000


class UsageError(dmc.UsageError):
  """Bad input: one line on stderr, exit status 2, nothing written."""


def large_overrides(agent: str, config: Any
                    ) -> Tuple[Dict[str, Any], List[Tuple[str, str]]]:
  """The published large settings as `agent`'s `--set` keys.

  Args:
    agent: a name in `roxie.agents.AGENTS`.
    config: the agent's Config (an instance or the dataclass), whose fields,
      with the run settings every agent takes (num_envs, total_steps,
      action_repeat: `roxie.run.RUN_SETTINGS`), decide what it can take.

  Returns:
    (overrides, lines): the field values, and for each published setting
    that applies to `agent` its text and the fields it became
    ('num_envs=1024').

  Raises:
    UsageError: no published settings for `agent`, or a setting that applies
      to it names a field its Config does not have.
  """
  from roxie.run import RUN_SETTINGS  # pylint: disable=g-import-not-at-top
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  names = set(config_lib.field_names(config)) | set(RUN_SETTINGS)
  overrides: Dict[str, Any] = {}
  lines: List[Tuple[str, str]] = []
  missing = []
  for s in PUBLISHED:
    fields = s.fields.get(agent)
    if fields is None:
      continue
    absent = [k for k in fields if k not in names]
    if absent:
      missing.append(f'{s.text!r} (needs {", ".join(absent)})')
      continue
    overrides.update(fields)
    lines.append((s.text, ', '.join(f'{k}={_text(v)}'
                                    for k, v in fields.items())))
  if not lines and not missing:
    raise UsageError(f'--large: the release published no settings for '
                     f'{agent!r}')
  if missing:
    raise UsageError(f'--large: {agent} cannot take the published setting(s) '
                     f'{"; ".join(missing)}: its Config has no such field')
  return overrides, lines


def _text(v: Any) -> str:
  """A value as `--set` takes it."""
  if isinstance(v, (tuple, list)):
    return ','.join(str(x) for x in v)
  return str(v)


# ------------------------------------------------------------------ arguments


def parse_args(argv=None) -> argparse.Namespace:
  """Reads and checks the command line; raises UsageError on bad input."""
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--agents', default='sac')
  p.add_argument('--tasks', default='all',
                 help=f"comma-separated, or 'all' ({', '.join(TASKS)})")
  p.add_argument('--seeds', default='1',
                 help='comma-separated seeds, or N for 0..N-1 (default 1: '
                 'seed 0, as the release ran one)')
  p.add_argument('--steps', type=int, default=1_000_000,
                 help='env-step budget of each run')
  p.add_argument('--backend', default='cpu', choices=('cpu', 'mjx'))
  p.add_argument('--large', action='store_true',
                 help="the release's published large-scale settings")
  p.add_argument('--set', dest='sets', action='append', default=[],
                 metavar='FIELD=VALUE',
                 help='config override (repeatable; wins over --large)')
  p.add_argument('--variant', default=None,
                 help="label of this configuration in the CSV (default "
                      "'default' or 'large'; required with --set); the "
                      'backend is appended')
  p.add_argument('--eval-every', type=int, default=20_000)
  p.add_argument('--eval-episodes', type=int, default=10)
  p.add_argument('--runs', default=os.path.join('runs', 'humanoid'),
                 help='where the run folders (checkpoints) live')
  p.add_argument('--results', default=os.path.join(RESULTS, 'humanoid.csv'))
  p.add_argument('--curves',
                 default=os.path.join(RESULTS, 'humanoid_curves.csv'))
  p.add_argument('--report', action='store_true',
                 help=f'only write {MARKDOWN} from the CSVs')
  args = p.parse_args(argv)
  from roxie import agents  # pylint: disable=g-import-not-at-top
  args.agents = dmc._parse_list(args.agents, str.lower, 'agents')  # pylint: disable=protected-access
  for a in args.agents:
    if a not in agents.AGENTS:
      raise UsageError(f'unknown agent {a!r}; choose from '
                       f'{", ".join(agents.AGENTS)}')
  args.tasks = (list(TASKS) if args.tasks == 'all'
                else dmc._parse_list(args.tasks, str, 'tasks'))  # pylint: disable=protected-access
  for t in args.tasks:
    if t not in TASKS:
      raise UsageError(f'unknown task {t!r}; the humanoid tasks are '
                       f'{", ".join(TASKS)}')
  seeds = dmc._parse_list(args.seeds, int, 'seeds')  # pylint: disable=protected-access
  args.seeds = (list(range(seeds[0])) if len(seeds) == 1
                and ',' not in args.seeds else seeds)
  if not args.seeds or min(args.seeds) < 0:
    raise UsageError('--seeds: give N >= 1, or seeds >= 0')
  if args.steps <= 0 or args.eval_every <= 0:
    raise UsageError('--steps and --eval-every must be positive')
  if args.eval_episodes < 10:
    raise UsageError('--eval-episodes must be >= 10 (the table reports means '
                     'of at least 10 episodes)')
  sets = []
  for s in args.sets:
    if '=' not in s:
      raise UsageError(f'--set {s!r}: expected FIELD=VALUE')
    k, v = s.split('=', 1)
    sets.append((k.strip(), v.strip()))
  if args.variant is None:
    if sets:
      raise UsageError('--set needs --variant NAME: it labels these rows in '
                       'the CSV beside the defaults')
    args.variant = 'large' if args.large else 'default'
  if not dmc.VARIANT_NAME.fullmatch(args.variant):
    raise UsageError(f'--variant {args.variant!r}: letters, digits, _, . and '
                     '- only (it names run folders)')
  if ((args.variant == 'default' and (sets or args.large))
      or (args.variant == 'large' and (sets or not args.large))):
    meant = ("the release's large settings (--large) alone"
             if args.variant == 'large' else "each recipe's defaults alone")
    raise UsageError(f'--variant {args.variant} labels {meant}; rows made '
                     'with other settings need a name of their own, e.g. '
                     '--variant n2')
  # Each agent's settings, checked now so that bad input writes nothing.
  args.settings, args.large_lines = {}, {}
  for a in args.agents:
    module = agents.get_agent(a)
    settings: Dict[str, str] = {}
    if args.large:
      large, args.large_lines[a] = large_overrides(a, module.Config)
      settings.update({k: _text(v) for k, v in large.items()})
    from roxie.envs import tasks as task_registry  # pylint: disable=g-import-not-at-top
    repeats = {task_registry.action_repeat(t) for t in args.tasks}
    if len(repeats) == 1:  # 1 for all three humanoid tasks (a run setting).
      settings['action_repeat'] = str(repeats.pop())
    settings.update(dict(sets))
    problem = dmc.settings_problem(a, settings)
    if problem:
      raise UsageError(f'{a}: {problem}')
    args.settings[a] = settings
  args.user_sets = sets
  return args


def variant_label(args: argparse.Namespace) -> str:
  """The CSV's variant for these settings: the label and the backend."""
  return f'{args.variant}-{args.backend}'


def split_variant(variant: str) -> Tuple[str, str]:
  """(label, backend) of a humanoid.csv variant ('large-mjx')."""
  label, _, backend = variant.rpartition('-')
  return label, backend


# ----------------------------------------------------------------- training


def cell_args(args: argparse.Namespace, agent: str) -> argparse.Namespace:
  """The namespace `benchmarks/dmc.py`'s cell machinery reads, for `agent`."""
  return argparse.Namespace(
      variant=variant_label(args),
      overrides=sorted(args.settings[agent].items()), runs=args.runs,
      eval_every=args.eval_every, eval_episodes=args.eval_episodes,
      episode_length=None, results=args.results, curves=args.curves,
      budgets=[args.steps], machine=None)


def with_backend(args: argparse.Namespace, cmd: Sequence[str]) -> List[str]:
  """`cmd` with `--backend`, where it starts runs (a resume keeps its own)."""
  if '--resume' in cmd:
    return list(cmd)
  return list(cmd) + ['--backend', args.backend]


def start_command(args: argparse.Namespace, agent: str, task: str,
                  seeds: Sequence[int], root: str) -> List[str]:
  """The `roxie train` arguments that start a cell's seeds: one population.

  dmc.py's command (`--seeds`, the budget, the settings as `--set`, the
  action repeat made explicit) with this script's `--backend`: what `train`
  runs for seeds without a run.
  """
  return with_backend(args, dmc.new_run_command(
      cell_args(args, agent), agent, task, seeds, args.steps, root))


def train(args: argparse.Namespace) -> int:
  """Trains every missing cell; returns how many children failed.

  `dmc.train_pending_seeds`, as the DMC benchmark does: a cell's pending seeds train
  as one population (`roxie train --seeds`), a killed one resumes from its
  checkpoints, a cell with its row is skipped.
  """
  os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
  identity = dmc.code_identity()
  failed = 0
  for agent in args.agents:
    cell = cell_args(args, agent)
    for task in args.tasks:
      failed += dmc.train_pending_seeds(
          cell, agent, task, args.seeds, identity,
          command=lambda cmd: with_backend(args, cmd), tag='humanoid')
  return failed


# ------------------------------------------------------------------- report


def cell_scores(rows: Sequence[Dict[str, str]],
                curves: Sequence[Dict[str, str]]) -> List[Dict[str, Any]]:
  """One record per results row: its score and speed.

  score: the mean of the run's last `LAST_EVALS` evaluations up to the row's
  env steps (fewer where the run has fewer; `evals` says how many), or the
  row's own evaluation where the curves CSV has none of the run.
  """
  num = dmc.float_or_nan
  by_run: Dict[tuple, List[Tuple[float, float]]] = {}
  for c in curves:
    key = (c['agent'], c['task'], c['seed'], c['variant'])
    by_run.setdefault(key, []).append((num(c['env_steps']),
                                       num(c['eval_return'])))
  out = []
  for r in rows:
    steps = num(r['env_steps'])
    points = sorted(p for p in by_run.get(
        (r['agent'], r['task'], r['seed'], r['variant']), ())
                    if p[0] <= steps)
    last = [ret for _, ret in points[-LAST_EVALS:]]
    score = sum(last) / len(last) if last else num(r['eval_return'])
    wall = num(r['wall_s'])
    label, backend = split_variant(r['variant'])
    out.append(dict(agent=r['agent'], task=r['task'], seed=int(r['seed']),
                    label=label, backend=backend, budget=int(r['budget']),
                    env_steps=steps, score=score, evals=len(last),
                    sps=steps / wall if wall > 0 else float('nan'),
                    hours=wall / 3600, cpu_hours=num(r['cpu_s']) / 3600,
                    commit=r['commit'], machine=r['machine']))
  return out


def _fmt(x: float, digits: int = 0) -> str:
  return '-' if x != x else f'{x:,.{digits}f}'


def _mean(xs: Sequence[float]) -> float:
  return sum(xs) / len(xs) if xs else float('nan')


def markdown(rows: Sequence[Dict[str, str]],
             curves: Sequence[Dict[str, str]], command: str,
             plot: bool = False) -> str:
  """HUMANOID.md: roxie's scores beside the release's, per agent and task.

  Args:
    rows: humanoid.csv's rows (dmc.COLUMNS).
    curves: humanoid_curves.csv's rows (dmc.CURVE_COLUMNS).
    command: the command that regenerates the file.
    plot: whether `CURVES_PNG` was drawn beside it (it is then linked).

  Returns:
    The markdown text.
  """
  cells = cell_scores(rows, curves)
  lines = [
      '# The humanoid benchmark',
      '',
      f'Generated by `{command}` from `humanoid.csv` and '
      '`humanoid_curves.csv`; do not edit.',
      '',
      f'Score: the mean of the last {LAST_EVALS} evaluations of a run up to '
      'its budget (each the mean return of the run\'s evaluation episodes), '
      'as the original release scored (vittorione94/roxie, release v1: '
      f'{REFERENCE_STEPS // 1_000_000}M env steps, 1,024 envs, one seed; its '
      'CPU cell is EnvPool over dm_control, its GPU cell mujoco_playground '
      'over MuJoCo Warp; shared/REFERENCES.md). Where seeds are several, '
      'roxie\'s score is their mean, each seed\'s beside it. env steps/s '
      'and hours are wall-clock per run (cell), with CPU hours beside.',
      '',
  ]
  if not cells:
    lines.append('No rows yet.')
    return '\n'.join(lines) + '\n'
  lines += [
      '| agent | task | backend | settings | seeds | env steps | roxie score '
      '| per seed | release CPU cell | release GPU cell | env steps/s | '
      'hours per cell | CPU hours |',
      '|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|',
  ]
  groups: Dict[tuple, List[Dict[str, Any]]] = {}
  for c in cells:
    groups.setdefault((c['agent'], c['task'], c['backend'], c['label'],
                       c['budget']), []).append(c)
  agent_order = list(REFERENCE)

  def order(key):
    agent, task = key[0], key[1]
    return (agent_order.index(agent) if agent in agent_order else 99, agent,
            TASKS.index(task) if task in TASKS else 99, key[2:])

  for key in sorted(groups, key=order):
    agent, task, backend, label, _ = key
    group = sorted(groups[key], key=lambda c: c['seed'])
    ref = REFERENCE.get(agent)
    i = TASKS.index(task) if task in TASKS else None
    ref_cpu = ref_gpu = '-'
    if ref is not None and i is not None:
      ref_cpu = f'{ref["cpu"][i]} (~{ref["cpu_h"]:g} h)'
      ref_gpu = f'{ref["gpu"][i]} (~{ref["gpu_h"]:g} h)'
    few = min(c['evals'] for c in group)
    per_seed = ', '.join(f'{c["seed"]}: {c["score"]:.0f}' for c in group)
    if few == 0:
      per_seed += ' (no curve: the budget evaluation)'
    elif few < LAST_EVALS:
      per_seed += f' (fewest evals: {few})'
    lines.append(
        f'| {agent} | {task} | {backend} | {label} | {len(group)} | '
        f'{_fmt(_mean([c["env_steps"] for c in group]))} | '
        f'{_fmt(_mean([c["score"] for c in group]))} | {per_seed} | '
        f'{ref_cpu} | {ref_gpu} | {_fmt(_mean([c["sps"] for c in group]))} | '
        f'{_fmt(_mean([c["hours"] for c in group]), 2)} | '
        f'{_fmt(_mean([c["cpu_hours"] for c in group]), 2)} |')
  best = max(cells, key=lambda c: c['score'])
  from roxie import export  # pylint: disable=g-import-not-at-top
  bundle = f'{best["task"]}-{best["agent"]}'
  if best['score'] < SHIP_THRESHOLD:
    verdict = 'below it, so no humanoid policy ships'
  elif bundle in export.shipped_policies():
    verdict = (f'it clears the threshold and ships as roxie/policies/'
               f'{bundle} (`roxie.load_policy({bundle!r})`)')
  else:
    verdict = ('it clears the threshold: export it (`roxie export`) into '
               'roxie/policies/ with its card')
  lines += ['', f'Shipping: a humanoid policy ships in roxie/policies/ only '
            f'from a run scoring >= {SHIP_THRESHOLD:g}. Best run so far: '
            f'{best["agent"]} on {best["task"]} ({best["label"]}, seed '
            f'{best["seed"]}), {best["score"]:.0f}: {verdict}.']
  commits = sorted({c['commit'] for c in cells})
  machines = sorted({c['machine'] for c in cells})
  lines += ['', f'Commits: {", ".join(commits)}. Machines: '
            f'{", ".join(machines)}.']
  if plot:
    lines += ['', f'`{CURVES_PNG}`: evaluation return against env steps, per '
              'task and per agent and settings (thin lines: seeds; thick: '
              'their mean, with a 95% bootstrap band where seeds are several).',
              '', f'![learning curves]({CURVES_PNG})']
  return '\n'.join(lines) + '\n'


def plot_curves(curves: Sequence[Dict[str, str]], path: str) -> bool:
  """Draws the curves (dmc_report's figure); False without curves or plots.

  Needs matplotlib (`pip install -e ".[plot]"`); without it the report is
  the table alone.
  """
  import dmc_report  # pylint: disable=g-import-not-at-top
  points, _, _ = dmc_report.curve_points(curves)
  try:
    return dmc_report.plot_curves(
        points, path, resamples=1000, seed=0,
        title='Humanoid: evaluation return (mean over seeds, 95% bootstrap '
              'band)')
  except ImportError:
    return False


def write_report(results: str, curves: str) -> str:
  """Writes HUMANOID.md beside the results CSV; returns its path.

  Holds dmc.py's locks on both CSVs from the read to the move, as dmc.py's
  report does: another job's rows appended meanwhile wait, so the last
  HUMANOID.md written holds every row, and two reports never write one
  temporary file at once.
  """
  path = os.path.join(os.path.dirname(os.path.abspath(results)), MARKDOWN)
  command = 'python benchmarks/humanoid.py --report'
  if os.path.abspath(results) != os.path.join(RESULTS, 'humanoid.csv'):
    command += f' --results {results} --curves {curves}'
  with dmc.locked_all(p for p in (results, curves) if os.path.exists(p)):
    rows = dmc.read_rows(results, dmc.COLUMNS)
    points = dmc.read_rows(curves, dmc.CURVE_COLUMNS)
    drawn = bool(rows) and plot_curves(
        points, os.path.join(os.path.dirname(path), CURVES_PNG))
    text = markdown(rows, points, command, plot=drawn)
    with open(path + '.tmp', 'w') as f:
      f.write(text)
    os.replace(path + '.tmp', path)
  return path


def main(argv=None) -> int:
  try:
    args = parse_args(argv)
    dmc.read_rows(args.results, dmc.COLUMNS)  # Refuse another version's.
    dmc.read_rows(args.curves, dmc.CURVE_COLUMNS)
  except dmc.UsageError as e:
    print(f'humanoid.py: error: {e}', file=sys.stderr)
    return 2
  if args.large:
    for agent, lines in args.large_lines.items():
      print(f'[humanoid] --large, {agent}: each published setting and the '
            'Config field(s) it became:')
      width = max(len(text) for text, _ in lines)
      for text, fields in lines:
        print(f'  {text:{width}s} -> {fields}')
      other = sorted({s.text for s in PUBLISHED} - {t for t, _ in lines})
      if other:
        print(f'  (not {agent}\'s: {"; ".join(other)})')
  for agent in args.agents:
    print(f'[humanoid] {agent}: --set ' + ' '.join(
        f'{k}={v}' for k, v in sorted(args.settings[agent].items())),
          flush=True)
  if not args.report and dmc.refuse_resumes(
      [p for agent in args.agents for task in args.tasks
       for p in dmc.resume_problems(cell_args(args, agent), agent, task,
                                    args.seeds)], 'humanoid.py'):
    return 2
  try:
    failed = 0 if args.report else train(args)
  except dmc.Stopped as e:  # SIGINT or SIGTERM: the child checkpointed.
    print(f'[humanoid] {e}.', file=sys.stderr)
    return 128 + e.signum
  if os.path.exists(args.results):
    print(f'[humanoid] wrote {write_report(args.results, args.curves)}')
  if failed:
    print(f'[humanoid] {failed} run(s) failed; see above.', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
