"""Populations: several seeds and hyperparameters trained as one program.

`train_population(agent, task, seeds=(0, 1, 2), sweep={'critic_lr': (1e-4,
3e-4)})` trains the cross product of the seeds and the swept values (P
members, see `roxie.loops.population_grid`) in one compiled program
(`roxie.loops.make_population_loop`), and writes one run directory per
member, named `<agent>-<task>-seed<k>[-<field>=<value>...]` under `root`.

A member's directory holds what a single run's does (config.json, the
member's own `RunConfig`: its seed, and its swept values in the agent
config; metrics.csv; agent_state.npz; checkpoints/), so `roxie eval`,
`plot`, `export` and `play` read it unchanged, plus `population.json`: the
names of the members' directories (siblings) in member order, and the
members that stopped. Member k follows the single run of its config.json up
to float tolerance (see `roxie.loops.population`).

Checkpoints. At each checkpoint every training member writes its own, a
single run's checkpoint (its slice of the LoopState and, on the native
backend, its rows of the population's host physics). `resume_population`
(or `roxie train --resume` of any member's directory) restores the latest
env step that every training member has a checkpoint of (a kill between two
members' writes leaves some one checkpoint ahead; their newer one is
rewritten, identically, when the run gets there again), stacks the members
and continues bit-exact with an uninterrupted population. So a population
keeps at least two checkpoints per member.

Faults. A member whose agent state turns non-finite gets its metrics row
(`nonfinite_params`) and stops: it is no longer evaluated or checkpointed
(its last good checkpoint stays its latest), population.json records it,
and the others train on; the population then ends with `TrainingFault`
naming it. A resumed population keeps it stopped.

Not supported (refused with a message): pixel observations, several devices
or processes, resolution schedules and TensorBoard files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from roxie import checkpoint as ckpt_lib
from roxie import config as config_lib
from roxie import loops
from roxie.loops import host as host_lib
from roxie.run import files
from roxie.run import programs as programs_lib
from roxie.run.checkpoints import _Runner, _read_checkpoint, adopt_metrics, _save_checkpoint, _templates, older_checkpoint_hint
from roxie.run.config import DEFAULT_TASK, RUN_SETTINGS, RunConfig, _agent_name, resolve_config, _check_positive, _rounding_notes, check_resumable, load_run_config, new_run_config, whole_iterations
from roxie.run.errors import Interrupted, RunError, TrainingFault
from roxie.run.files import CONFIG_FILE, DEFAULT_KEEP_CHECKPOINTS, METRICS_FILE, POPULATION_FILE, RESTART_SUFFIX, _run_lock
from roxie.run.health import _count_inexact, _host_errors, _nonfinite_message, nonfinite_leaves
from roxie.run.logging import _MetricsCsv, _Progress
from roxie.run.signals import StopRequest, _signal_name
from roxie.run.trainer import RunResult, _count_episodes, _row, _show_notes


@dataclasses.dataclass
class PopulationResult:
  """What `train_population` returns: one RunResult per member, in order."""
  members: Tuple[RunResult, ...]
  stopped: Tuple[str, ...] = ()  # Directories of members that diverged.


def parse_seeds(text: str) -> Tuple[int, ...]:
  """`--seeds`: '0,1,2' (those seeds) or '5' (0..4); duplicates refused."""
  parts = [p.strip() for p in str(text).split(',') if p.strip()]
  try:
    values = [int(p) for p in parts]
  except ValueError:
    raise ValueError(f'--seeds: cannot read {text!r}: give a count (5 for '
                     'seeds 0..4) or a comma-separated list (0,1,2).') from None
  if not values:
    raise ValueError('--seeds is empty: give a count or a list of seeds.')
  if len(values) == 1 and ',' not in str(text):
    if values[0] < 1:
      raise ValueError(f'--seeds {values[0]}: a count must be >= 1 (for the '
                       'single seed 0, write --seeds 0,).')
    values = list(range(values[0]))
  if any(v < 0 for v in values):
    raise ValueError(f'--seeds: seeds must be >= 0, got {text!r}.')
  if len(set(values)) != len(values):
    raise ValueError(f'--seeds {text!r} repeats a seed: two members would be '
                     'the same run.')
  return tuple(values)


def parse_sweep(items: Sequence[str]) -> Dict[str, Tuple[float, ...]]:
  """`--sweep field=v1,v2` (repeatable) -> {field: values}."""
  sweep: Dict[str, Tuple[float, ...]] = {}
  for item in items:
    name, sep, text = str(item).partition('=')
    name = name.strip()
    if not sep or not name:
      raise ValueError(f'--sweep {item!r}: expected FIELD=V1,V2,... (e.g. '
                       '--sweep critic_lr=1e-4,3e-4).')
    if name in sweep:
      raise ValueError(f'--sweep {name} is given twice: list all its values '
                       'in one --sweep.')
    parts = [p.strip() for p in text.split(',') if p.strip()]
    if not parts:
      raise ValueError(f'--sweep {name}: no values given.')
    try:
      values = tuple(float(p) for p in parts)
    except ValueError:
      raise ValueError(f'--sweep {name}: cannot read {text!r} as numbers; only '
                       'float fields can be swept.') from None
    if not all(math.isfinite(v) for v in values):
      raise ValueError(f'--sweep {name}: values must be finite, got {text!r}.')
    if len(set(values)) != len(values):
      raise ValueError(f'--sweep {name} repeats a value: {text!r}.')
    sweep[name] = values
  return sweep


def member_names(agent: str, task: str, seeds: Sequence[int],
                 hparams: Mapping[str, Sequence[float]]) -> List[str]:
  """Directory names of the members (as `population_grid` orders them)."""
  return [f'{agent}-{task}-seed{int(s)}'
          + ''.join(f'-{f}={float(v[k])!r}' for f, v in hparams.items())
          for k, s in enumerate(seeds)]


@dataclasses.dataclass
class _Member:
  """One member's host side (what `_row` and the checkpoints read)."""
  run: RunConfig
  out: str
  label: str
  csv_log: _MetricsCsv
  runner: _Runner
  key: Any  # The member's evaluation key (a single run's).
  k_init: Any  # The key its loop state is initialised from.
  alive: bool = True
  env_steps: int = 0
  sps: float = 0.0
  t0: float = 0.0

  def wall(self) -> float:
    return self.runner.wall_time + time.time() - self.t0


@dataclasses.dataclass
class _Programs:
  """The population's envs and programs (`member` is member 0's single run's)."""
  single: programs_lib.Programs
  env: Any  # The population env.
  init: Any
  run: Any
  evaluators: List[Any]  # Member k's, built from its own config.
  hparams: Optional[Dict[str, List[float]]]
  make: Any
  shorter: Dict[int, Any] = dataclasses.field(default_factory=dict)

  @property
  def per_iter(self) -> int:
    return self.single.per_iter

  @property
  def size(self) -> int:
    return len(self.evaluators)

  def run_for(self, iterations: int):
    if iterations == self.single.iterations:
      return self.run
    if iterations not in self.shorter:
      _, self.shorter[iterations] = loops.make_population_loop(
          self.single.recipe, self.env, population=self.size,
          iterations=iterations, hparams=self.hparams, make=self.make)
    return self.shorter[iterations]

  def host_rows(self) -> Optional[np.ndarray]:
    """[P, B, S] host physics rows (None off the native backend)."""
    physics = host_lib.host_physics(self.env)
    return None if physics is None else physics.get_host_state()

  def set_host_rows(self, rows: np.ndarray) -> None:
    host_lib.host_physics(self.env).set_host_state(rows)


def _swept(runs: Sequence[RunConfig]) -> Dict[str, List[float]]:
  """{field: the members' values} of the agent-config fields that differ."""
  configs = [config_lib.to_dict(r.agent_config()) for r in runs]
  return {name: [float(c[name]) for c in configs]
          for name in configs[0]
          if any(c[name] != configs[0][name] for c in configs[1:])}


# Built programs of populations in this process, by their members' settings
# (as `roxie.run.programs.DEFAULT_PROGRAMS` for single runs): a resume in the
# same process reuses the compiled programs. A cached native env's host
# physics is re-initialised by `init` or restored, so nothing carries over.
_PROGRAMS: Dict[Tuple[str, ...], _Programs] = {}
_PROGRAMS_MAX = 2


def _build(runs: Sequence[RunConfig]) -> _Programs:
  """The population's programs, cached (see `_PROGRAMS`)."""
  key = tuple(r.program_key() for r in runs)
  if key not in _PROGRAMS:
    while len(_PROGRAMS) >= _PROGRAMS_MAX:
      _PROGRAMS.pop(next(iter(_PROGRAMS)))
    _PROGRAMS[key] = _build_programs(runs)
  return _PROGRAMS[key]


def _build_programs(runs: Sequence[RunConfig]) -> _Programs:
  """The population's programs (built, not compiled); RunError if it cannot be."""
  for r in runs[1:]:
    if (r.agent, r.task, r.backend, r.num_envs, r.env_options, r.eval_every,
        r.eval_episodes, r.iterations_per_call) != (
            runs[0].agent, runs[0].task, runs[0].backend, runs[0].num_envs,
            runs[0].env_options, runs[0].eval_every, runs[0].eval_episodes,
            runs[0].iterations_per_call):
      raise RunError('The members of a population must share every run '
                     'setting but the seed and the swept fields.')
  if runs[0].pixels is not None:
    raise RunError('A population cannot train from pixels (the renderer draws '
                   "one batch's frames per call): train pixel runs one at a "
                   'time, without --seeds/--sweep.')
  module = runs[0].agent_module()
  try:
    single = programs_lib.build_programs(runs[0])
    hparams = _swept(runs) or None
    env = loops.population_env(single.env, len(runs))
    init, run = loops.make_population_loop(
        single.recipe, env, population=len(runs),
        iterations=single.iterations, hparams=hparams, make=module.make)
    evaluators, built = [], {}
    for r in runs:  # Members that differ only in the seed share one.
      key = r.program_key()
      if key not in built:
        built[key] = loops.make_evaluator(
            module.make(r.agent_config(), single.eval_env.spec),
            single.eval_env)
      evaluators.append(built[key])
    jax.eval_shape(init, jnp.stack([jax.random.PRNGKey(0)] * len(runs)))
  except (TypeError, ValueError, ZeroDivisionError) as e:
    if isinstance(e, RunError):
      raise
    raise RunError(f'This population cannot be built with these settings: '
                   f'{str(e).splitlines()[0] if str(e) else repr(e)}') from None
  return _Programs(single=single, env=env, init=init, run=run,
                   evaluators=evaluators, hparams=hparams, make=module.make)


def _member(run: RunConfig, out: str, label: str, eval_every: int) -> _Member:
  key, k_init = jax.random.split(jax.random.PRNGKey(run.seed))
  return _Member(run=run, out=out, label=label,
                 csv_log=_MetricsCsv(os.path.join(out, METRICS_FILE)),
                 runner=_Runner(next_eval=eval_every), key=key, k_init=k_init)


def _write_population_file(members: Sequence[_Member]) -> None:
  doc = {'members': [os.path.basename(os.path.normpath(m.out))
                     for m in members],
         'stopped': {os.path.basename(os.path.normpath(m.out)): m.env_steps
                     for m in members if not m.alive}}
  for m in members:
    files._write_json(os.path.join(m.out, POPULATION_FILE), doc)  # pylint: disable=protected-access


def population_dirs(run_dir: str) -> Optional[Tuple[List[str], Dict[str, int]]]:
  """(member directories, {stopped member: env steps}) of a member's directory.

  None when `run_dir` is not a population member (no population.json).

  Raises:
    RunError: population.json is unreadable.
  """
  path = os.path.join(run_dir, POPULATION_FILE)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      doc = json.load(f)
    names = [str(n) for n in doc['members']]
    stopped = {str(k): int(v) for k, v in (doc.get('stopped') or {}).items()}
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise RunError(f'{path} is unreadable ({e}); it lists the members of the '
                   'population this run belongs to.') from None
  parent = os.path.dirname(os.path.normpath(run_dir))
  return [os.path.join(parent, n) for n in names], stopped


def train_population(
    agent: Any = 'sac', task: str = DEFAULT_TASK, *,
    seeds: Sequence[int] = (0,),
    sweep: Optional[Mapping[str, Sequence[float]]] = None,
    root: str = 'runs', backend: str = 'cpu', num_envs: Optional[int] = None,
    steps: Optional[int] = None,
    overrides: Optional[Mapping[str, Any]] = None,
    eval_every: Optional[int] = None, eval_episodes: int = 10,
    env_options: Optional[Mapping[str, Any]] = None,
    checkpoint_every: Optional[int] = None,
    keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
    save_replay: bool = True, verbose: bool = True,
    names: Optional[Sequence[str]] = None) -> PopulationResult:
  """Trains every (sweep values, seed) member in one program (see module doc).

  Args:
    agent, task, backend, num_envs, steps, overrides, eval_every,
      eval_episodes, env_options, checkpoint_every, save_replay, verbose:
      as for `roxie.run.train` (shared by the members).
    seeds: the seeds, each run with every combination of swept values.
    sweep: {float field of the agent's Config: values} (None: seeds only).
    root: the directory the members' run directories go in.
    keep_checkpoints: checkpoints kept per member (at least 2).
    names: the members' directory names (default: `member_names`).

  Raises:
    RunError: settings that do not make a population (a field that cannot
      be swept, pixels, ...); FileExistsError: a member's directory holds a
      run already. Nothing is written then.
    TrainingFault: a member diverged (the others trained to the end).
  """
  agent = _agent_name(agent)
  _check_one_process()
  _check_positive(checkpoint_every=checkpoint_every)
  if int(keep_checkpoints) < 2:
    raise RunError('A population keeps at least 2 checkpoints per member (a '
                   'resume needs one that every member has).')
  try:
    member_seeds, hparams = loops.population_grid(tuple(seeds), dict(sweep or {}))
  except ValueError as e:
    raise RunError(str(e)) from None
  overrides = dict(overrides or {})
  for field in hparams:
    if field in overrides:
      raise RunError(f'{field} is both swept and set (--set); drop one.')
    if field in RUN_SETTINGS:
      raise RunError(f'{field} is a run setting, the same for every member '
                     'of a population (they are one program): it cannot be '
                     'swept; train a population per value.')
  if hparams:  # Float fields only, named when not (before any config is made).
    try:
      loops.check_hparams(resolve_config(agent, overrides)[1], hparams,
                          len(member_seeds))
    except ValueError as e:
      raise RunError(str(e)) from None
  runs = []
  for k, seed in enumerate(member_seeds):
    member_overrides = dict(overrides, **{f: v[k] for f, v in hparams.items()})
    try:
      runs.append(new_run_config(agent, task, backend, num_envs, steps, seed,
                                 member_overrides, eval_every, eval_episodes,
                                 env_options, checkpoint_every))
    except KeyError as e:  # An unknown task.
      raise RunError(str(e.args[0])) from None
    except (TypeError, ValueError) as e:
      raise RunError(str(e)) from None
  from roxie import agents as agents_lib  # pylint: disable=g-import-not-at-top
  names = list(names or member_names(agents_lib.short_name(agent), task,
                                     member_seeds, hparams))
  if len(names) != len(runs) or len(set(names)) != len(names):
    raise RunError(f'A population of {len(runs)} members needs as many '
                   f'distinct directory names, got {names}.')
  dirs = [os.path.join(root, n) for n in names]
  for d in dirs:
    if os.path.exists(os.path.join(d, CONFIG_FILE)):
      raise FileExistsError(f'{d} already holds a run ({CONFIG_FILE}): choose '
                            'another --out for the population, or continue it '
                            f'with `roxie train --resume {d}`.')
  progs = _build(runs)  # Before anything is written.
  eval_every_n = int(runs[0].eval_every)
  members = [_member(r, d, _label(r, hparams, k), eval_every_n)
             for k, (r, d) in enumerate(zip(runs, dirs))]
  with contextlib.ExitStack() as locks:
    for d in dirs:
      locks.enter_context(_run_lock(d))
    for m in members:
      files._write_json(os.path.join(m.out, CONFIG_FILE), m.run.to_json())  # pylint: disable=protected-access
      ckpt_lib.cleanup(m.out)
    _write_population_file(members)
    notes = _rounding_notes(runs[0], eval_every, int(runs[0].steps))
    return _train(progs, members, notes, resume=False,
                  checkpoint_every=checkpoint_every, keep=keep_checkpoints,
                  save_replay=save_replay, verbose=verbose)


def _check_one_process() -> None:
  # Members are rows of one program on this process's device; a job of
  # several processes would have each train (and write) every member.
  if jax.process_count() > 1:
    raise RunError(
        f'A population trains in one process; this job has '
        f'{jax.process_count()} (jax.distributed). Run it without '
        '--coordinator/--num-processes, or train the seeds as separate '
        'multi-process runs.')


def _label(run: RunConfig, hparams: Mapping[str, Sequence[float]],
           k: int) -> str:
  return ' '.join([f'seed{run.seed}'] + [f'{f}={float(v[k])!r}'
                                         for f, v in hparams.items()])


def resume_population(run_dir: str, *, steps: Optional[int] = None,
                      checkpoint_every: Optional[int] = None,
                      keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
                      save_replay: bool = True,
                      verbose: bool = True) -> PopulationResult:
  """Continues the population `run_dir` (any member's directory) belongs to.

  Raises:
    RunError: not a population member, a member missing, or nothing to
      resume from; roxie.checkpoint.CheckpointError: a checkpoint unreadable
      or of another run.
  """
  _check_one_process()
  _check_positive(checkpoint_every=checkpoint_every, steps=steps)
  if int(keep_checkpoints) < 2:
    raise RunError('A population keeps at least 2 checkpoints per member.')
  found = population_dirs(run_dir)
  if found is None:
    raise RunError(f'{run_dir} is not a member of a population (no '
                   f'{POPULATION_FILE}).')
  dirs, stopped = found
  runs = []
  for d in dirs:
    if not os.path.exists(os.path.join(d, CONFIG_FILE)):
      raise RunError(f'{d}, a member of the population of {run_dir}, is '
                     f'missing (no {CONFIG_FILE}): the population cannot be '
                     'resumed without every member.')
    run = load_run_config(d)[0]
    check_resumable(run, d)
    if steps is not None:
      run = dataclasses.replace(run, steps=int(steps))
    runs.append(run)
  progs = _build(runs)  # Refuses members that differ but in float fields.
  hparams = _swept(runs)
  eval_every_n = int(runs[0].eval_every)
  members = [_member(r, d, _label(r, hparams, k), eval_every_n)
             for k, (r, d) in enumerate(zip(runs, dirs))]
  for m in members:
    name = os.path.basename(os.path.normpath(m.out))
    if name in stopped:
      m.alive, m.env_steps = False, stopped[name]
  with contextlib.ExitStack() as locks:
    for d in dirs:
      locks.enter_context(_run_lock(d))
    return _train(progs, members, [], resume=True,
                  checkpoint_every=checkpoint_every, keep=keep_checkpoints,
                  save_replay=save_replay, verbose=verbose)


def _restore(progs: _Programs, members: Sequence[_Member]) -> Tuple[Any, List[str]]:
  """The stacked LoopState at the latest step every training member saved."""
  live = [m for m in members if m.alive]
  if not live:
    raise RunError('Every member of this population diverged and stopped: '
                   'nothing to resume.')
  common = set.intersection(*(set(ckpt_lib.list_steps(m.out)) for m in live))
  notes = []
  for m in live:
    removed = ckpt_lib.cleanup(m.out)
    if removed:
      notes.append(f'removed {len(removed)} unfinished checkpoint write(s) in '
                   f'{m.out} left by a killed process.')
  if not common:
    # Killed before the first checkpoint round was complete: the members
    # start again from step 0 with their saved seeds and configs (as a
    # single run does; their old metrics.csv files are kept aside).
    for m in live:
      path = os.path.join(m.out, METRICS_FILE)
      if os.path.exists(path):
        os.replace(path, path + RESTART_SUFFIX)
      m.csv_log = _MetricsCsv(path)
    notes.append('the population has no checkpoint that every member wrote '
                 '(stopped during the first one): starting it again from '
                 f'step 0 (old {METRICS_FILE} files kept as {METRICS_FILE}'
                 f'{RESTART_SUFFIX}).')
    return None, notes
  step = max(common)
  templates = _templates(progs.single, live[0].k_init)
  states, rows = [], []
  for m in live:
    path = os.path.join(ckpt_lib.checkpoint_dir(m.out), ckpt_lib.step_name(step))
    try:
      state, m.key, m.runner, replay_restored, host = _read_checkpoint(
          path, progs.single, m.run, templates)
    except ckpt_lib.CheckpointError as e:
      raise ckpt_lib.CheckpointError(f'{e}{older_checkpoint_hint(path)}'
                                     ) from None
    notes += adopt_metrics(m.csv_log, m.runner, path, replay_restored,
                           progs.single.recipe.on_policy, who=m.label)
    if int(m.run.steps) != files._saved_total(m.out):  # pylint: disable=protected-access
      files._write_json(os.path.join(m.out, CONFIG_FILE), m.run.to_json())  # pylint: disable=protected-access
    states.append(state)
    rows.append(host)
  # A stopped member's slot holds a training member's state: it is never
  # read (nothing of a stopped member is evaluated or written).
  states, rows = iter(states), iter(rows)
  slots = [(next(states), next(rows)) if m.alive else None for m in members]
  first = next(s for s in slots if s is not None)
  slots = [s or first for s in slots]
  stacked = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]),
                         *[s[0] for s in slots])
  if first[1] is not None:
    progs.set_host_rows(np.stack([s[1] for s in slots]))
  notes.insert(0, f'resumed the population of {len(members)} members from '
               f'{step} env steps ({", ".join(m.out for m in members)}).')
  return stacked, notes


def _train(progs: _Programs, members: List[_Member], notes: List[str], *,
           resume: bool, checkpoint_every: Optional[int], keep: int,
           save_replay: bool, verbose: bool) -> PopulationResult:
  """The loop between compiled calls (the members' locks are held)."""
  run0 = members[0].run
  total = whole_iterations(run0.steps, progs.per_iter)
  eval_every = int(run0.eval_every)
  ckpt_every = int(checkpoint_every or eval_every)
  state = None
  if resume:
    state, more = _restore(progs, members)
    notes = notes + more
  live = [m for m in members if m.alive]
  env_steps = live[0].runner.env_steps
  progress = _Progress(total, env_steps, verbose)
  _show_notes(progress, notes)  # Warnings show even when quiet.
  saved_at = env_steps if resume else None
  t0 = time.time()
  for m in members:
    m.t0, m.env_steps = t0, (env_steps if m.alive else m.env_steps)
  try:
    with StopRequest(members[0].out, enabled=True) as stop:
      progress.status('starting (the first call compiles the population '
                      'program)...')
      if state is None:
        state = progs.init(jnp.stack([m.k_init for m in members]))
      start = env_steps
      while env_steps < total and any(m.alive for m in members):
        prev = env_steps
        state, output, env_steps = _call(progs, state, members, env_steps,
                                         total)
        for m in members:
          if m.alive:
            m.sps = (env_steps - start) / max(time.time() - t0, 1e-9)
        _stop_diverged(state, output, members, progress)
        rate = progress.rate(env_steps)
        progress.update(env_steps, rate, _mean_eval(members))
        finished = env_steps >= total
        alive = [m for m in members if m.alive]
        if alive and (env_steps >= alive[0].runner.next_eval or finished):
          _evaluate(progs, state, output, members, progress)
        if (env_steps // ckpt_every > prev // ckpt_every or finished):
          progress.status(f'saving checkpoints at {env_steps} env steps...')
          _checkpoint(progs, state, members, save_replay, keep)
          saved_at = env_steps
        if stop.signum is not None and not finished:
          if saved_at != env_steps:
            _checkpoint(progs, state, members, save_replay, keep)
          progress.clear()
          raise Interrupted(
              f'stopped by {_signal_name(stop.signum)} at {env_steps} env '
              f'steps of {int(run0.steps)}; checkpoints saved in each '
              f'member. Resume with: roxie train --resume {members[0].out}',
              signum=stop.signum, env_steps=env_steps, out=members[0].out)
  finally:
    progress.close()
  return _result(members, total, verbose)


def _call(progs: _Programs, state, members: Sequence[_Member], env_steps: int,
          total: int):
  """One compiled call of the population; the episode counts it brings."""
  runner = next(m.runner for m in members if m.alive)
  target = min(max(runner.next_eval, env_steps + 1), total)
  iterations = min(progs.single.iterations,
                   -(-(target - env_steps) // progs.per_iter))
  with _host_errors():
    state, output = progs.run_for(iterations)(state)
    jax.block_until_ready(output)
  env_steps += iterations * progs.per_iter
  stats = jax.device_get(output.stats)
  for k, m in enumerate(members):
    if m.alive:
      m.env_steps = env_steps
      _count_episodes(m.runner, loops.member(stats, k))
  return state, output, env_steps


def _stop_diverged(state, output, members: List[_Member],
                   progress: _Progress) -> None:
  """Stops each member whose agent state is no longer finite (a row each)."""
  changed = False
  for k, m in enumerate(members):
    if not m.alive:
      continue
    agent = loops.member(state.agent, k)
    bad = nonfinite_leaves(agent)
    if not bad:
      continue
    row = _row(m, loops.member(output, k), wall=round(m.wall(), 2),
               eval_return=math.nan, eval_return_std=math.nan,
               nonfinite=len(bad))
    m.csv_log.write(row)
    m.alive, changed = False, True
    last = ckpt_lib.latest(m.out)
    progress.log(
        f'roxie: {m.label} diverged at {m.env_steps} env steps: '
        f'{_nonfinite_message(bad, _count_inexact(agent), "its agent state")}'
        f'. It stops (its last good checkpoint, {last}, is kept); the other '
        'members train on.')
  if changed:
    _write_population_file(members)


def _mean_eval(members: Sequence[_Member]) -> Optional[float]:
  evals = [m.runner.last_eval for m in members
           if m.alive and m.runner.last_eval is not None]
  return float(np.mean(evals)) if evals else None


def _evaluate(progs: _Programs, state, output, members: Sequence[_Member],
              progress: _Progress) -> None:
  """Evaluates every training member's policy; a row and a line each."""
  for k, m in enumerate(members):
    if not m.alive:
      continue
    runner = m.runner
    runner.next_eval += int(m.run.eval_every)
    m.key, k_eval = jax.random.split(m.key)
    with _host_errors():
      result = jax.device_get(progs.evaluators[k](
          loops.member(state.agent, k), k_eval))
    runner.last_eval, runner.last_eval_std = float(result.mean), float(
        result.std)
    row = _row(m, loops.member(output, k), wall=round(m.wall(), 2),
               eval_return=runner.last_eval,
               eval_return_std=runner.last_eval_std, nonfinite=0)
    m.csv_log.write(row)
    progress.write(row, label=m.label)
    runner.clipped = runner.diverged = 0


def _checkpoint(progs: _Programs, state, members: Sequence[_Member],
                save_replay: bool, keep: int) -> None:
  """Every training member's own checkpoint of its slice of the state."""
  jax.block_until_ready(state)
  rows = progs.host_rows()
  for k, m in enumerate(members):
    if not m.alive:
      continue
    m.runner.env_steps = m.env_steps
    _save_checkpoint(m.out, progs.single, loops.member(state, k), m.key,
                     m.runner, m.run, m.csv_log, wall=m.wall(),
                     save_replay=save_replay, keep=keep,
                     host_rows=None if rows is None else rows[k])


def _result(members: Sequence[_Member], total: int,
            verbose: bool) -> PopulationResult:
  results = tuple(
      RunResult(eval_return=_nan(m.runner.last_eval),
                eval_return_std=_nan(m.runner.last_eval_std),
                env_steps=m.env_steps, sps=m.sps, wall_time=m.wall(),
                out=m.out)
      for m in members)
  stopped = tuple(m.out for m in members if not m.alive)
  if verbose:
    for m, r in zip(members, results):
      print(f'{m.label}: final eval_return={r.eval_return:.1f} '
            f'env_steps={r.env_steps}', flush=True)
  if stopped:
    raise TrainingFault(
        f'{len(stopped)} of {len(members)} members diverged and stopped: '
        f'{", ".join(stopped)} (their last good checkpoints are kept); the '
        f'others trained to {total} env steps. Start the diverged settings '
        'again with smaller learning rates (or --set max_grad_norm=...).')
  return PopulationResult(members=results, stopped=stopped)


def _nan(x: Optional[float]) -> float:
  return float('nan') if x is None else float(x)
