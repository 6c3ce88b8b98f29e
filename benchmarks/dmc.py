"""The DeepMind Control benchmark: agents x tasks x seeds at env-step budgets.

Each (agent, task) trains its seeds once, on the native CPU backend, as one
population (`roxie train --seeds`: all seeds in one compiled program, one
run directory per seed) in a child process, up to the largest budget; for
each seed, the evaluation nearest each budget gives that budget's row,
which records the evaluation's actual
env steps. (Evaluations land where a compiled call ends, and a call's env
steps are a multiple of num_envs x action repeat, which need not divide
`--eval-every`: with 8 envs and action repeat 8, calls of 19,968 steps put
evaluations at 99,840 and 119,808; with action repeat 2, calls of 16,000
(roxie train's 1,000-iteration cap) put them at 80,000 and 112,000. The
first evaluation at or after the budget, this script's first rule, took
119,808 for 100k.)
Evaluation is the run's own: the mean return of `--eval-episodes` (default
10) deterministic 1000-step episodes.

Results are appended to `benchmarks/results/dmc.csv`, one row per
(agent, task, seed, budget, variant), one whole line per write, so a kill
never leaves half a row; `benchmarks/results/dmc_curves.csv` gets every
evaluation of a finished run (the learning curves the report draws).
Resumable: a cell already in the CSV is skipped; a run killed part-way
resumes from its last checkpoint in `--runs` (`roxie train --resume`), and
only if its config.json trains what is asked: a folder made with other
`--set` values under the same variant, or before the recipe's defaults
changed, is refused (exit 2, naming the fields) before anything trains.
To stop, send SIGINT or SIGTERM (Ctrl-C, `timeout -s INT`): the training
child checkpoints after its current call and dmc.py exits 130 (143), the
rows of the evaluations made so far written; a second signal a second or
more later stops the child at once, its last checkpoint kept.
CPU seconds (user + system of the training process, summed over resumes)
sit beside wall-clock: on a shared machine they are the figure to compare.
A seed trained in a population of P is charged 1/P of the process's CPU
time (the members share one program) and all of its wall-clock. Seeds
trained as single runs by dmc.py up to 4f9daed resume as single runs.

The action repeat comes from one table shared by every recipe
(`roxie.envs.tasks.ACTION_REPEAT`, the values of PlaNet / CURL / DrQ) unless
`--set action_repeat=N` says otherwise.

  python benchmarks/dmc.py --agents sac --seeds 0,1,2          # the six tasks
  python benchmarks/dmc.py --agents sac,td3 --tasks CheetahRun --budgets 100000
  python benchmarks/dmc.py --report                            # DMC.md only

The report (`benchmarks/dmc_report.py`: DMC.md and plots, beside the
results CSV) is rewritten after the runs. The exit status is 1 when a run
failed (the others still run), 2 on bad input (nothing written).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import io
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, 'results')

# The standard six state-based tasks of the DMC sample-efficiency tables.
STANDARD_TASKS = ('CartpoleSwingup', 'ReacherEasy', 'FingerSpin', 'CheetahRun',
                  'WalkerWalk', 'BallInCup')
BUDGETS = (100_000, 500_000)
# A variant names a folder under --runs and the rows of the CSV.
VARIANT_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]*')

COLUMNS = ('agent', 'task', 'seed', 'budget', 'variant', 'overrides',
           'env_steps', 'eval_return', 'eval_return_std', 'eval_episodes',
           'cpu_s', 'wall_s', 'version', 'commit', 'machine')
CURVE_COLUMNS = ('agent', 'task', 'seed', 'variant', 'env_steps',
                 'eval_return', 'cpu_s', 'wall_s', 'version', 'commit')

# Sidecar in each run folder: CPU/wall seconds spent in earlier processes and
# the evaluations seen so far (with the CPU time at which each landed).
STATE_FILE = 'dmc_bench.json'


class UsageError(Exception):
  """Bad input: reported as one line, exit status 2, nothing written."""


def _cpu_seconds(pid: int) -> Optional[float]:
  """User + system CPU time of a live process (Linux /proc), in seconds."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except OSError:
    return None
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def machine() -> str:
  model = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          model = line.split(':', 1)[1].strip()
          break
  except OSError:
    pass
  return f'{model} x{os.cpu_count()}'


def code_identity(root: Optional[str] = None) -> Tuple[str, str]:
  """(roxie version, git commit of the imported roxie; '+dirty' if edited).

  Edits under benchmarks/results/ (the CSVs, DMC.md and plots these scripts
  write themselves) do not count: a second dmc.py run started after a first
  one rewrote DMC.md trains the same code.
  """
  import roxie  # pylint: disable=g-import-not-at-top
  if root is None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(roxie.__file__)))
  try:
    commit = subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'],
                            cwd=root, capture_output=True, text=True,
                            check=True).stdout.strip()
    dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no',
                            '--', '.', ':(exclude)benchmarks/results'],
                           cwd=root, capture_output=True, text=True).stdout.strip()
    if dirty:
      commit += '+dirty'
  except (OSError, subprocess.CalledProcessError):
    commit = 'unknown'
  return roxie.__version__, commit


def read_rows(path: str, columns: Sequence[str]) -> List[Dict[str, str]]:
  """The rows of a results CSV; refuses a file written with other columns."""
  if not os.path.exists(path) or os.path.getsize(path) == 0:
    return []
  with open(path, newline='') as f:
    reader = csv.DictReader(f)
    if tuple(reader.fieldnames or ()) != tuple(columns):
      raise UsageError(
          f'{path} has columns {reader.fieldnames}, not this version\'s '
          f'{list(columns)}; move it aside or pass --results another file.')
    return [r for r in reader if None not in r and '' not in (r['agent'],)]


def float_or_nan(text: Optional[str]) -> float:
  """A CSV cell as a float: NaN where it is missing, empty or not a number."""
  try:
    return float(text)
  except (TypeError, ValueError):
    return math.nan


_HELD = threading.local()  # This thread's lock files held, and how deep.


def lock_path(path: str) -> str:
  """The lock file beside the CSV at `path`: `<dir>/.<name>.lock`.

  Of the file's real path, so every name of one CSV shares one lock.
  """
  head, tail = os.path.split(os.path.realpath(path))
  return os.path.join(head, f'.{tail}.lock')


@contextlib.contextmanager
def locked(path: str):
  """Holds an exclusive lock on the CSV at `path`.

  Two dmc.py processes share the result CSVs: each appends its rows and
  then rewrites DMC.md from them. Appends and the report's read-and-write
  (dmc_report.main, humanoid.write_report; relabel_default.py's rewrite)
  take the lock, so no report can read the CSVs, then let another job
  append and write its newer DMC.md, then overwrite it with the older one:
  the last DMC.md written holds every row. (One had lacked a job's three
  500k rows, appended seconds after another job's report read the CSV.)

  The lock is a file beside the CSV (`lock_path`), not the CSV itself:
  relabel_default.py moves a new CSV over the old one while holding it, and
  then a job that had waited on the old file's lock and one that took the
  new file's would both hold one. Open the CSV only once the lock is held.

  Reentrant within a thread: a caller holding the lock may call code that
  takes it again (flock, per open file, would wait on itself forever; a
  dmc.py job hung so, its report's code newer than its own).
  """
  key = lock_path(path)
  held = _HELD.__dict__.setdefault('counts', {})
  if held.get(key):
    held[key] += 1
    try:
      yield
    finally:
      held[key] -= 1
    return
  with open(key, 'a') as f:  # flock: per open file, across processes (and
    fcntl.flock(f, fcntl.LOCK_EX)  # threads, each opening its own).
    held[key] = 1
    try:
      yield
    finally:
      held[key] = 0
      fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def locked_all(paths: Iterable[str]):
  """Holds `locked` on each distinct path, always in one order (no deadlock)."""
  with contextlib.ExitStack() as stack:
    for path in sorted({os.path.realpath(p) for p in paths}):
      stack.enter_context(locked(path))
    yield


def append_row(path: str, columns: Sequence[str], row: Dict[str, object]) -> None:
  """Appends one row (header first on a new file) in one write + fsync."""
  with locked(path):
    buf = io.StringIO()
    writer = csv.writer(buf)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
      writer.writerow(columns)
    else:
      with open(path, 'rb') as f:  # A torn last line (no newline) gets one.
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b'\n':
          buf.write('\n')
    writer.writerow([row[c] for c in columns])
    with open(path, 'a', newline='') as f:
      f.write(buf.getvalue())
      f.flush()
      os.fsync(f.fileno())


def write_report(results: str, curves: str) -> int:
  """dmc_report.py on the CSVs (DMC.md and plots; it holds their locks)."""
  import dmc_report  # pylint: disable=g-import-not-at-top
  return dmc_report.main(['--results', results, '--curves', curves])


def budget_evaluation(evals: Sequence[dict], budget: int) -> Optional[dict]:
  """The evaluation that gives `budget`'s row, or None if not decided yet.

  The evaluation nearest the budget in env steps (the later one on a tie),
  decided once an evaluation at or after the budget exists: the first one
  there, or the last one before it if that is nearer.

  Args:
    evals: evaluations, each a dict with 'env_steps' (any order).
    budget: the env-step budget.

  Returns:
    The chosen evaluation, or None while none is at or after the budget.
  """
  ordered = sorted(evals, key=lambda e: e['env_steps'])
  after = [e for e in ordered if e['env_steps'] >= budget]
  if not after:
    return None
  before = [e for e in ordered if e['env_steps'] < budget]
  if before and budget - before[-1]['env_steps'] < (
      after[0]['env_steps'] - budget):
    return before[-1]
  return after[0]


def append_curves(path: str, evals: Sequence[dict], fields: Dict[str, object]
                  ) -> int:
  """Appends a run's evaluations to the curves CSV, skipping those it has.

  A run extended to a larger budget later finishes again; its earlier
  evaluations are in the file already and are not written twice.

  Args:
    path: the curves CSV.
    evals: the run's evaluations (env_steps, eval_return, cpu_s, wall_s).
    fields: the run's other columns (agent, task, seed, variant, version,
      commit).

  Returns:
    How many rows were appended.
  """
  run = (str(fields['agent']), str(fields['task']), str(fields['seed']),
         str(fields['variant']))
  have = {int(float(r['env_steps'])) for r in read_rows(path, CURVE_COLUMNS)
          if (r['agent'], r['task'], r['seed'], r['variant']) == run}
  written = 0
  for e in sorted(evals, key=lambda e: e['env_steps']):
    if int(e['env_steps']) in have:
      continue
    append_row(path, CURVE_COLUMNS, dict(
        fields, env_steps=e['env_steps'],
        eval_return=round(e['eval_return'], 2), cpu_s=e['cpu_s'],
        wall_s=e['wall_s']))
    written += 1
  return written


def new_run_command(args, agent: str, task: str, seeds: Sequence[int],
                    steps: int, root: str) -> List[str]:
  """`roxie train` arguments that start a population of the cell's seeds.

  The members go in `root` as `<agent>-<task>-seed<k>`. The task table's
  action repeat goes, as `--set` (a run setting every agent takes), to
  every agent; `roxie train` applies the same table itself, so the command
  only makes it explicit.
  """
  overrides = dict(args.overrides)
  sets = dict(overrides)
  sets['action_repeat'] = str(action_repeat_for(task, overrides))
  cmd = ['train', '--agent', agent, '--task', task,
         '--seeds', ','.join(str(int(s)) for s in seeds) + ',',
         '--steps', str(steps), '--out', root, '--eval-every',
         str(args.eval_every), '--eval-episodes', str(args.eval_episodes)]
  if args.episode_length:
    cmd += ['--episode-length', str(args.episode_length)]
  for k, v in sorted(sets.items()):
    cmd += ['--set', f'{k}={v}']
  return cmd


def action_repeat_for(task: str, overrides: Dict[str, str]) -> int:
  if 'action_repeat' in overrides:
    return int(overrides['action_repeat'])
  from roxie.envs import tasks  # pylint: disable=g-import-not-at-top
  return tasks.action_repeat(task)


def _load_state(run_dir: str) -> dict:
  path = os.path.join(run_dir, STATE_FILE)
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  return {'cpu_s': 0.0, 'wall_s': 0.0, 'evals': []}


def _save_state(run_dir: str, state: dict) -> None:
  path = os.path.join(run_dir, STATE_FILE)
  with open(path + '.tmp', 'w') as f:
    json.dump(state, f)
  os.replace(path + '.tmp', path)


def _metrics(run_dir: str) -> List[Dict[str, str]]:
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.exists(path):
    return []
  with open(path, newline='') as f:
    text = f.read()
  if not text.endswith('\n'):  # The row being written: not yet whole.
    text = text[:text.rfind('\n') + 1]
  return [r for r in csv.DictReader(io.StringIO(text))
          if r.get('eval_return') not in (None, '')]


def _member_dir(args, agent: str, task: str, seed: int) -> str:
  """A seed's run directory: `<agent>-<task>-seed<k>` under --runs (under
  --runs/<variant> for a variant other than the default)."""
  root = (args.runs if args.variant == 'default'
          else os.path.join(args.runs, args.variant))
  return os.path.join(root, f'{agent}-{task}-seed{seed}')


def _legacy_dir(args, agent: str, task: str, seed: int) -> str:
  """Where dmc.py up to 4f9daed put a seed's single run (kept to resume it)."""
  return os.path.join(args.runs, f'{agent}-{task}-seed{seed}' + (
      '' if args.variant == 'default' else f'-{args.variant}'))


def plan_children(args, agent: str, task: str, pending: Sequence[int]
                  ) -> List[Tuple[List[Tuple[int, str]], List[str]]]:
  """The `roxie train` children that train the pending seeds of a cell.

  A seed with a single run of its own from before (a run directory without
  population.json) resumes it alone; seeds already in a population resume
  that population (all its members); the rest start one population: all
  their seeds in one compiled program (`roxie train --seeds`).

  Returns:
    [(members [(seed, run_dir)], roxie train arguments)].
  """
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  steps = str(max(args.budgets))
  children, fresh, covered = [], [], set()
  for seed in pending:
    if seed in covered:
      continue
    single = _legacy_dir(args, agent, task, seed)
    member = _member_dir(args, agent, task, seed)
    if os.path.exists(os.path.join(member, run_lib.POPULATION_FILE)):
      dirs, _ = run_lib.population_dirs(member)
      members = [(int(os.path.basename(os.path.normpath(d)).rsplit(
          'seed', 1)[1]), d) for d in dirs]
      covered.update(s for s, _ in members)
      children.append((members,
                       ['train', '--resume', member, '--steps', steps]))
    elif os.path.exists(os.path.join(single, run_lib.CONFIG_FILE)):
      children.append(([(seed, single)],
                       ['train', '--resume', single, '--steps', steps]))
    else:
      fresh.append(seed)
  if fresh:
    members = [(s, _member_dir(args, agent, task, s)) for s in fresh]
    children.append((members, new_run_command(
        args, agent, task, fresh, max(args.budgets),
        os.path.dirname(members[0][1]))))
  return children


def resume_differences(args, agent: str, task: str, run_dir: str
                       ) -> List[str]:
  """How a run folder that dmc.py would resume differs from the cell asked.

  A resumed run trains on with its own config.json, while its rows are
  labelled with the variant and overrides of this call: a folder made with
  other `--set` values under the same variant, or before the recipe's
  defaults changed, would be continued as it was and filed under the wrong
  label. Compared: every Config field (the recipe's defaults as they are
  now, with the `--set` fields), the number of envs, the action repeat and
  the episode length.

  Returns:
    One line per difference; empty if the folder trains what is asked.
  """
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie.run import config as run_config  # pylint: disable=g-import-not-at-top
  try:
    run, _, saved = run_config.load_run_config(run_dir)
  except (OSError, ValueError) as e:
    return [f'its config.json cannot be read ({e})']
  overrides = dict(args.overrides)
  try:
    module, asked = run_config.resolve_config(agent, overrides)
  except config_lib.ConfigError as e:
    return [f'the cell\'s --set does not make a {agent} Config ({e})']
  have, want = config_lib.to_dict(saved), config_lib.to_dict(asked)
  diffs = [f'{k}: the run has {have.get(k)!r}, the cell asks for {v!r}'
           for k, v in sorted(want.items()) if have.get(k) != v]
  envs = run_config.resolve_run_defaults(module, overrides).num_envs
  if run.num_envs != envs:
    diffs.append(f'num_envs: the run has {run.num_envs}, the cell asks for '
                 f'{envs}')
  repeat = action_repeat_for(task, overrides)
  if run.action_repeat != repeat:
    diffs.append(f'action_repeat: the run has {run.action_repeat}, the cell '
                 f'asks for {repeat}')
  length = (run.env_options or {}).get('episode_length')
  if length != (args.episode_length or None):
    diffs.append(f'episode_length: the run has {length or "the default"}, '
                 f'the cell asks for {args.episode_length or "the default"}')
  return diffs


def resume_problems(args, agent: str, task: str,
                    seeds: Sequence[int]) -> List[str]:
  """Why a cell's pending seeds cannot be trained as asked, one line each.

  Two cases: a run folder that would not train what is asked
  (`resume_differences`), and a seed with rows at some budgets whose run
  is not under --runs. A new run of that seed would file its rows and
  its curve under the same (agent, task, variant, seed) as the other run's,
  and `append_curves` would keep the other run's points at the env steps
  both share: one curve spliced from two runs (td3 CheetahRun `n1` was,
  before this check: its 100k rows from one run, its 500k from another
  whose own 100k evaluations differed by up to 128).
  """
  done, pending = _pending(args, agent, task, seeds)
  problems = []
  for members, cmd in plan_children(args, agent, task, pending):
    if '--resume' not in cmd:
      for seed, run_dir in members:
        if done.get(seed):
          problems.append(
              f'{agent} {task} ({args.variant}) seed {seed} has rows at '
              f'{sorted(done[seed])} env steps from a run that is not here '
              f'(none in {run_dir}); a new run would file its rows '
              'and curve beside that run\'s. Give --runs the folder that '
              'holds that run to extend it, or a new --variant to train '
              'the seed afresh under its own name')
      continue
    for _, run_dir in members:
      diffs = resume_differences(args, agent, task, run_dir)
      if diffs:
        problems.append(f'{run_dir} would be resumed as {agent} on {task} '
                        f'({args.variant}), but ' + '; '.join(diffs) + '. '
                        'Give the --variant and --set that made it, or a '
                        'new --variant to train the cell afresh under its '
                        'own name')
  return problems


def refuse_resumes(problems: Sequence[str], tag: str) -> bool:
  """Prints `resume_problems`' lines, each with its fix; True if any."""
  for line in problems:
    print(f'{tag}: error: {line}.', file=sys.stderr)
  return bool(problems)


def train_members(args, agent: str, task: str,
                  members: Sequence[Tuple[int, str]], cmd: Sequence[str],
                  done: Mapping[int, Iterable[int]],
                  identity: Tuple[str, str]) -> None:
  """Runs one `roxie train` child; appends each member's rows as they land.

  A child trains one run or a population (one program for its P members);
  each member is charged 1/P of the child's CPU time and all its wall-clock.
  """
  variant = args.variant
  pending = {s: sorted(set(args.budgets) - set(done.get(s, ())))
             for s, _ in members}
  resuming = '--resume' in cmd
  states = {s: (_load_state(d) if resuming and os.path.isdir(d) else None)
            or {'cpu_s': 0.0, 'wall_s': 0.0, 'evals': []}
            for s, d in members}
  version, commit = identity
  label = f'{agent} {task} seed{"s" if len(members) > 1 else ""} ' + ','.join(
      str(s) for s, _ in members)
  print(f'[dmc] {label}: {" ".join(cmd[:3])} ... (budgets '
        f'{sorted(set(b for p in pending.values() for b in p))})', flush=True)
  start = time.time()
  # The child has its own session: a stop request (Ctrl-C, `timeout -s INT`,
  # `kill -INT`) reaches it through this process alone, once (see
  # `_ForwardStops`).
  proc = subprocess.Popen([sys.executable, '-m', 'roxie.cli', *cmd, '--quiet'],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True)
  base = {s: (st['cpu_s'], st['wall_s']) for s, st in states.items()}
  share = 1.0 / len(members)
  cpu = 0.0
  log: List[str] = []

  def poll_member(seed: int, run_dir: str) -> None:
    state, (base_cpu, base_wall) = states[seed], base[seed]
    seen = {int(e['env_steps']) for e in state['evals']}
    for r in _metrics(run_dir):
      n = int(float(r['env_steps']))
      if n in seen:
        continue
      state['evals'].append(dict(
          env_steps=n, eval_return=float(r['eval_return']),
          eval_return_std=float(r.get('eval_return_std') or 'nan'),
          cpu_s=round(base_cpu + cpu * share, 1),
          wall_s=round(base_wall + time.time() - start, 1)))
      seen.add(n)
      print(f'[dmc] {agent} {task} seed {seed}: {n} env steps, eval '
            f'{float(r["eval_return"]):.1f} ({base_cpu + cpu * share:.0f} '
            'CPU s)', flush=True)
    state['cpu_s'] = base_cpu + cpu * share
    state['wall_s'] = base_wall + time.time() - start
    if os.path.isdir(run_dir):
      _save_state(run_dir, state)
    for budget in list(pending[seed]):
      e = budget_evaluation(state['evals'], budget)
      if e is not None:
        append_row(args.results, COLUMNS, dict(
            agent=agent, task=task, seed=seed, budget=budget, variant=variant,
            overrides=_overrides_text(args),
            env_steps=e['env_steps'], eval_return=round(e['eval_return'], 2),
            eval_return_std=round(e['eval_return_std'], 2),
            eval_episodes=args.eval_episodes, cpu_s=e['cpu_s'],
            wall_s=e['wall_s'], version=version, commit=commit,
            machine=args.machine or machine()))
        pending[seed].remove(budget)

  def poll() -> None:
    nonlocal cpu
    now = _cpu_seconds(proc.pid)
    if now is not None:
      cpu = now
    for seed, run_dir in members:
      poll_member(seed, run_dir)

  # The child's output is read on a thread so that a chatty child never blocks.
  reader = threading.Thread(
      target=lambda: log.extend(proc.stdout), daemon=True)
  reader.start()
  with _ForwardStops(proc) as stops:
    while proc.poll() is None:
      time.sleep(2.0)
      poll()
  reader.join(timeout=5)
  poll()  # The rows of the evaluations it made before it stopped.
  if stops.requests:
    said = ' / '.join(line.strip() for line in log[-20:] if 'roxie:' in line)
    raise Stopped(f'{label}: stopped by {signal.Signals(stops.signum).name}; '
                  f'the same command resumes it (roxie train: {said or "-"})',
                  stops.signum)
  if proc.returncode != 0:
    tail = ''.join(log[-15:])
    raise RuntimeError(f'{label}: roxie train exited {proc.returncode}:\n{tail}')
  for seed, run_dir in members:
    if pending[seed]:
      raise RuntimeError(f'{label}: seed {seed} finished without an '
                         f'evaluation at or after {pending[seed]}; see '
                         f'{run_dir}/metrics.csv')
    append_curves(args.curves, states[seed]['evals'], dict(
        agent=agent, task=task, seed=seed, variant=variant, version=version,
        commit=commit))
    states[seed]['curves_written'] = True
    _save_state(run_dir, states[seed])


def train_pending_seeds(args, agent: str, task: str, seeds: Sequence[int],
                        identity: Tuple[str, str], command=None,
                        tag: str = 'dmc') -> int:
  """Trains the seeds of one (agent, task) that lack a row at some budget.

  The children of `plan_children` run one after another (`train_members`);
  `command`, if given, maps each child's `roxie train` arguments first
  (humanoid.py adds `--backend`). A failed child is reported and counted,
  and the next one still runs.

  Returns:
    How many children failed.
  """
  done, pending = _pending(args, agent, task, seeds)
  failed = 0
  for members, cmd in plan_children(args, agent, task, pending):
    try:
      train_members(args, agent, task, members,
                    command(cmd) if command else cmd, done, identity)
    except RuntimeError as e:
      failed += 1
      print(f'[{tag}] {e}', file=sys.stderr, flush=True)
    done, _ = _pending(args, agent, task, seeds)
  return failed


def _overrides_text(args) -> str:
  """The overrides column: the --set fields, and a shortened episode."""
  items = dict(args.overrides)
  if args.episode_length:
    items['episode_length'] = str(args.episode_length)
  return ';'.join(f'{k}={v}' for k, v in sorted(items.items()))


def _parse_list(text: str, kind, what: str) -> List:
  try:
    items = [kind(x) for x in text.split(',') if x.strip()]
  except ValueError:
    raise UsageError(f'--{what}: cannot read {text!r} as a comma-separated '
                     f'list of {kind.__name__}') from None
  if not items:
    raise UsageError(f'--{what} is empty')
  return items


def settings_problem(agent: str, settings: Mapping[str, str]
                     ) -> Optional[str]:
  """Why `settings` do not make a run of `agent`; None if they do.

  As `roxie train` would check them, before anything trains or is written:
  a field the recipe's Config lacks, a value of the wrong type or out of
  range, a run setting (num_envs, action_repeat) that is not one. (Also
  humanoid.py's check of each agent's settings.)
  """
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie.run import config as run_config  # pylint: disable=g-import-not-at-top
  try:
    module, cfg = run_config.resolve_config(agent, settings)
    run = run_config.resolve_run_defaults(module, settings)
    config_lib.validate(cfg, num_envs=run.num_envs)
  except (ValueError, TypeError) as e:  # ConfigError and RunError among them
    return str(e)
  return None


def check_overrides(agents: Sequence[str],
                    overrides: Sequence[Tuple[str, str]]) -> None:
  """Raises UsageError unless `--set` makes a run of every agent."""
  if not overrides:
    return
  for agent in agents:
    problem = settings_problem(agent, dict(overrides))
    if problem:
      raise UsageError(f'--set does not make a {agent} run: {problem}')


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--agents', default='sac')
  p.add_argument('--tasks', default='standard',
                 help="comma-separated task names, or 'standard' (the six)")
  p.add_argument('--seeds', default='0,1,2',
                 help="comma-separated seeds, or N for 0..N-1")
  p.add_argument('--budgets', default=','.join(map(str, BUDGETS)))
  p.add_argument('--set', dest='sets', action='append', default=[],
                 metavar='FIELD=VALUE', help='config override (repeatable)')
  p.add_argument('--variant', default=None,
                 help="label of this configuration in the CSV and its "
                      "run folders (letters, digits, '.', '_', '-'); "
                      "'default' without --set, which then needs another")
  p.add_argument('--eval-every', type=int, default=20_000)
  p.add_argument('--eval-episodes', type=int, default=10)
  p.add_argument('--episode-length', type=int, default=None,
                 help='shorten episodes, in training and evaluation (for '
                      'smoke tests; needs --variant, and the overrides '
                      'column records it)')
  p.add_argument('--runs', default=os.path.join('runs', 'dmc'),
                 help='where the run folders (checkpoints) live')
  p.add_argument('--results', default=os.path.join(RESULTS, 'dmc.csv'))
  p.add_argument('--curves', default=os.path.join(RESULTS, 'dmc_curves.csv'))
  p.add_argument('--report', action='store_true',
                 help='only write DMC.md and the plots from the CSVs')
  p.add_argument('--machine', default=None,
                 help="the rows' machine column (default: the CPU model and "
                      "its core count); name the accelerator where JAX "
                      "trains on one, e.g. 'TPU v5e + 13-core host': this "
                      "script cannot ask JAX without taking the device from "
                      "the child that trains")
  args = p.parse_args(argv)
  from roxie.agents import AGENTS  # pylint: disable=g-import-not-at-top
  from roxie.envs import tasks as task_registry  # pylint: disable=g-import-not-at-top
  args.agents = _parse_list(args.agents, str.lower, 'agents')
  for a in args.agents:
    if a not in AGENTS:
      raise UsageError(f'unknown agent {a!r}; choose from {", ".join(AGENTS)}')
  args.tasks = (list(STANDARD_TASKS) if args.tasks == 'standard'
                else _parse_list(args.tasks, str, 'tasks'))
  for t in args.tasks:
    if t not in task_registry.TASKS:
      raise UsageError(f'unknown task {t!r}; `roxie tasks` lists them')
  seeds = _parse_list(args.seeds, int, 'seeds')
  args.seeds = list(range(seeds[0])) if (
      len(seeds) == 1 and ',' not in args.seeds) else seeds
  if not args.seeds:
    raise UsageError(f'--seeds {seeds[0]} '
                     'asks for no seeds (N alone means seeds 0..N-1); for '
                     'seed 0 alone write --seeds 0,')
  if min(args.seeds) < 0:
    raise UsageError('--seeds: seeds are >= 0')
  args.budgets = sorted(set(_parse_list(args.budgets, int, 'budgets')))
  if args.budgets[0] <= 0:
    raise UsageError('--budgets must be positive env-step counts')
  args.overrides = []
  for s in args.sets:
    if '=' not in s:
      raise UsageError(f'--set {s!r}: expected FIELD=VALUE')
    k, v = s.split('=', 1)
    args.overrides.append((k.strip(), v.strip()))
  if args.episode_length is not None and args.episode_length <= 0:
    raise UsageError('--episode-length must be positive')
  if args.variant is None:
    if args.overrides or args.episode_length:
      raise UsageError('--set and --episode-length need --variant NAME: it '
                       'labels these rows in the CSV beside the defaults')
    args.variant = 'default'
  elif not VARIANT_NAME.fullmatch(args.variant):
    raise UsageError(f'--variant {args.variant!r}: use letters, digits, '
                     "'.', '_' and '-' (it names a folder under --runs and "
                     'the rows in the CSV), e.g. n2 or lr3e-4')
  elif args.variant == 'default' and (args.overrides or args.episode_length):
    raise UsageError("--variant default labels each recipe's own defaults; "
                     'rows made with --set or --episode-length need a name '
                     'of their own, e.g. --variant n2')
  check_overrides(args.agents, args.overrides)
  if args.machine is not None:
    args.machine = args.machine.strip()
    if not args.machine or not args.machine.isprintable():
      raise UsageError('--machine needs a one-line label, e.g. '
                       "'TPU v5e + 13-core host'")
  if args.eval_every <= 0 or args.eval_episodes < 10:
    raise UsageError('--eval-every must be positive and --eval-episodes >= 10 '
                     '(the table reports means of at least 10 episodes)')
  return args


def _pending(args, agent: str, task: str, seeds: Sequence[int]
             ) -> Tuple[Dict[int, List[int]], List[int]]:
  """({seed: budgets with a row} of the cell, its seeds that lack a row at
  one of `args.budgets`), from the results CSV as it is now."""
  done = _done(read_rows(args.results, COLUMNS), agent, task, args.variant)
  return done, [s for s in seeds
                if not set(args.budgets) <= set(done.get(s, ()))]


def _done(rows, agent: str, task: str, variant: str) -> Dict[int, List[int]]:
  """{seed: budgets with a row} of one (agent, task, variant)."""
  done: Dict[int, List[int]] = {}
  for r in rows:
    if (r['agent'], r['task'], r['variant']) == (agent, task, variant):
      done.setdefault(int(r['seed']), []).append(int(r['budget']))
  return done


class Stopped(Exception):
  """A stop request (SIGINT or SIGTERM) ended a child; the rest is skipped."""

  def __init__(self, message: str, signum: int):
    super().__init__(message)
    self.signum = signum


class _ForwardStops:
  """While a child trains: SIGINT and SIGTERM here are forwarded to it.

  The child (roxie train) checkpoints and stops after its current training
  call on the first signal, and stops at once on a second, its last
  checkpoint kept. A signal within a second of the last one forwarded is
  the same request delivered twice and is not forwarded: Ctrl-C in a
  terminal signals the whole foreground group, and `timeout` signals the
  process and then its group. (Before the child had its own session, that
  second copy reached it and stopped it at once, without the checkpoint
  the first had asked for.) Inactive off the main thread.
  """

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self, proc: subprocess.Popen):
    self.proc = proc
    self.requests = 0
    self.signum = 0
    self._last: Optional[float] = None
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    now = time.monotonic()
    if self._last is not None and now - self._last < 1.0:
      return
    self._last = now
    self.requests += 1
    self.signum = signum
    if self.proc.poll() is None:
      self.proc.send_signal(signum)

  def __enter__(self) -> '_ForwardStops':
    if threading.current_thread() is threading.main_thread():
      for s in self.SIGNALS:
        self._previous[s] = signal.signal(s, self._handle)
    return self

  def __exit__(self, *exc) -> bool:
    for s, h in self._previous.items():
      signal.signal(s, h)
    self._previous = {}
    return False


def main(argv=None) -> int:
  try:
    args = parse_args(argv)
    # Refuse a results file written by another version before training.
    read_rows(args.results, COLUMNS)
    read_rows(args.curves, CURVE_COLUMNS)
  except UsageError as e:
    print(f'dmc.py: error: {e}', file=sys.stderr)
    return 2
  if not args.report:
    if refuse_resumes([p for agent in args.agents for task in args.tasks
                       for p in resume_problems(args, agent, task,
                                                args.seeds)], 'dmc.py'):
      return 2
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    identity = code_identity()
    failed = 0
    try:
      for agent in args.agents:
        for task in args.tasks:
          failed += train_pending_seeds(args, agent, task, args.seeds,
                                        identity)
    except Stopped as e:
      print(f'[dmc] {e}.', file=sys.stderr)
      return 128 + e.signum
  try:
    import dmc_report  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return 0
  code = write_report(args.results, args.curves)
  if not args.report and failed:
    print(f'[dmc] {failed} run(s) failed; see above.', file=sys.stderr)
    return 1
  return code


if __name__ == '__main__':
  sys.path.insert(0, HERE)
  # One module, not two: the report's `import dmc` (dmc_report.py) would
  # load this file again, with its own locks' registry and the code on disk
  # then. A job whose own write_report held the CSVs' locks hung so, for
  # good, when that newer copy took them again.
  sys.modules['dmc'] = sys.modules[__name__]
  sys.exit(main())
