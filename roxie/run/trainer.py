"""train, resume and evaluate_run: the loop around the compiled program."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import jax
import numpy as np

from roxie import checkpoint as ckpt_lib
from roxie import distributed
from roxie import envs
from roxie import loops
from roxie.run import files
from roxie.run import programs
from roxie.run.checkpoints import _Runner, _load_checkpoint, _save_checkpoint, load_run_agent_state, older_checkpoint_hint
from roxie.run.config import AGENT_ONLY, DEFAULT_TASK, RUN_FIELDS, _agent_name, _check_positive, _new_run_meta, _resolution, _rounding_notes, check_resumable, env_kwargs, load_run, whole_iterations
from roxie.run.errors import Interrupted, RunError, TrainingFault
from roxie.run.files import CONFIG_FILE, DEFAULT_KEEP_CHECKPOINTS, METRICS_FILE, RESTART_SUFFIX, TENSORBOARD_DIR, _count_rows, _run_lock, _saved_total
from roxie.run.health import _count_inexact, _health, _health_text, _host_errors, _nonfinite_message, nonfinite_leaves
from roxie.run.logging import _MetricsCsv, _Progress, _TensorBoard, _warn, check_tensorboard
from roxie.run.programs import _programs
from roxie.run.schedules import _checkpoint_stage, _switch_stage, parse_resolution_schedule, schedule_stage, stage_meta, trained_env_options
from roxie.run.signals import _StopRequest, _signal_name


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
          resolution_schedule: Optional[Any] = None) -> RunResult:
  """Trains `agent` on `task`; returns the final evaluation.

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
  meta = _new_run_meta(agent, task, backend, num_envs, steps, seed, overrides,
                       eval_every, eval_episodes, env_options, checkpoint_every,
                       resolution_schedule)
  meta['num_devices'] = distributed.default_num_devices(num_devices)
  if meta['num_envs'] % meta['num_devices']:
    raise ValueError(f"num_envs ({meta['num_envs']}) must be a multiple of "
                     f"num_devices ({meta['num_devices']}).")
  if jax.process_count() > 1:
    # Checkpoints hold the replicated agent state only (see the module doc).
    meta['num_processes'] = jax.process_count()
    meta['checkpoint_contents'] = AGENT_ONLY
  if out and os.path.exists(out) and not os.path.isdir(out):
    raise RunError(f'{out} is a file, not a directory: choose another --out '
                   'for the run directory.')
  programs._check_buildable(meta)  # Before config.json: a bad run leaves nothing.
  with _run_lock(out):
    if out:
      files._write_json(os.path.join(out, CONFIG_FILE), meta)
    return _train(meta, out, resume=False, checkpoint_every=checkpoint_every,
                  keep=keep_checkpoints, save_replay=save_replay,
                  tensorboard=tensorboard, verbose=verbose,
                  eval_every_asked=eval_every)


def resume(run_dir: str, *, steps: Optional[int] = None,
           checkpoint_every: Optional[int] = None,
           keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
           save_replay: bool = True, tensorboard: bool = False,
           verbose: bool = True) -> RunResult:
  """Continues a run from its latest checkpoint, with its saved config.

  Args:
    run_dir: a run directory written by `train`.
    steps: a new total of environment steps (default: the run's).
    checkpoint_every, keep_checkpoints, save_replay, tensorboard, verbose:
      as for `train` (they do not change the run's results).

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
  meta, _, _ = load_run(run_dir)
  meta = dict(meta)
  check_resumable(meta, run_dir)
  missing = [k for k in RUN_FIELDS if k not in meta]
  if missing:
    raise RunError(f'{run_dir} was written by an older roxie without '
                   f'{", ".join(missing)} in {CONFIG_FILE}; it cannot be '
                   'resumed exactly.')
  with _run_lock(run_dir):
    if steps is not None and int(steps) != meta['steps']:
      meta['steps'] = int(steps)
    return _train(meta, run_dir, resume=True,
                  checkpoint_every=checkpoint_every, keep=keep_checkpoints,
                  save_replay=save_replay, tensorboard=tensorboard,
                  verbose=verbose)


def _train(meta: Dict[str, Any], out: Optional[str], *, resume: bool,
           checkpoint_every: Optional[int], keep: int, save_replay: bool,
           tensorboard: bool, verbose: bool,
           eval_every_asked: Optional[int] = None) -> RunResult:
  """The training loop of a fresh or resumed run (the lock is held)."""
  total = int(meta['steps'])
  eval_every = int(meta['eval_every'])
  ckpt_every = int(checkpoint_every or eval_every)
  # The resolution-schedule stage of the state this process starts from:
  # the one its checkpoint holds, on a resume.
  latest = ckpt_lib.latest(out) if (resume and out) else None
  stage = _checkpoint_stage(latest, meta) if latest else 0
  progs = _programs(stage_meta(meta, stage))
  # The run ends exactly at `total` rounded up to whole iterations.
  total = whole_iterations(total, progs.per_iter)
  csv_log = _MetricsCsv(os.path.join(out, METRICS_FILE) if out else None)
  key = jax.random.PRNGKey(meta['seed'])
  key, k_init = jax.random.split(key)
  runner = _Runner(next_eval=eval_every)
  state = None
  resumed_from = None
  notes = _rounding_notes(meta, eval_every_asked, int(meta['steps']))

  if resume:
    path = ckpt_lib.latest(out)
    if path is None:
      # Stopped before its first checkpoint was committed (killed, a
      # second Ctrl-C or a full disk during it): the run starts again from
      # step 0 with its saved seed and config. The rows it had logged are
      # recomputed (the same but for timing); the old file is kept aside.
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
      try:
        state, key, runner, replay_restored = _load_checkpoint(
            path, progs, meta, k_init)
      except ckpt_lib.CheckpointError as e:
        raise ckpt_lib.CheckpointError(f'{e}{older_checkpoint_hint(path)}'
                                       ) from None
      runner.stage = stage
      resumed_from = runner.env_steps
      dropped = csv_log.adopt(runner.csv_rows, runner.csv_columns,
                              saved=ckpt_lib.read_file(path, METRICS_FILE))
      notes.append(f'resumed {out} from {os.path.basename(path)} '
                   f'({runner.env_steps} env steps, {runner.csv_rows} metrics '
                   'rows).')
      if dropped > 0:
        notes.append(f'dropped {dropped} {METRICS_FILE} row(s) written after '
                     'that checkpoint; they are recomputed.')
      if csv_log.restored:
        notes.append(f'warning: {METRICS_FILE} was damaged '
                     f'({csv_log.restored}); restored its {csv_log.rows} '
                     'row(s) from the checkpoint.')
      if not progs.recipe.on_policy and not replay_restored:
        notes.append('warning: the checkpoint has no replay buffer (saved '
                     'with --no-save-replay): continuing with an EMPTY '
                     'replay, so this run is no longer exact with an '
                     'uninterrupted one.')
    removed = ckpt_lib.cleanup(out)
    if removed:
      notes.append(f'removed {len(removed)} unfinished checkpoint write(s) '
                   f'left by a killed process: {", ".join(removed)}.')
    if total > runner.env_steps and int(meta['steps']) != _saved_total(out):
      files._write_json(os.path.join(out, CONFIG_FILE), meta)  # A new total.
  elif out:
    ckpt_lib.cleanup(out)

  agent_only = meta.get('checkpoint_contents') == AGENT_ONLY
  if out and agent_only:
    notes.append(
        f'note: multi-process job ({meta.get("num_processes")} processes): '
        f'process 0 writes {out}; its checkpoints hold the agent state only '
        '(environment and replay state are sharded across the processes and '
        'not gathered), so this run cannot be resumed.')
  progress = _Progress(total, runner.env_steps, verbose)
  for note in notes:
    if note.startswith(('warning:', 'note:')):  # Shown even when quiet.
      print(f'roxie: {note}', file=sys.stderr, flush=True)
    else:
      progress.log(note)
  if runner.env_steps >= total:
    progress.log(f'nothing to do: {out} is at {runner.env_steps} env steps '
                 f'and its total is {total} (pass a larger --steps to '
                 'extend it).')
    return RunResult(
        eval_return=_nan(runner.last_eval),
        eval_return_std=_nan(runner.last_eval_std), env_steps=runner.env_steps,
        sps=0.0, wall_time=runner.wall_time, out=out,
        resumed_from=resumed_from,
        resolution=_resolution(stage_meta(meta, runner.stage)))

  board = None
  if tensorboard and out:
    board = _TensorBoard(os.path.join(out, TENSORBOARD_DIR),
                         purge_step=(runner.env_steps + 1) if resume else None)
  t0 = time.time()
  start_steps = runner.env_steps
  env_steps = runner.env_steps
  sps = 0.0
  saved_at = runner.env_steps if resume else None
  # SIGINT/SIGTERM stop the run at the next iteration boundary, with a
  # checkpoint. Not in a multi-process job: one process stopping alone would
  # leave the others waiting in a collective.
  stop = _StopRequest(out, enabled=bool(out) and jax.process_count() == 1)
  try:
    stop.__enter__()
    progress.status('starting (the first call compiles the training '
                    'program)...')
    if state is None:
      state = progs.init(k_init)
    while env_steps < total:
      want = schedule_stage(meta, env_steps)
      if want != runner.stage:
        _, height, width = meta['resolution_schedule'][want]
        progress.log(f'resolution {height}x{width} from {env_steps} env steps '
                     f'(stage {want + 1} of '
                     f'{len(meta["resolution_schedule"])}): rebuilding the '
                     'envs and the training program, resizing the replay...')
        new_progs = _programs(stage_meta(meta, want))
        state = _switch_stage(state, progs, new_progs, k_init,
                              (height, width))
        progs, runner.stage = new_progs, want
      # A call ends at the next evaluation point or the end of the run,
      # whichever comes first (a shorter program when it is nearer than a
      # whole call), so both fall exactly where asked.
      target = min(max(runner.next_eval, env_steps + 1), total)
      iterations = min(progs.iterations,
                       -(-(target - env_steps) // progs.per_iter))
      with _host_errors():
        state, output = progs.run_for(iterations)(state)
        output = distributed.local_copy(output)  # No-op on one device.
        jax.block_until_ready(output)
      prev, env_steps = env_steps, env_steps + iterations * progs.per_iter
      stats = jax.device_get(output.stats)
      if np.sum(stats.completed) > 0:
        runner.train_return = float(np.sum(stats.completed_return)
                                    / np.sum(stats.completed))
      runner.clipped += int(np.sum(stats.clipped))
      runner.diverged += int(np.sum(stats.diverged))
      # One reduction over the agent state per call: a NaN/inf parameter
      # stops the run before it is checkpointed, evaluated or exported.
      bad = nonfinite_leaves(distributed.local_copy(state.agent))
      elapsed = time.time() - t0
      sps = (env_steps - start_steps) / max(elapsed, 1e-9)
      rate = progress.rate(env_steps)
      progress.update(env_steps, rate, runner.last_eval)
      finished = env_steps >= total
      if bad:
        _stop_nonfinite(bad, state, output, out, runner, csv_log, board,
                        progress, env_steps=env_steps,
                        wall=round(runner.wall_time + time.time() - t0, 2),
                        sps=sps)
      if env_steps >= runner.next_eval or finished:
        runner.next_eval += eval_every
        key, k_eval = jax.random.split(key)
        with _host_errors():
          result = jax.device_get(progs.evaluate(
              distributed.local_copy(state.agent), k_eval))
        runner.last_eval = float(result.mean)
        runner.last_eval_std = float(result.std)
        metrics = {k: float(v)
                   for k, v in jax.device_get(output.metrics).items()}
        if not all(math.isfinite(v) for v in metrics.values()):
          _warn(progress, f'non-finite training metrics at {env_steps} '
                f'steps: {metrics}')
        row = {'env_steps': env_steps,
               'wall_time': round(runner.wall_time + time.time() - t0, 2),
               'eval_return': runner.last_eval,
               'eval_return_std': runner.last_eval_std,
               'train_episode_return': runner.train_return,
               'sps': round(sps, 1)}
        row.update(metrics)
        row.update(_health(runner, nonfinite=0))
        csv_log.append(row)
        if board:
          board.write(row)
        progress.log(f'steps={env_steps} eval_return={runner.last_eval:.1f} '
                     f'train_return={runner.train_return:.1f} sps={sps:,.0f} '
                     f'time={runner.wall_time + time.time() - t0:.0f}s'
                     + _health_text(runner))
        runner.clipped = runner.diverged = 0
      if out and (env_steps // ckpt_every > prev // ckpt_every or finished):
        progress.status(f'saving checkpoint at {env_steps} env steps...')
        runner.env_steps = env_steps
        _save_checkpoint(out, progs, state, key, runner, meta, csv_log,
                         wall=runner.wall_time + time.time() - t0,
                         save_replay=save_replay, keep=keep)
        saved_at = env_steps
        progress.update(env_steps, rate, runner.last_eval)
      if stop.signum is not None and not finished:
        _stop_with_checkpoint(stop, out, progs, state, key, runner, meta,
                              csv_log, progress, saved_at=saved_at,
                              env_steps=env_steps,
                              wall=runner.wall_time + time.time() - t0,
                              save_replay=save_replay, keep=keep)
  finally:
    stop.__exit__(None, None, None)
    progress.close()
    if board:
      board.close()
  wall = time.time() - t0
  final = RunResult(eval_return=_nan(runner.last_eval),
                    eval_return_std=_nan(runner.last_eval_std),
                    env_steps=env_steps, sps=sps,
                    wall_time=runner.wall_time + wall, out=out,
                    resumed_from=resumed_from,
                    resolution=_resolution(stage_meta(meta, runner.stage)))
  if verbose:
    print(final_line(final), flush=True)
  return final


def _stop_nonfinite(bad: List[str], state, output, out: Optional[str],
                    runner: _Runner, csv_log: '_MetricsCsv', board,
                    progress: '_Progress', *, env_steps: int, wall: float,
                    sps: float) -> None:
  """Ends a run whose agent state became non-finite: a row, then a fault.

  The poisoned state is neither evaluated nor checkpointed; the last
  checkpoint (if any) stays the latest, so `roxie eval/export` use it.
  """
  total = _count_inexact(state.agent)
  metrics = {k: float(v) for k, v in jax.device_get(output.metrics).items()}
  row = {'env_steps': env_steps, 'wall_time': wall, 'eval_return': math.nan,
         'eval_return_std': math.nan,
         'train_episode_return': runner.train_return, 'sps': round(sps, 1)}
  row.update(metrics)
  row.update(_health(runner, nonfinite=len(bad)))
  csv_log.append(row)
  if board:
    board.write(row)
  last = ckpt_lib.latest(out) if out else None
  kept = (f'the last good checkpoint, {last}, is kept (roxie eval/export '
          'use it)' if last else 'no checkpoint had been written yet')
  progress.clear()
  raise TrainingFault(
      f'training diverged at {env_steps} env steps: '
      f'{_nonfinite_message(bad, total, "the agent state")}. Training '
      f'stopped and this state was not saved; {kept}. Resuming would '
      'diverge again: start a new run with smaller learning rates (or '
      '--set max_grad_norm=...).')


def _stop_with_checkpoint(stop: _StopRequest, out, progs, state, key,
                          runner: _Runner, meta, csv_log, progress, *,
                          saved_at: Optional[int], env_steps: int,
                          wall: float, save_replay: bool, keep: int) -> None:
  """Ends a run a signal asked to stop: a checkpoint here, then Interrupted."""
  if saved_at != env_steps:
    progress.status(f'saving checkpoint at {env_steps} env steps before '
                    'stopping...')
    runner.env_steps = env_steps
    _save_checkpoint(out, progs, state, key, runner, meta, csv_log,
                     wall=wall, save_replay=save_replay, keep=keep)
  path = os.path.join(ckpt_lib.checkpoint_dir(out), ckpt_lib.step_name(env_steps))
  progress.clear()
  raise Interrupted(
      f'stopped by {_signal_name(stop.signum)} at {env_steps} env steps of '
      f'{int(meta["steps"])}; checkpoint saved to {path}, {csv_log.rows} rows '
      f'in {os.path.join(out, METRICS_FILE)}. Resume with: roxie train '
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
  meta, module, cfg = load_run(run_dir)
  backend = backend or meta['backend']
  env = envs.make(meta['task'], backend=backend, num_envs=episodes,
                  **env_kwargs(trained_env_options(run_dir, meta)))
  recipe = module.make(cfg, env.spec)
  template = jax.eval_shape(lambda k: recipe.init(k, env.spec),
                            jax.random.PRNGKey(0))
  agent_state = load_run_agent_state(run_dir, template)
  evaluate = loops.make_evaluator(recipe, env)
  with _host_errors():
    return jax.device_get(evaluate(agent_state, jax.random.PRNGKey(seed)))
