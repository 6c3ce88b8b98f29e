"""train, resume and evaluate_run: the loop around the compiled program.

`_train` reads top to bottom: open the run (`_Training.open`), restore a
checkpoint (`_restore`), then one compiled call after another
(`_one_call`), each followed by the evaluation (`_evaluate`), checkpoint
and stop checks that fall due.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import jax
import numpy as np

from roxie import checkpoint as ckpt_lib
from roxie import distributed
from roxie import envs
from roxie import loops
from roxie.run import files
from roxie.run import programs as programs_lib
from roxie.run.checkpoints import _Runner, _load_checkpoint, _save_checkpoint, adopt_metrics, load_run_agent_state, older_checkpoint_hint
from roxie.run.config import AGENT_ONLY, DEFAULT_TASK, RunConfig, _agent_name, _check_positive, _rounding_notes, check_resumable, load_run_config, new_run_config, whole_iterations
from roxie.run.errors import Interrupted, RunError, TrainingFault
from roxie.run.files import CONFIG_FILE, DEFAULT_KEEP_CHECKPOINTS, METRICS_FILE, POPULATION_FILE, RESTART_SUFFIX, TENSORBOARD_DIR, _count_rows, _run_lock, _saved_total
from roxie.run.health import _count_inexact, _health, _host_errors, _nonfinite_message, nonfinite_leaves
from roxie.run.logging import Logger, _MetricsCsv, _Progress, _TensorBoard, _warn, check_tensorboard
from roxie.run.programs import ProgramCache, Programs
from roxie.run.schedules import _checkpoint_stage, _switch_stage, at_stage, parse_resolution_schedule, stage_at, trained_run
from roxie.run.signals import StopRequest, _signal_name


@dataclasses.dataclass
class RunResult:
  eval_return: float
  eval_return_std: float
  env_steps: int
  sps: float
  wall_time: float
  out: Optional[str]
  resumed_from: Optional[int] = None  # Env steps of the restored checkpoint.
  resolution: Optional[Tuple[int, int]] = None  # Final (H, W) from pixels.


def train(agent: Any = 'sac', task: str = DEFAULT_TASK, *, backend: str = 'cpu',
          num_envs: Optional[int] = None, steps: Optional[int] = None,
          seed: int = 0, out: Optional[str] = None,
          overrides: Optional[Mapping[str, Any]] = None,
          eval_every: Optional[int] = None, eval_episodes: int = 10,
          verbose: bool = True, env_options: Optional[Mapping[str, Any]] = None,
          checkpoint_every: Optional[int] = None,
          keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
          save_replay: bool = True, tensorboard: bool = False,
          num_devices: Optional[int] = None,
          resolution_schedule: Optional[Any] = None,
          programs: Optional[ProgramCache] = None) -> RunResult:
  """Trains `agent` on `task`; returns the final evaluation.

  It stays one function: most of its length is the Args list of this public
  entry point; the body (the checks that run before anything is written,
  then the run) is ~40 lines.

  Args:
    agent: one of `roxie.agents.AGENTS`, or a user's recipe: a module (or a
      factory function defined at a module's top level) with a `Config`
      dataclass, or its name as 'path/to/file.py:make' or
      'package.module:make' (see `roxie.agents`). The run records it by that
      name, so resume, eval and export load it again.
    task: a registered task name.
    backend: 'cpu' (native MuJoCo) or 'mjx'.
    num_envs: parallel training environments (default: the config's).
    steps: total environment steps (default: the config's `total_steps`).
    seed: PRNG seed.
    out: run directory for config.json, metrics.csv and checkpoints (None:
      nothing is written). It must not hold a run already (see `resume`).
    overrides: config fields to change (values may be strings).
    eval_every: environment steps between evaluations (default: ~10 per run).
    eval_episodes: episodes per evaluation (one per evaluation env).
    verbose: print progress and the final line.
    env_options: extra keyword arguments for `roxie.envs.make`.
    checkpoint_every: environment steps between checkpoints (default: at
      each evaluation); one is always written at the end.
    keep_checkpoints: how many of the newest checkpoints to keep.
    save_replay: include the replay buffer in checkpoints (needed for an
      exact resume of off-policy agents).
    tensorboard: also write TensorBoard event files (needs tensorboardX).
    num_devices: train data-parallel over this many devices (num_envs and
      the batch size must be multiples of it; see `roxie.distributed`).
      Default: 1, or every device of a multi-process job.
    resolution_schedule: from pixels, [[env steps, height, width], ...] or
      its text form ('32@0,48@40000'; see `parse_resolution_schedule`): the
      image size changes at those env steps (see the module docstring). The
      first stage's size replaces env_options['pixels']'s. Needs
      `encoder_pooling` 'mean' or 'spatial_softmax' in the config.
    programs: the cache of built programs to use and fill (default:
      `roxie.run.programs.DEFAULT_PROGRAMS`, this process's).

  Raises:
    FileExistsError: `out` already holds a run.
    RunError: another process trains `out`, or a resolution schedule that
      cannot be followed.
  """
  agent = _agent_name(agent)
  _check_positive(checkpoint_every=checkpoint_every,
                  keep_checkpoints=keep_checkpoints)
  if tensorboard:
    check_tensorboard()
  if jax.process_count() > 1 and jax.process_index() != 0:
    out = None  # Process 0 alone writes the run directory.
  if out and os.path.exists(os.path.join(out, CONFIG_FILE)):
    raise FileExistsError(
        f'{out} already holds a run ({CONFIG_FILE}); continue it with '
        f'`roxie train --resume {out}` or choose another directory.')
  if isinstance(resolution_schedule, str):
    try:
      resolution_schedule = parse_resolution_schedule(resolution_schedule)
    except ValueError as e:
      raise RunError(str(e)) from None
  run = new_run_config(agent, task, backend, num_envs, steps, seed, overrides,
                       eval_every, eval_episodes, env_options, checkpoint_every,
                       resolution_schedule)
  run = dataclasses.replace(
      run, num_devices=distributed.default_num_devices(num_devices))
  if run.num_envs % run.num_devices:
    raise ValueError(f'num_envs ({run.num_envs}) must be a multiple of '
                     f'num_devices ({run.num_devices}).')
  if jax.process_count() > 1:
    # Checkpoints hold the replicated agent state only (see the module doc).
    run = dataclasses.replace(run, num_processes=jax.process_count(),
                              checkpoint_contents=AGENT_ONLY)
  if out and os.path.exists(out) and not os.path.isdir(out):
    raise RunError(f'{out} is a file, not a directory: choose another --out '
                   'for the run directory.')
  cache = programs or programs_lib.DEFAULT_PROGRAMS
  # Before config.json: a bad run leaves nothing.
  programs_lib._check_buildable(run, cache)  # pylint: disable=protected-access
  with _run_lock(out):
    if out:
      files._write_json(os.path.join(out, CONFIG_FILE), run.to_json())  # pylint: disable=protected-access
    return _train(run, out, resume=False, checkpoint_every=checkpoint_every,
                  keep=keep_checkpoints, save_replay=save_replay,
                  tensorboard=tensorboard, verbose=verbose,
                  eval_every_asked=eval_every, cache=cache)


def resume(run_dir: str, *, steps: Optional[int] = None,
           checkpoint_every: Optional[int] = None,
           keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
           save_replay: bool = True, tensorboard: bool = False,
           verbose: bool = True,
           programs: Optional[ProgramCache] = None) -> RunResult:
  """Continues a run from its latest checkpoint, with its saved config.

  Args:
    run_dir: a run directory written by `train`.
    steps: a new total of environment steps (default: the run's).
    checkpoint_every, keep_checkpoints, save_replay, tensorboard, verbose,
      programs: as for `train` (they do not change the run's results).

  Raises:
    FileNotFoundError: not a run directory.
    roxie.checkpoint.CheckpointError: the latest checkpoint is unreadable,
      corrupt or belongs to another run (nothing is changed then).
    RunError: nothing to resume from, or another process trains the run.
  """
  _check_positive(checkpoint_every=checkpoint_every,
                  keep_checkpoints=keep_checkpoints, steps=steps)
  if tensorboard:
    check_tensorboard()
  run, _, _ = load_run_config(run_dir)
  check_resumable(run, run_dir)
  if os.path.exists(os.path.join(run_dir, POPULATION_FILE)):
    raise RunError(
        f'{run_dir} is a member of a population ({POPULATION_FILE}): resuming '
        'it alone would leave the other members behind. Resume the whole '
        f'population with roxie.run.resume_population({run_dir!r}) (what '
        f'`roxie train --resume {run_dir}` does).')
  missing = run.missing_run_fields()
  if missing:
    raise RunError(f'{run_dir} was written by an older roxie without '
                   f'{", ".join(missing)} in {CONFIG_FILE}; it cannot be '
                   'resumed exactly.')
  with _run_lock(run_dir):
    if steps is not None and int(steps) != run.steps:
      run = dataclasses.replace(run, steps=int(steps))
    return _train(run, run_dir, resume=True,
                  checkpoint_every=checkpoint_every, keep=keep_checkpoints,
                  save_replay=save_replay, tensorboard=tensorboard,
                  verbose=verbose,
                  cache=programs or programs_lib.DEFAULT_PROGRAMS)


@dataclasses.dataclass
class _Training:
  """What the training loop of one process carries between compiled calls."""
  run: RunConfig
  out: Optional[str]
  cache: ProgramCache
  progs: Programs  # Those of the resolution-schedule stage trained at.
  total: int  # The run's steps rounded up to whole iterations.
  eval_every: int
  ckpt_every: int
  keep: int
  save_replay: bool
  csv_log: _MetricsCsv
  key: Any  # The runner's evaluation key.
  k_init: Any  # The key the loop state is initialised from.
  runner: _Runner
  state: Any = None  # The LoopState (None until initialised or restored).
  resumed_from: Optional[int] = None
  t0: float = 0.0  # When this process started training.
  start_steps: int = 0
  env_steps: int = 0
  sps: float = 0.0
  saved_at: Optional[int] = None  # Env steps of the last checkpoint written.

  @classmethod
  def open(cls, run: RunConfig, out: Optional[str], *, resume: bool,
           checkpoint_every: Optional[int], keep: int, save_replay: bool,
           cache: ProgramCache) -> '_Training':
    """The loop's state before a restore: programs of the stage to start at."""
    eval_every = int(run.eval_every)
    # The resolution-schedule stage of the state this process starts from:
    # the one its checkpoint holds, on a resume.
    latest = ckpt_lib.latest(out) if (resume and out) else None
    stage = _checkpoint_stage(latest, run) if latest else 0
    progs = cache.get(at_stage(run, stage))
    key, k_init = jax.random.split(jax.random.PRNGKey(run.seed))
    return cls(
        run=run, out=out, cache=cache, progs=progs,
        # The run ends exactly at its steps rounded up to whole iterations.
        total=whole_iterations(run.steps, progs.per_iter),
        eval_every=eval_every, ckpt_every=int(checkpoint_every or eval_every),
        keep=keep, save_replay=save_replay,
        csv_log=_MetricsCsv(os.path.join(out, METRICS_FILE) if out else None),
        key=key, k_init=k_init, runner=_Runner(next_eval=eval_every))

  def wall(self) -> float:
    """Seconds trained, by this process and those before it."""
    return self.runner.wall_time + time.time() - self.t0

  def checkpoint(self) -> None:
    """Writes a checkpoint of the state at env_steps."""
    self.runner.env_steps = self.env_steps
    _save_checkpoint(self.out, self.progs, self.state, self.key, self.runner,
                     self.run, self.csv_log, wall=self.wall(),
                     save_replay=self.save_replay, keep=self.keep)
    self.saved_at = self.env_steps

  def result(self, *, sps: float, wall_time: float) -> RunResult:
    return RunResult(
        eval_return=_nan(self.runner.last_eval),
        eval_return_std=_nan(self.runner.last_eval_std),
        env_steps=self.env_steps, sps=sps, wall_time=wall_time, out=self.out,
        resumed_from=self.resumed_from,
        resolution=at_stage(self.run, self.runner.stage).resolution)


def _train(run: RunConfig, out: Optional[str], *, resume: bool,
           checkpoint_every: Optional[int], keep: int, save_replay: bool,
           tensorboard: bool, verbose: bool,
           eval_every_asked: Optional[int] = None,
           cache: Optional[ProgramCache] = None) -> RunResult:
  """The training loop of a fresh or resumed run (the lock is held)."""
  t = _Training.open(run, out, resume=resume,
                     checkpoint_every=checkpoint_every, keep=keep,
                     save_replay=save_replay,
                     cache=cache or programs_lib.DEFAULT_PROGRAMS)
  notes = _rounding_notes(run, eval_every_asked, int(run.steps))
  if resume:
    notes += _restore(t)
  elif out:
    ckpt_lib.cleanup(out)
  if out and run.agent_only:
    notes.append(
        f'note: multi-process job ({run.num_processes} processes): '
        f'process 0 writes {out}; its checkpoints hold the agent state only '
        '(environment and replay state are sharded across the processes and '
        'not gathered), so this run cannot be resumed.')
  t.env_steps = t.runner.env_steps
  progress = _Progress(t.total, t.runner.env_steps, verbose)
  _show_notes(progress, notes)
  if t.runner.env_steps >= t.total:
    progress.log(f'nothing to do: {out} is at {t.runner.env_steps} env steps '
                 f'and its total is {t.total} (pass a larger --steps to '
                 'extend it).')
    return t.result(sps=0.0, wall_time=t.runner.wall_time)
  board = None
  if tensorboard and out:
    board = _TensorBoard(os.path.join(out, TENSORBOARD_DIR),
                         purge_step=(t.runner.env_steps + 1) if resume else None)
  loggers = [log for log in (t.csv_log, board) if log is not None]
  t.t0 = time.time()
  t.start_steps = t.runner.env_steps
  t.saved_at = t.runner.env_steps if resume else None
  try:
    # SIGINT/SIGTERM stop the run at the next iteration boundary, with a
    # checkpoint. Not in a multi-process job: one process stopping alone
    # would leave the others waiting in a collective.
    with StopRequest(out, enabled=bool(out) and
                     jax.process_count() == 1) as stop:
      progress.status('starting (the first call compiles the training '
                      'program)...')
      if t.state is None:
        t.state = t.progs.init(t.k_init)
      while t.env_steps < t.total:
        _one_call(t, stop, progress, loggers)
  finally:
    progress.close()
    if board:
      board.close()
  final = t.result(sps=t.sps, wall_time=t.wall())
  if verbose:
    print(final_line(final), flush=True)
  return final


def _show_notes(progress: _Progress, notes: Sequence[str]) -> None:
  for note in notes:
    if note.startswith(('warning:', 'note:')):  # Shown even when quiet.
      print(f'roxie: {note}', file=sys.stderr, flush=True)
    else:
      progress.log(note)


def _restore(t: _Training) -> List[str]:
  """Restores a resumed run's latest checkpoint into `t`; notes to show."""
  out, notes = t.out, []
  path = ckpt_lib.latest(out)
  if path is None:
    # Stopped before its first checkpoint was committed (killed, a second
    # Ctrl-C or a full disk during it): the run starts again from step 0
    # with its saved seed and config. The rows it had logged are recomputed
    # (the same but for timing); the old file is kept aside.
    metrics_path = os.path.join(out, METRICS_FILE)
    rows = _count_rows(metrics_path)
    aside = metrics_path + RESTART_SUFFIX
    if os.path.exists(metrics_path):
      os.replace(metrics_path, aside)
    notes.append(f'{out} has no checkpoint yet (stopped before the first '
                 'one was complete): starting it again from step 0 with '
                 'its saved seed and config'
                 + (f'; the {rows} row(s) of {METRICS_FILE} it had are '
                    f'recomputed (the old file is kept as {aside}).'
                    if rows else '.'))
  else:
    notes += _restore_checkpoint(t, path)
  removed = ckpt_lib.cleanup(out)
  if removed:
    notes.append(f'removed {len(removed)} unfinished checkpoint write(s) '
                 f'left by a killed process: {", ".join(removed)}.')
  if t.total > t.runner.env_steps and int(t.run.steps) != _saved_total(out):
    files._write_json(os.path.join(out, CONFIG_FILE), t.run.to_json())  # A new total.  # pylint: disable=protected-access
  return notes


def _restore_checkpoint(t: _Training, path: str) -> List[str]:
  """Loads the checkpoint at `path` into `t`; notes to show."""
  stage = _checkpoint_stage(path, t.run)
  try:
    t.state, t.key, t.runner, replay_restored = _load_checkpoint(
        path, t.progs, t.run, t.k_init)
  except ckpt_lib.CheckpointError as e:
    raise ckpt_lib.CheckpointError(f'{e}{older_checkpoint_hint(path)}'
                                   ) from None
  runner = t.runner
  runner.stage = stage
  t.resumed_from = runner.env_steps
  notes = [f'resumed {t.out} from {os.path.basename(path)} '
           f'({runner.env_steps} env steps, {runner.csv_rows} metrics rows).']
  notes += adopt_metrics(t.csv_log, runner, path, replay_restored,
                         t.progs.recipe.on_policy)
  return notes


def _one_call(t: _Training, stop: StopRequest, progress: _Progress,
              loggers: Sequence[Logger]) -> None:
  """One compiled call, then the evaluation, checkpoint and stop due after it."""
  _switch_stage_if_due(t, progress)
  # A call ends at the next evaluation point or the end of the run,
  # whichever comes first (a shorter program when it is nearer than a
  # whole call), so both fall exactly where asked.
  target = min(max(t.runner.next_eval, t.env_steps + 1), t.total)
  iterations = min(t.progs.iterations,
                   -(-(target - t.env_steps) // t.progs.per_iter))
  with _host_errors():
    t.state, output = t.progs.run_for(iterations)(t.state)
    output = distributed.local_copy(output)  # No-op on one device.
    jax.block_until_ready(output)
  prev, t.env_steps = t.env_steps, t.env_steps + iterations * t.progs.per_iter
  _count_episodes(t.runner, jax.device_get(output.stats))
  # One reduction over the agent state per call: a NaN/inf parameter
  # stops the run before it is checkpointed, evaluated or exported.
  bad = nonfinite_leaves(distributed.local_copy(t.state.agent))
  t.sps = (t.env_steps - t.start_steps) / max(time.time() - t.t0, 1e-9)
  rate = progress.rate(t.env_steps)
  progress.update(t.env_steps, rate, t.runner.last_eval)
  finished = t.env_steps >= t.total
  if bad:
    _stop_nonfinite(bad, t, output, loggers, progress)
  if t.env_steps >= t.runner.next_eval or finished:
    _evaluate(t, output, progress, loggers)
  if t.out and (t.env_steps // t.ckpt_every > prev // t.ckpt_every
                or finished):
    progress.status(f'saving checkpoint at {t.env_steps} env steps...')
    t.checkpoint()
    progress.update(t.env_steps, rate, t.runner.last_eval)
  if stop.signum is not None and not finished:
    _stop_with_checkpoint(stop, t, progress)


def _switch_stage_if_due(t: _Training, progress: _Progress) -> None:
  """Moves to the resolution-schedule stage the env steps call for."""
  want = stage_at(t.run, t.env_steps)
  if want == t.runner.stage:
    return
  schedule = t.run.resolution_schedule
  _, height, width = schedule[want]
  progress.log(f'resolution {height}x{width} from {t.env_steps} env steps '
               f'(stage {want + 1} of {len(schedule)}): rebuilding the envs '
               'and the training program, resizing the replay...')
  new_progs = t.cache.get(at_stage(t.run, want))
  t.state = _switch_stage(t.state, t.progs, new_progs, t.k_init,
                          (height, width))
  t.progs, t.runner.stage = new_progs, want


def _count_episodes(runner: _Runner, stats) -> None:
  """Adds a call's episode statistics (host arrays) to the runner's."""
  if np.sum(stats.completed) > 0:
    runner.train_return = float(np.sum(stats.completed_return)
                                / np.sum(stats.completed))
  runner.clipped += int(np.sum(stats.clipped))
  runner.diverged += int(np.sum(stats.diverged))


def _row(t: _Training, output, *, wall: float, eval_return: float,
         eval_return_std: float, nonfinite: int) -> Mapping[str, Any]:
  """A metrics.csv row: the run's columns, the recipe's metrics, health."""
  metrics = {k: float(v) for k, v in jax.device_get(output.metrics).items()}
  row = {'env_steps': t.env_steps, 'wall_time': wall,
         'eval_return': eval_return, 'eval_return_std': eval_return_std,
         'train_episode_return': t.runner.train_return,
         'sps': round(t.sps, 1)}
  row.update(metrics)
  row.update(_health(t.runner, nonfinite=nonfinite))
  return row


def _evaluate(t: _Training, output, progress: _Progress,
              loggers: Sequence[Logger]) -> None:
  """Evaluates the policy; one row to every logger and a progress line."""
  runner = t.runner
  runner.next_eval += t.eval_every
  t.key, k_eval = jax.random.split(t.key)
  with _host_errors():
    result = jax.device_get(t.progs.evaluate(
        distributed.local_copy(t.state.agent), k_eval))
  runner.last_eval = float(result.mean)
  runner.last_eval_std = float(result.std)
  row = _row(t, output, wall=round(t.wall(), 2), eval_return=runner.last_eval,
             eval_return_std=runner.last_eval_std, nonfinite=0)
  metrics = {k: float(v) for k, v in jax.device_get(output.metrics).items()}
  if not all(math.isfinite(v) for v in metrics.values()):
    _warn(progress, f'non-finite training metrics at {t.env_steps} '
          f'steps: {metrics}')
  for logger in loggers:
    logger.write(row)
  progress.write(row)
  runner.clipped = runner.diverged = 0


def _stop_nonfinite(bad: List[str], t: _Training, output,
                    loggers: Sequence[Logger], progress: _Progress) -> None:
  """Ends a run whose agent state became non-finite: a row, then a fault.

  The poisoned state is neither evaluated nor checkpointed; the last
  checkpoint (if any) stays the latest, so `roxie eval/export` use it.
  """
  total = _count_inexact(t.state.agent)
  row = _row(t, output, wall=round(t.wall(), 2), eval_return=math.nan,
             eval_return_std=math.nan, nonfinite=len(bad))
  for logger in loggers:
    logger.write(row)
  last = ckpt_lib.latest(t.out) if t.out else None
  kept = (f'the last good checkpoint, {last}, is kept (roxie eval/export '
          'use it)' if last else 'no checkpoint had been written yet')
  progress.clear()
  raise TrainingFault(
      f'training diverged at {t.env_steps} env steps: '
      f'{_nonfinite_message(bad, total, "the agent state")}. Training '
      f'stopped and this state was not saved; {kept}. Resuming would '
      'diverge again: start a new run with smaller learning rates (or '
      '--set max_grad_norm=...).')


def _stop_with_checkpoint(stop: StopRequest, t: _Training,
                          progress: _Progress) -> None:
  """Ends a run a signal asked to stop: a checkpoint here, then Interrupted."""
  out, env_steps = t.out, t.env_steps
  if t.saved_at != env_steps:
    progress.status(f'saving checkpoint at {env_steps} env steps before '
                    'stopping...')
    t.checkpoint()
  path = os.path.join(ckpt_lib.checkpoint_dir(out),
                      ckpt_lib.step_name(env_steps))
  progress.clear()
  raise Interrupted(
      f'stopped by {_signal_name(stop.signum)} at {env_steps} env steps of '
      f'{int(t.run.steps)}; checkpoint saved to {path}, {t.csv_log.rows} '
      f'rows in {os.path.join(out, METRICS_FILE)}. Resume with: roxie train '
      f'--resume {out}', signum=stop.signum, env_steps=env_steps,
      checkpoint=path, out=out)


def _nan(x: Optional[float]) -> float:
  return float('nan') if x is None else float(x)


def final_line(result: RunResult) -> str:
  return (f'final eval_return={result.eval_return:.1f} '
          f'env_steps={result.env_steps} sps={result.sps:.0f}')


def evaluate_run(run_dir: str, *, episodes: int = 10, backend: Optional[str] = None,
                 seed: int = 0) -> loops.EvalResult:
  """Re-evaluates the policy of a run's latest checkpoint (on either backend)."""
  run, module, cfg = load_run_config(run_dir)
  backend = backend or run.backend
  env = envs.make(run.task, backend=backend, num_envs=episodes,
                  **trained_run(run_dir, run).env_kwargs(backend))
  recipe = module.make(cfg, env.spec)
  template = jax.eval_shape(lambda k: recipe.init(k, env.spec),
                            jax.random.PRNGKey(0))
  agent_state = load_run_agent_state(run_dir, template)
  evaluate = loops.make_evaluator(recipe, env)
  with _host_errors():
    return jax.device_get(evaluate(agent_state, jax.random.PRNGKey(seed)))
