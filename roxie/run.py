"""Training and evaluation runs: the host side around the compiled loop.

`train(...)` builds the environment, the recipe and the compiled loop, calls
the loop, and between calls evaluates, appends to `metrics.csv`, writes
checkpoints and reports progress. Everything heavy runs inside the compiled
loop. `resume(run_dir)` continues a run from its latest checkpoint.

A run directory:

  config.json        what defines the run: agent, task, backend, num_envs,
                     seed, env options, the agent's config, total steps,
                     eval_every, eval_episodes, iterations_per_call
  metrics.csv        one row per evaluation, appended
  agent_state.npz    the agent state of the latest checkpoint (leaves only;
                     kept for tools that read just the policy)
  checkpoints/       see `roxie.checkpoint`; each checkpoint has items
                       agent   the recipe's state (params, target networks,
                               optimiser states, temperatures/duals, noise
                               and normaliser state, update counters)
                       loop    the rest of the LoopState (env state, episode
                               statistics, the loop's PRNG key, iteration),
                               the runner's evaluation key and, on the native
                               CPU backend, the host physics state
                       replay  the replay buffer (unless save_replay=False)
                     and in meta.json the runner's counters (env steps,
                     next evaluation, last evaluation, CSV rows, wall time)
  tensorboard/       event files, with tensorboard=True
  .lock              held (flock) while a process trains the run

Multi-process jobs. Process 0 alone writes the run directory; the other
processes write nothing. Their environment and replay state is sharded
across the processes and is not gathered, so such a run's checkpoints hold
the (replicated) agent state only, config.json says so (`num_processes`,
`checkpoint_contents`), and it cannot be resumed (`resume` says so); its
policy can be evaluated, played and exported like any other.

Exact resume. With the replay saved, a resumed run is bit-exact with an
uninterrupted one: the compiled program is the same (iterations per call is
part of config.json), every array it carries is restored, the native backend's
host physics is restored with `env.set_host_state`, and the runner's own
randomness (evaluation keys) and counters are restored. Rows of metrics.csv
written after the restored checkpoint (a process killed between an
evaluation and its checkpoint) are dropped on resume; the resumed run writes
them again, identical except wall_time and sps. Rows up to the checkpoint are
kept as they are (metrics.csv is appended to across resumes), unless the
file was deleted, emptied or cut short: each checkpoint stores a copy of it
(`file.metrics.csv`), which a resume restores. A run stopped before its
first checkpoint was complete resumes from step 0 with its saved seed and
config (its old metrics.csv is kept aside as metrics.csv.before-restart).

Iterations. The loop advances in whole iterations of
`env_steps_per_iteration` env steps (num_envs x steps per iteration x action
repeat): eval_every is rounded up to whole iterations when the run is
created, and the total is rounded up when training (both with a note). A
call ends at the next evaluation point or at the total when either is
nearer than `iterations_per_call` iterations, with a shorter program
(compiled once), so both fall exactly where they should, and a resumed run
makes the same calls.

Faults. After each call one reduction over the agent state checks that it
is finite; if not, a metrics row records it (`nonfinite_params`) and
`TrainingFault` is raised without evaluating or checkpointing the poisoned
state, so the last checkpoint stays the latest good one. Every row also
counts the action dims the env clipped (outside [-1, 1] or NaN) and the envs
reset after their physics diverged since the previous row. A failed write
(a full disk) raises an OSError; the checkpoint being written is abandoned
and the previous one is intact.

Resolution schedules. A run from pixels may change its image resolution as
it trains (low resolution early, higher later): config.json's
`resolution_schedule` is [[env steps, height, width], ...], the first at 0
steps, strictly increasing (`parse_resolution_schedule`; `roxie train
--resolution-schedule 32@0,48@40000,64@80000`); `env_options['pixels']`
holds the first stage's size. It needs an encoder whose parameters fit any
resolution (`encoder_pooling` 'mean' or 'spatial_softmax', see
`roxie.networks.PixelEncoder`). A stage starts at the first call boundary at
or after its threshold (calls are `iterations_per_call` iterations, at most
`eval_every` env steps): the runner builds the envs of the new size,
rebuilds the recipe and the compiled loop (a recompile), keeps the agent
state (its shapes are checked), converts the replay (every stored frame
resized, `roxie.buffers.replay_resize`) so that learning goes on from the
same data, and carries the training envs over: their episodes continue,
with the frames of their current stacks resized the same way (nothing is
reset, so episode returns and the replay's episodes stay whole). The frames
rendered after the boundary have the new size. Evaluations use the
resolution the agent is training at. Each checkpoint records the stage of
the state it holds (`stage` in the runner state); a resume builds that stage
before restoring, then switches if the env steps call for a later one, so a
resumed run stays exact. `roxie eval --run` and `roxie export` use the
resolution of the latest checkpoint's stage (the final one of a finished
run).

Stopping. SIGINT (Ctrl-C) or SIGTERM during training lets the compiled call
in progress finish, writes a checkpoint at that iteration boundary (unless
one was just written there) and raises `Interrupted` (`roxie train` prints
where it stopped and exits 130 or 143). No evaluation row is added for the
stop, so a stopped and resumed run stays bit-exact with an uninterrupted
one. A second signal raises `Interrupted` at once, mid-checkpoint if need
be; the atomic write then leaves the previous checkpoint as it was.
`roxie train` records a signal that arrives before training started
(while importing, building or tracing; see `set_early_signals`) and stops
as training starts, instead of letting Python raise KeyboardInterrupt
somewhere it may be swallowed (an XLA garbage-collector callback).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from roxie import checkpoint as ckpt_lib
from roxie import config as config_lib
from roxie import distributed
from roxie import envs
from roxie import loops

DEFAULT_TASK = 'CartpoleSwingup'
STATE_FILE = 'agent_state.npz'
CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.csv'
TENSORBOARD_DIR = 'tensorboard'
LOCK_FILE = '.lock'
# metrics.csv of a run restarted from step 0 (no checkpoint), kept aside.
RESTART_SUFFIX = '.before-restart'
DEFAULT_KEEP_CHECKPOINTS = 2
_MAX_ITERATIONS_PER_CALL = 1000

_METRIC_COLUMNS = ('env_steps', 'wall_time', 'eval_return', 'eval_return_std',
                   'train_episode_return', 'sps')
# config.json fields that define a run: a resume must not change them.
RUN_FIELDS = ('agent', 'task', 'backend', 'num_envs', 'seed', 'env_options',
              'config', 'eval_every', 'eval_episodes', 'iterations_per_call')


class RunError(ValueError):
  """A run that cannot be started or resumed as asked, and why."""


class TrainingFault(RuntimeError):
  """Training cannot go on: non-finite parameters, or a failed write.

  Nothing after the last checkpoint is saved (that checkpoint is kept as
  it was); `roxie train` prints the message and exits with status 1.
  """


class Interrupted(KeyboardInterrupt):
  """Training stopped by SIGINT (Ctrl-C) or SIGTERM.

  On the first signal the run finishes the compiled call in progress, saves
  a checkpoint at that iteration boundary and raises this with
  `checkpoint` set; a second signal stops at once (even mid-checkpoint,
  which the atomic write makes safe: the previous checkpoint stays) and
  raises it with `checkpoint` None. A KeyboardInterrupt, so callers that
  catch Ctrl-C keep working.

  Attributes:
    signum: the signal's number.
    env_steps: env steps of the checkpoint written (None without one).
    checkpoint: its path, or None.
    out: the run directory.
    exit_code: the shell's convention for a death by that signal, 128 +
      signum (130 for SIGINT, 143 for SIGTERM).
  """

  def __init__(self, message: str, *, signum: int,
               env_steps: Optional[int] = None,
               checkpoint: Optional[str] = None, out: Optional[str] = None):
    super().__init__(message)
    self.signum = int(signum)
    self.env_steps = env_steps
    self.checkpoint = checkpoint
    self.out = out
    self.exit_code = 128 + self.signum


def _signal_name(signum: int) -> str:
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f'signal {signum}'


# An object whose `signum` records a SIGINT/SIGTERM that arrived before
# training took the signals over (`roxie train` installs one at start-up,
# see roxie.cli); `_StopRequest` stops at once if one is pending.
_early_signals = None


def set_early_signals(recorder) -> None:
  """Registers the recorder of signals received before training started."""
  global _early_signals
  _early_signals = recorder


class _StopRequest:
  """SIGINT/SIGTERM handlers for a training loop (see `Interrupted`).

  The first signal only records itself: the loop checks `signum` between
  compiled calls. The second raises `Interrupted` wherever the main thread
  is. Used as a context manager; restores the previous handlers on exit.
  Inactive (handlers untouched) off the main thread or when not `enabled`.
  """

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self, out: Optional[str], enabled: bool):
    self.out = out
    self.enabled = enabled and threading.current_thread() is threading.main_thread()
    self.signum: Optional[int] = None
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    if self.signum is None:
      self.signum = signum
      print(f'\nroxie: {_signal_name(signum)} received: stopping after the '
            'current training call, with a checkpoint (send it again to stop '
            'at once; the last checkpoint stays).', file=sys.stderr,
            flush=True)
      return
    committed = ckpt_lib.latest(self.out) if self.out else None
    where = (f'the last complete checkpoint is {committed}'
             if committed else 'no checkpoint was written')
    raise Interrupted(
        f'stopped at once by a second {_signal_name(signum)}; {where}. '
        f'Resume with: roxie train --resume {self.out}', signum=signum,
        out=self.out)

  def __enter__(self):
    if self.enabled:
      for s in self.SIGNALS:
        self._previous[s] = signal.signal(s, self._handle)
      early = _early_signals
      if early is not None and early.signum is not None:
        signum, early.signum = early.signum, None
        raise Interrupted(
            f'stopped by {_signal_name(signum)} before training started '
            '(no checkpoint was written). Resume with: roxie train --resume '
            f'{self.out}', signum=signum, out=self.out)
    return self

  def __exit__(self, *exc):
    for s, h in self._previous.items():
      signal.signal(s, h)
    self._previous = {}
    return False


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


def _agent_module(agent: str):
  from roxie import agents  # pylint: disable=g-import-not-at-top
  return agents.get_agent(agent)


def _agent_name(agent: Any) -> str:
  """A built-in name, or a user agent's SOURCE:FACTORY (see roxie.agents)."""
  from roxie import agents  # pylint: disable=g-import-not-at-top
  return agents.canonical_name(agent)


def resolve_config(agent: str, overrides: Mapping[str, Any]):
  """The agent's Config with overrides applied (raises ConfigError/KeyError)."""
  module = _agent_module(agent)
  return module, config_lib.apply_overrides(module.Config(), overrides)


# --- agent_state.npz (policy only) ---------------------------------------------


def save_agent_state(path: str, agent_state) -> None:
  """Saves the agent state's leaves (atomically: write, then rename)."""
  leaves = jax.tree.leaves(agent_state)
  tmp = path + '.tmp'
  with open(tmp, 'wb') as f:
    np.savez(f, *[np.asarray(x) for x in leaves])
  os.replace(tmp, path)


def load_agent_state(path: str, template):
  """Loads leaves saved by `save_agent_state` into `template`'s structure."""
  if not os.path.exists(path):
    raise FileNotFoundError(f'No saved agent state at {path}.')
  try:
    with np.load(path) as data:
      leaves = [data[f'arr_{i}'] for i in range(len(data.files))]
  except Exception as e:  # zipfile/numpy errors on truncated files
    raise ValueError(f'Saved agent state {path} is unreadable ({e}).') from e
  tmpl_leaves, treedef = jax.tree.flatten(template)
  if len(leaves) != len(tmpl_leaves):
    raise ValueError(
        f'Saved agent state {path} has {len(leaves)} arrays; this agent/task '
        f'expects {len(tmpl_leaves)} (another agent or config?).')
  for i, (a, b) in enumerate(zip(leaves, tmpl_leaves)):
    if a.shape != b.shape or a.dtype != b.dtype:
      raise ValueError(
          f'Saved agent state {path}: array {i} is {a.dtype}{list(a.shape)}, '
          f'expected {b.dtype}{list(b.shape)} (another task or network size?).')
  return jax.tree.unflatten(treedef, [jnp.asarray(x) for x in leaves])


# --- progress ----------------------------------------------------------------------


def _short(n: float) -> str:
  n = float(n)
  for div, suffix in ((1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
    if abs(n) >= div:
      return f'{n / div:.1f}'.rstrip('0').rstrip('.') + suffix
  return f'{n:.0f}'


def _clock(seconds: float) -> str:
  if not math.isfinite(seconds) or seconds < 0:
    return '--:--'
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}:{m:02d}:{s:02d}' if h else f'{m:02d}:{s:02d}'


class _Progress:
  """A progress bar on a terminal (stderr); nothing when not a TTY.

  Log lines (one per evaluation) go to stdout whenever `enabled`.
  """

  def __init__(self, total: int, start_steps: int, enabled: bool,
               stream=None):
    self.stream = stream or sys.stderr
    self.total = total
    self.enabled = enabled
    try:
      self.tty = enabled and self.stream.isatty()
    except (AttributeError, ValueError):
      self.tty = False
    enc = (getattr(self.stream, 'encoding', None) or '').lower()
    self.fancy = enc.replace('-', '') == 'utf8'
    self.start_steps = start_steps
    self.shown = False
    # Rate since the end of the first call (which includes the compile).
    self.rate_origin: Optional[Tuple[float, int]] = None

  def _width(self) -> int:
    return max(40, shutil.get_terminal_size((100, 20)).columns - 1)

  def _draw(self, text: str) -> None:
    text = text[:self._width()]
    self.stream.write('\r' + text + '\x1b[K')
    self.stream.flush()
    self.shown = True

  def status(self, text: str) -> None:
    if self.tty:
      self._draw(text)

  def _bar(self, frac: float, width: int) -> str:
    frac = min(1.0, max(0.0, frac))
    if not self.fancy:
      n = int(frac * width)
      return '#' * n + '-' * (width - n)
    eighths = int(frac * width * 8)
    full, part = divmod(eighths, 8)
    partial = ' ▏▎▍▌▋▊▉'[part] if full < width else ''
    return ('█' * full + partial).ljust(width)

  def rate(self, steps: int) -> float:
    """Env steps per second, not counting the first call's compile."""
    now = time.time()
    if self.rate_origin is None:
      self.rate_origin = (now, steps)
      return float('nan')
    t0, s0 = self.rate_origin
    return (steps - s0) / max(now - t0, 1e-9)

  def update(self, steps: int, sps: float, last_eval: Optional[float]) -> None:
    if not self.tty:
      return
    frac = steps / max(1, self.total)
    eta = (self.total - steps) / sps if sps > 0 else float('nan')
    ev = f'{last_eval:.1f}' if last_eval is not None else '-'
    rate = f'{sps:,.0f}' if math.isfinite(sps) else '-'
    right = (f' {frac * 100:3.0f}% {_short(steps)}/{_short(self.total)} steps'
             f'  {rate} sps  eval {ev}  ETA {_clock(eta)}')
    width = max(10, min(30, self._width() - len(right) - 2))
    self._draw(f'[{self._bar(frac, width)}]{right}')

  def clear(self) -> None:
    if self.tty and self.shown:
      self.stream.write('\r\x1b[K')
      self.stream.flush()
      self.shown = False

  def log(self, line: str) -> None:
    self.clear()
    if self.enabled:
      print(line, flush=True)

  def close(self) -> None:
    self.clear()


# --- metrics.csv and TensorBoard ------------------------------------------------------


class _MetricsCsv:
  """metrics.csv: a header, then one appended line per evaluation.

  The text written so far is also kept in memory (`text()`), and every
  checkpoint stores it, so a resume can restore a metrics.csv that was
  deleted, emptied or cut short (see `adopt`).
  """

  def __init__(self, path: Optional[str]):
    self.path = path
    self.columns: Optional[List[str]] = None
    self.rows = 0
    self._lines: List[str] = []  # Header and rows, each ending in a newline.
    self.restored: Optional[str] = None  # Why adopt rewrote the file.

  def text(self) -> str:
    """The header and rows written (or adopted) so far."""
    return ''.join(self._lines)

  def _whole(self, lines: List[str], keep_rows: int) -> Optional[str]:
    """Why the header and the first keep_rows rows are damaged (None: whole)."""
    if not lines:
      return 'it is empty'
    header = next(csv.reader([lines[0]]))
    if self.columns is not None and header != list(self.columns):
      return 'its header is not the one the run wrote'
    if len(lines) - 1 < keep_rows:
      return (f'it has {len(lines) - 1} row(s), the checkpoint recorded '
              f'{keep_rows}')
    for i, line in enumerate(lines[:1 + keep_rows]):
      fields = next(csv.reader([line]), [])
      if not line.endswith('\n') or len(fields) != len(header):
        return f'its line {i + 1} is cut short'
    return None

  def adopt(self, keep_rows: int, columns: Optional[List[str]],
            saved: Optional[str] = None) -> int:
    """For a resume: keeps the header and the first `keep_rows` rows.

    Rows after them (written after the checkpoint) are dropped. If the
    header or those rows are damaged (the file deleted, emptied, or a row
    cut short), the file is rewritten from `saved`, the checkpoint's copy,
    and `restored` says why.

    Args:
      keep_rows: rows the checkpoint recorded.
      columns: the header the checkpoint recorded (None: the file's).
      saved: the checkpoint's copy of metrics.csv (None: it has none).

    Returns:
      The number of rows dropped (written after the checkpoint). The file
      is rewritten (atomically) only when something is dropped or restored.

    Raises:
      RunError: the file is damaged and there is no copy to restore.
    """
    self.columns = list(columns) if columns else None
    self.rows = keep_rows
    self.restored = None
    lines: List[str] = []
    if self.path and os.path.exists(self.path):
      with open(self.path, newline='') as f:
        lines = f.read().splitlines(keepends=True)
    if keep_rows == 0 and not (lines and self.columns is None):
      dropped = max(0, len(lines) - 1)
      self._lines = []
      if lines and self.path:
        os.remove(self.path)
      return dropped
    damage = self._whole(lines, keep_rows)
    if damage is not None:
      if saved is None:
        raise RunError(
            f'{self.path} is damaged ({damage}) and the checkpoint holds no '
            'copy of it (written by an older roxie): restore the file, or '
            'start a new run.')
      self._lines = saved.splitlines(keepends=True)
      if self.columns is None and self._lines:
        self.columns = next(csv.reader([self._lines[0]]))
      self.rows = max(0, len(self._lines) - 1)
      self._rewrite()
      self.restored = damage
      return 0
    if self.columns is None:
      self.columns = next(csv.reader([lines[0]]))
    self._lines = lines[:1 + keep_rows]
    dropped = len(lines) - 1 - keep_rows
    if dropped:
      self._rewrite()
    return dropped

  def _rewrite(self) -> None:
    if not self.path:
      return
    tmp = self.path + '.tmp'
    with open(tmp, 'w', newline='') as f:
      f.writelines(self._lines)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, self.path)

  def append(self, row: Mapping[str, Any]) -> None:
    if self.columns is None:
      self.columns = list(row)
    buf = io.StringIO()
    writer = csv.writer(buf)
    new = []
    if not self._lines:
      writer.writerow(self.columns)
      new.append(buf.getvalue())
      buf.seek(0)
      buf.truncate()
    writer.writerow([row.get(k, '') for k in self.columns])
    new.append(buf.getvalue())
    if self.path:
      with_header = self.rows == 0 and (not os.path.exists(self.path)
                                        or os.path.getsize(self.path) == 0)
      with open(self.path, 'a', newline='') as f:
        # One write: a kill cannot split a row.
        f.write(''.join(new if with_header else new[-1:]))
    self._lines.extend(new)
    self.rows += 1


def check_tensorboard() -> None:
  """Raises ImportError with the install hint if tensorboardX is missing."""
  try:
    import tensorboardX  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise ImportError(
        "--tensorboard needs tensorboardX, which is not installed: "
        "pip install 'roxie[tensorboard]' (or pip install tensorboardX)."
    ) from e


class _TensorBoard:
  """Scalars per evaluation row, as TensorBoard event files."""

  def __init__(self, log_dir: str, purge_step: Optional[int]):
    check_tensorboard()
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    # purge_step hides events a killed process logged after the checkpoint
    # a resume starts from.
    self.writer = SummaryWriter(log_dir, purge_step=purge_step)

  def write(self, row: Mapping[str, Any]) -> None:
    step = int(row['env_steps'])
    for k, v in row.items():
      if k == 'env_steps':
        continue
      group = 'eval' if k.startswith('eval_') else (
          'train' if k in ('train_episode_return',) else
          'perf' if k in ('sps', 'wall_time') else 'loss')
      self.writer.add_scalar(f'{group}/{k}', float(v), step)
    self.writer.flush()

  def close(self) -> None:
    self.writer.close()


# --- run directories ---------------------------------------------------------------


@contextlib.contextmanager
def _run_lock(out: Optional[str]):
  """Holds an exclusive flock on out/.lock (released by the OS on a kill)."""
  if not out:
    yield
    return
  try:
    import fcntl  # pylint: disable=g-import-not-at-top
  except ImportError:  # Not POSIX: no lock.
    yield
    return
  os.makedirs(out, exist_ok=True)
  f = open(os.path.join(out, LOCK_FILE), 'a+')
  try:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      raise RunError(f'Another process is training {out} right now (it holds '
                     f'{os.path.join(out, LOCK_FILE)}).') from None
    yield
  finally:
    f.close()


def _write_json(path: str, doc: Mapping[str, Any]) -> None:
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(doc, f, indent=2)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def load_run(run_dir: str):
  """Reads a run directory: (config dict, recipe module, Config)."""
  path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f'{run_dir} is not a roxie run: no {CONFIG_FILE}.')
  try:
    with open(path) as f:
      meta = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f'{path} is not valid JSON ({e}).') from e
  return _parse_run(meta, path)


# The fields of config.json every run has, with their JSON types.
_META_TYPES = (('agent', str), ('task', str), ('backend', str),
               ('num_envs', int), ('steps', int), ('seed', int),
               ('config', dict))
_META_OPTIONAL_TYPES = (('env_options', dict), ('eval_every', int),
                        ('eval_episodes', int), ('iterations_per_call', int),
                        ('num_devices', int))


def _parse_run(meta: Any, path: str):
  """(meta, recipe module, Config) of a parsed config.json, checked.

  Raises:
    ValueError: naming the file and the field that is missing or wrong (a
      hand-edited file), never a bare KeyError.
  """
  if not isinstance(meta, dict):
    raise ValueError(f'{path} must hold a JSON object (a roxie run\'s '
                     f'settings), not a {type(meta).__name__}.')
  for name, kind in _META_TYPES + _META_OPTIONAL_TYPES:
    if name not in meta:
      if (name, kind) in _META_TYPES:
        raise ValueError(f'{path} has no {name!r} field (edited by hand?); '
                         'a roxie run needs it.')
      continue
    value = meta[name]
    if name in ('env_options', 'num_devices') and value is None:
      continue
    if not isinstance(value, kind) or isinstance(value, bool):
      raise ValueError(f'{path}: field {name!r} must be a JSON '
                       f'{"integer" if kind is int else kind.__name__}, got '
                       f'{value!r}.')
    low = {'seed': None, 'steps': 0}.get(name, 1)
    if kind is int and low is not None and value < low:
      raise ValueError(f'{path}: field {name!r} must be >= {low}, got '
                       f'{value}.')
  if meta['backend'] not in ('cpu', 'mjx'):
    raise ValueError(f"{path}: field 'backend' must be 'cpu' or 'mjx', got "
                     f"{meta['backend']!r}.")
  try:
    module = _agent_module(meta['agent'])
  except KeyError as e:
    raise ValueError(f"{path}: field 'agent': {e.args[0]}") from None
  try:
    cfg = config_lib.from_dict(module.Config, meta['config'])
  except config_lib.ConfigError as e:
    unknown = str(e).split(': ', 1)[-1]
    raise ValueError(
        f"{path}: field 'config' has entries that agent {meta['agent']!r} "
        f'does not have ({unknown.rstrip(".")}); was \'agent\' or '
        '\'config\' edited? They must be those that trained the run.'
    ) from None
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: field 'config' does not build "
                     f"{meta['agent']}'s Config ({e}).") from None
  try:
    config_lib.validate(_with_num_envs(cfg, meta['num_envs']),
                        where=f"{path} field 'config'")
  except config_lib.ConfigError as e:
    raise ValueError(str(e)) from None
  return meta, module, cfg


def _with_num_envs(cfg: Any, num_envs: int) -> Any:
  """cfg with the run's num_envs (which may differ from the config's)."""
  if any(f.name == 'num_envs' for f in dataclasses.fields(cfg)):
    return dataclasses.replace(cfg, num_envs=int(num_envs))
  return cfg


def run_differences(meta: Mapping[str, Any],
                    given: Mapping[str, Any]) -> List[str]:
  """What in `given` (run fields, or 'config' overrides) differs from a run.

  Args:
    meta: the run's config.json.
    given: run fields as `train` takes them (agent, task, backend, num_envs,
      seed, eval_every, eval_episodes, env_options) and/or 'overrides', a
      mapping of config fields (values may be strings, as from `--set`).

  Returns:
    One line per difference, e.g. "agent: the run has 'sac', asked for
    'td3'"; empty if everything given matches.
  """
  diffs = []
  for key, value in given.items():
    if value is None:
      continue
    if key == 'overrides':
      module = _agent_module(meta['agent'])
      saved = config_lib.from_dict(module.Config, meta['config'])
      asked = config_lib.to_dict(config_lib.apply_overrides(saved, value))
      have = config_lib.to_dict(saved)
      for field in value:
        if asked[field] != have[field]:
          diffs.append(f'config {field}: the run has {have[field]!r}, asked '
                       f'for {asked[field]!r}')
    elif key == 'env_options':
      have = dict(meta.get('env_options') or {})
      for k, v in value.items():
        if have.get(k) != v:
          diffs.append(f'{k}: the run has {have.get(k)!r}, asked for {v!r}')
    else:
      have = meta.get(key)
      if key == 'eval_every' and meta.get('env_steps_per_iteration'):
        # Saved rounded up to whole iterations (see `whole_iterations`).
        value = whole_iterations(value, meta['env_steps_per_iteration'])
      if isinstance(value, str) and isinstance(have, str):
        same = value.lower() == have.lower()
      else:
        same = value == have
      if not same:
        diffs.append(f'{key}: the run has {have!r}, asked for {value!r}')
  return diffs


# --- programs ------------------------------------------------------------------------


@dataclasses.dataclass
class _Programs:
  env: Any
  eval_env: Any
  recipe: Any
  init: Any
  run: Any
  evaluate: Any
  per_iter: int
  iterations: int
  # The native CPU backend keeps its physics on the host, outside the loop
  # state: checkpoints save it with env.get_host_state().
  host_physics: bool
  # Programs of fewer iterations, for a call that ends at an evaluation
  # point or at the run's total (built and compiled when first needed).
  shorter: Dict[int, Any] = dataclasses.field(default_factory=dict)

  def run_for(self, iterations: int):
    """The training program of `iterations` iterations per call."""
    if iterations == self.iterations:
      return self.run
    if iterations not in self.shorter:
      _, self.shorter[iterations] = loops.make_compiled_loop(
          self.recipe, self.env, iterations=iterations)
    return self.shorter[iterations]


_PROGRAMS: Dict[str, _Programs] = {}
_PROGRAMS_MAX = 4


def _programs(meta: Mapping[str, Any]) -> _Programs:
  """Envs, recipe and jitted programs of a run (cached per run settings).

  The cache lets several runs with the same settings in one process (seeds,
  a resume) share their compiled programs. A cached native env's host
  physics is re-initialised by `init` or restored by `set_host_state`, so
  nothing carries over between runs; runs sharing programs must not train
  at the same time (they share host physics).
  """
  key = json.dumps({k: meta.get(k) for k in RUN_FIELDS + ('num_devices',)
                    if k != 'seed'}, sort_keys=True, default=str)
  cached = _PROGRAMS.get(key)
  if cached is not None:
    return cached
  module = _agent_module(meta['agent'])
  cfg = config_lib.from_dict(module.Config, meta['config'])
  env_options = dict(meta.get('env_options') or {})
  num_devices = int(meta.get('num_devices') or 1)
  if num_devices > 1:  # Data-parallel: envs and replay split per device.
    env = distributed.make_sharded_env(
        meta['task'], mesh=distributed.make_mesh(num_devices),
        backend=meta['backend'], num_envs=meta['num_envs'],
        **env_kwargs(env_options))
  else:
    env = envs.make(meta['task'], backend=meta['backend'],
                    num_envs=meta['num_envs'], **env_kwargs(env_options))
  eval_env = envs.make(meta['task'], backend=meta['backend'],
                       num_envs=meta['eval_episodes'],
                       **env_kwargs(env_options))
  recipe = module.make(cfg, env.spec)
  iterations = int(meta['iterations_per_call'])
  init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
  evaluate = loops.make_evaluator(recipe, eval_env)
  progs = _Programs(env=env, eval_env=eval_env, recipe=recipe, init=init,
                    run=run, evaluate=evaluate,
                    per_iter=loops.env_steps_per_iteration(
                        recipe, meta['num_envs']) * _action_repeat(env_options),
                    iterations=iterations,
                    host_physics=meta['backend'] == 'cpu')
  while len(_PROGRAMS) >= _PROGRAMS_MAX:
    _PROGRAMS.pop(next(iter(_PROGRAMS)))
  _PROGRAMS[key] = progs
  return progs


# --- checkpoints of a training run ----------------------------------------------------


@dataclasses.dataclass
class _Runner:
  """The runner's host-side state (saved in each checkpoint's meta.json)."""
  env_steps: int = 0
  next_eval: int = 0
  last_eval: Optional[float] = None
  last_eval_std: Optional[float] = None
  train_return: float = float('nan')
  csv_rows: int = 0
  csv_columns: Optional[List[str]] = None
  wall_time: float = 0.0  # Seconds of training before this process.
  stage: int = 0  # Resolution-schedule stage of the state (0 without one).
  # Since the last metrics row: action dims the env clipped (outside [-1, 1]
  # or NaN) and envs reset after their physics diverged.
  clipped: int = 0
  diverged: int = 0

  def to_json(self) -> Dict[str, Any]:
    d = dataclasses.asdict(self)
    # JSON has no NaN; keep it readable and exact.
    d['train_return'] = repr(self.train_return)
    return d

  @classmethod
  def from_json(cls, d: Mapping[str, Any]) -> '_Runner':
    d = dict(d)
    d['train_return'] = float(d['train_return'])
    return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)
                  if f.name in d})


def _items(progs: _Programs, state, runner_key, save_replay: bool):
  """The checkpoint items of a LoopState (host physics read now)."""
  loop_item = {'state': state._replace(agent=(), replay=()),
               'runner_key': runner_key}
  if progs.host_physics:
    loop_item['host_physics'] = progs.env.get_host_state()
  replay = state.replay if (save_replay and not progs.recipe.on_policy) else None
  return {'agent': state.agent, 'loop': loop_item, 'replay': replay}


def _templates(progs: _Programs, seed_key):
  """Shapes and dtypes of the checkpoint items (traced, nothing runs)."""
  shapes = jax.eval_shape(progs.init, seed_key)
  loop_item = {'state': shapes._replace(agent=(), replay=()),
               'runner_key': jax.ShapeDtypeStruct(seed_key.shape,
                                                  seed_key.dtype)}
  if progs.host_physics:
    rows = progs.env.get_host_state()
    loop_item['host_physics'] = jax.ShapeDtypeStruct(rows.shape, rows.dtype)
  templates = {'agent': shapes.agent, 'loop': loop_item}
  if not progs.recipe.on_policy:
    templates['replay'] = shapes.replay
  return templates, shapes


def _run_identity(meta: Mapping[str, Any]) -> Dict[str, Any]:
  return {k: meta.get(k) for k in ('agent', 'task', 'backend', 'num_envs',
                                   'seed', 'env_options', 'config',
                                   'resolution_schedule')}


def _check_identity(path: str, saved: Mapping[str, Any],
                    meta: Mapping[str, Any]) -> None:
  """Names what differs between the run a checkpoint was written for and this."""
  if not saved:
    return
  here = json.loads(json.dumps(_run_identity(meta)))
  diffs = []
  for k in ('agent', 'task', 'backend', 'num_envs', 'seed', 'env_options',
            'resolution_schedule'):
    if saved.get(k) != here.get(k):
      diffs.append(f'{k} {saved.get(k)!r} (this run: {here.get(k)!r})')
  if not diffs and saved.get('config') != here.get('config'):
    a, b = saved.get('config') or {}, here.get('config') or {}
    try:  # A field added since (e.g. encoder_pooling) has its default.
      defaults = config_lib.to_dict(_agent_module(meta['agent']).Config())
    except (KeyError, TypeError, ValueError):
      defaults = {}
    for k in sorted(set(a) | set(b)):
      if k not in a and k in defaults and b.get(k) == defaults[k]:
        continue
      if a.get(k) != b.get(k):
        diffs.append(f'config {k} {a.get(k)!r} (this run: {b.get(k)!r})')
  if diffs:
    raise ckpt_lib.CheckpointError(
        f'Checkpoint {path} belongs to another run: it was written for '
        + ', '.join(diffs) + '.')


def _load_checkpoint(path: str, progs: _Programs, meta: Mapping[str, Any],
                     seed_key):
  """(LoopState on device, runner key, _Runner, replay restored?) from path."""
  doc = ckpt_lib.read_meta(path)
  _check_identity(path, (doc.get('meta') or {}).get('run'), meta)
  templates, shapes = _templates(progs, seed_key)
  items, doc = ckpt_lib.restore(path, templates, optional=('replay',))
  try:
    runner = _Runner.from_json(doc['meta']['runner'])
  except (KeyError, TypeError, ValueError) as e:
    raise ckpt_lib.CheckpointError(
        f'Checkpoint {path} has no usable runner state in its '
        f'{ckpt_lib.META_FILE} (not written by roxie train?): {e!r}') from None
  replay_restored = items.get('replay') is not None
  if progs.recipe.on_policy:
    replay = ()
  elif replay_restored:
    replay = items['replay']
  else:  # An empty replay is all zeros (see buffers.replay_init).
    replay = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes.replay)
  loop_item = items['loop']
  state = loop_item['state']._replace(agent=items['agent'], replay=replay)
  state = distributed.put_like(state, shapes)  # As the program lays it out.
  if progs.host_physics:
    progs.env.set_host_state(loop_item['host_physics'])
  return state, jnp.asarray(loop_item['runner_key']), runner, replay_restored


# --- training -----------------------------------------------------------------------


def _action_repeat(env_options: Mapping[str, Any]) -> int:
  """Control steps per agent step under these env options."""
  return int(env_options.get('action_repeat', 1))


# --- pixel observations ---------------------------------------------------------------
# A run from pixels has env_options['pixels'], the fields of a
# `roxie.envs.PixelSpec` as a JSON dict; `env_kwargs` turns it into one.

OBS_CHOICES = ('state', 'pixels', 'pixels+state')


def pixel_options(obs: str = 'pixels', *, resolution: Tuple[int, int] = (64, 64),
                  camera: Any = 0, frame_stack: int = 3, render_every: int = 1,
                  depth: bool = False,
                  renderer: str = 'host') -> Optional[Dict[str, Any]]:
  """env_options['pixels'] for `roxie train --obs OBS` (None for 'state').

  Args:
    obs: 'state' (the flat state vector, no rendering), 'pixels' (camera
      frames only) or 'pixels+state' (frames and the state vector).
    resolution: (height, width) of the frames.
    camera: camera id or name of the task's model.
    frame_stack: frames stacked per observation.
    render_every: render every this many agent steps (the last frame is held
      in between).
    depth: also a depth image.
    renderer: `roxie.envs.PixelSpec.renderer` ('host', 'warp' or 'auto').

  Raises:
    ValueError: an unknown `obs` or renderer, or a bad size.
  """
  if obs not in OBS_CHOICES:
    raise ValueError(f'Unknown observation kind {obs!r}; choose one of '
                     f'{", ".join(OBS_CHOICES)}.')
  if obs == 'state':
    return None
  from roxie.envs.pixels import RENDERERS  # pylint: disable=g-import-not-at-top
  if renderer not in RENDERERS:
    raise ValueError(f'Unknown renderer {renderer!r}; choose one of '
                     f'{", ".join(RENDERERS)}.')
  height, width = (int(d) for d in resolution)
  for name, value in (('resolution', min(height, width)),
                      ('frame_stack', frame_stack),
                      ('render_every', render_every)):
    if int(value) < 1:
      raise ValueError(f'{name} must be >= 1, got {value}.')
  if isinstance(camera, str) and camera.lstrip('-').isdigit():
    camera = int(camera)
  return {'height': height, 'width': width, 'camera': camera, 'rgb': True,
          'depth': bool(depth), 'frame_stack': int(frame_stack),
          'render_every': int(render_every), 'state': obs == 'pixels+state',
          **({} if renderer == 'host' else {'renderer': renderer})}


def env_kwargs(env_options: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
  """Keyword arguments for `roxie.envs.make` from a run's env_options.

  env_options are JSON (config.json); a 'pixels' entry (a dict) becomes a
  `roxie.envs.PixelSpec`.
  """
  kwargs = dict(env_options or {})
  pixels = kwargs.get('pixels')
  if pixels is not None and not dataclasses.is_dataclass(pixels):
    from roxie.envs.pixels import PixelSpec  # pylint: disable=g-import-not-at-top
    fields = dict(pixels)
    for key in ('sensors', 'depth_range'):
      if isinstance(fields.get(key), list):
        fields[key] = tuple(fields[key])
    kwargs['pixels'] = PixelSpec(**fields)
  return kwargs


# --- resolution schedules ---------------------------------------------------------------
# config.json's 'resolution_schedule': [[env steps, height, width], ...]; see
# the module docstring.


def _parse_size(text: str) -> Tuple[int, int]:
  parts = text.strip().lower().split('x')
  if len(parts) not in (1, 2):
    raise ValueError(text)
  size = tuple(int(p) for p in parts)
  return (size * 2) if len(size) == 1 else size


def parse_resolution_schedule(text: str) -> List[List[int]]:
  """'32@0,48@40000,64x48@80000' -> [[0, 32, 32], [40000, 48, 48], ...].

  Each stage is RESOLUTION@ENV_STEPS, RESOLUTION being N or HxW; stages are
  separated by commas. The result is checked by `check_resolution_schedule`.

  Raises:
    ValueError: a malformed schedule, with what is wrong and the format.
  """
  fmt = ('write it as RESOLUTION@ENV_STEPS,... with RESOLUTION N or HxW, '
         'e.g. 32@0,48@40000,64@80000')
  stages = []
  items = [i for i in str(text).split(',') if i.strip()]
  if not items:
    raise ValueError(f'--resolution-schedule is empty; {fmt}.')
  for item in items:
    if item.count('@') != 1:
      raise ValueError(f'--resolution-schedule stage {item.strip()!r} has no '
                       f'@ENV_STEPS; {fmt}.')
    size, steps = item.split('@')
    try:
      height, width = _parse_size(size)
      steps = int(steps.strip())
    except ValueError:
      raise ValueError(f'--resolution-schedule stage {item.strip()!r} is not '
                       f'RESOLUTION@ENV_STEPS; {fmt}.') from None
    stages.append([steps, height, width])
  return check_resolution_schedule(stages)


def check_resolution_schedule(schedule) -> List[List[int]]:
  """[[env steps, height, width], ...] checked, as a JSON-ready list.

  Raises:
    ValueError: not a list of triples, a first stage not at 0 env steps,
      thresholds not strictly increasing, or a size below 1.
  """
  try:
    stages = [[int(x) for x in stage] for stage in schedule]
  except (TypeError, ValueError):
    raise ValueError(f'A resolution schedule is a list of [env steps, '
                     f'height, width]; got {schedule!r}.') from None
  if not stages or any(len(st) != 3 for st in stages):
    raise ValueError(f'A resolution schedule is a list of [env steps, '
                     f'height, width]; got {schedule!r}.')
  if stages[0][0] != 0:
    raise ValueError(f'The resolution schedule must start at 0 env steps '
                     f'(its first stage is at {stages[0][0]}), e.g. '
                     '32@0,64@50000.')
  for a, b in zip(stages, stages[1:]):
    if b[0] <= a[0]:
      raise ValueError(f'The resolution schedule\'s env steps must strictly '
                       f'increase; got {a[0]} then {b[0]}.')
  for steps, height, width in stages:
    if height < 1 or width < 1:
      raise ValueError(f'The resolution schedule has a size {height}x{width} '
                       f'at {steps} env steps; sizes must be >= 1.')
  return stages


def schedule_stage(meta: Mapping[str, Any], env_steps: int) -> int:
  """The stage of a run's resolution schedule at `env_steps` (0 without one)."""
  stages = meta.get('resolution_schedule') or ()
  stage = 0
  for i, (start, _, _) in enumerate(stages):
    if int(env_steps) >= int(start):
      stage = i
  return stage


def stage_meta(meta: Mapping[str, Any], stage: int) -> Dict[str, Any]:
  """The run's config with env_options['pixels'] of a schedule stage's size."""
  out = dict(meta)
  stages = meta.get('resolution_schedule')
  if not stages:
    return out
  _, height, width = stages[int(stage)]
  options = dict(out.get('env_options') or {})
  options['pixels'] = dict(options['pixels'], height=int(height),
                           width=int(width))
  out['env_options'] = options
  return out


def check_schedule_pooling(agent: str, cfg: Any) -> None:
  """Raises RunError unless `cfg`'s encoder fits every resolution."""
  from roxie.networks import pixels as pixel_nets  # pylint: disable=g-import-not-at-top
  pooling = getattr(cfg, 'encoder_pooling', None)
  if pooling in pixel_nets.RESOLUTION_AGNOSTIC_POOLINGS:
    return
  if pooling is None:
    raise RunError(f'{agent} has no pixel encoder, so it cannot follow a '
                   'resolution schedule.')
  raise RunError(
      f'A resolution schedule needs an encoder whose parameters fit every '
      f'resolution, but encoder_pooling is {pooling!r} (its projection\'s '
      'weights depend on the image size). Add --set encoder_pooling=mean '
      '(or --set encoder_pooling=spatial_softmax).')


def _checkpoint_stage(path: str, meta: Mapping[str, Any]) -> int:
  """The schedule stage of the state a checkpoint holds."""
  try:
    runner = (ckpt_lib.read_meta(path).get('meta') or {}).get('runner') or {}
  except ckpt_lib.CheckpointError:
    return 0  # _load_checkpoint reports it.
  stages = meta.get('resolution_schedule') or ()
  stage = runner.get('stage')
  if stage is None:
    stage = schedule_stage(meta, int(runner.get('env_steps') or 0))
  if not 0 <= int(stage) < max(1, len(stages)):
    raise ckpt_lib.CheckpointError(
        f'Checkpoint {path} is at stage {stage} of a resolution schedule of '
        f'{len(stages)} stage(s): it belongs to another run.')
  return int(stage)


def trained_env_options(run_dir: str,
                        meta: Mapping[str, Any]) -> Dict[str, Any]:
  """env_options of the resolution a run's latest checkpoint trained at.

  Without a resolution schedule, the run's env_options. With one, those of
  the stage recorded by the latest checkpoint (the final stage of a finished
  run), or the first stage if there is no checkpoint.
  """
  if not meta.get('resolution_schedule'):
    return dict(meta.get('env_options') or {})
  path = ckpt_lib.latest(run_dir)
  stage = _checkpoint_stage(path, meta) if path else 0
  return dict(stage_meta(meta, stage).get('env_options') or {})


def _shape_differences(have: Any, want: Any, limit: int = 4) -> List[str]:
  """Leaves of `have` whose path, shape or dtype differ from `want`'s."""
  a = jax.tree_util.tree_flatten_with_path(have)
  b = jax.tree_util.tree_flatten_with_path(want)
  if a[1] != b[1]:
    return ['the structure differs']
  diffs = []
  for (path, x), (_, y) in zip(a[0], b[0]):
    if tuple(np.shape(x)) != tuple(y.shape) or np.dtype(x.dtype) != np.dtype(
        y.dtype):
      diffs.append(f'{jax.tree_util.keystr(path)}: {np.dtype(x.dtype)}'
                   f'{list(np.shape(x))} -> {np.dtype(y.dtype)}'
                   f'{list(y.shape)}')
  if len(diffs) > limit:
    diffs = diffs[:limit] + [f'and {len(diffs) - limit} more']
  return diffs


def _switch_stage(state, old: _Programs, new: _Programs, seed_key,
                  size: Tuple[int, int]):
  """The LoopState carried over to a new resolution's programs.

  The agent state is kept (its shapes must not change); the replay's
  frames and the frames of the envs' current stacks are resized; the envs'
  episodes continue (the native backend's host physics is handed over).
  """
  from roxie import buffers  # pylint: disable=g-import-not-at-top
  height, width = size
  shapes = jax.eval_shape(new.init, seed_key)
  diffs = _shape_differences(state.agent, shapes.agent)
  if diffs:
    raise RunError(
        f'The agent state changes shape at the {height}x{width} stage of the '
        f'resolution schedule ({"; ".join(diffs)}), so training cannot go on '
        'with the same parameters. Use an encoder that fits every '
        'resolution: --set encoder_pooling=mean (or spatial_softmax).')
  jax.block_until_ready(state)
  replay = state.replay
  if isinstance(replay, buffers.ReplayState) and isinstance(
      replay.obs, buffers.FrameStore):
    replay = buffers.replay_resize(replay, height, width)
  env = state.env._replace(obs=buffers.resize_observation(
      state.env.obs, height, width))
  carried = state._replace(env=env, replay=replay)
  diffs = _shape_differences(carried, shapes)
  if diffs:
    raise RunError(f'Cannot carry the training state over to the {height}x'
                   f'{width} stage of the resolution schedule: '
                   f'{"; ".join(diffs)}.')
  if old.host_physics:
    new.env.set_host_state(old.env.get_host_state())
  return distributed.put_like(carried, shapes)


def pixel_agents() -> Tuple[str, ...]:
  """The recipes that train from pixels (those with `PIXEL_DEFAULTS`)."""
  from roxie import agents  # pylint: disable=g-import-not-at-top
  return tuple(a for a in agents.AGENTS
               if getattr(_agent_module(a), 'PIXEL_DEFAULTS', None) is not None)


def check_pixel_agent(agent: str) -> None:
  """Raises RunError unless `agent` trains from pixel observations."""
  if getattr(_agent_module(agent), 'PIXEL_DEFAULTS', None) is not None:
    return
  why = (' PPO trains from the state vector only (its networks take a flat '
         'observation and it has no pixel encoder).' if agent == 'ppo' else
         f' {agent} has no pixel encoder yet.')
  raise RunError(f'{agent} cannot train from pixels.{why} Agents that can: '
                 f'{", ".join(pixel_agents())}; or use --obs state.')


def pixel_defaults(agent: str) -> Dict[str, Any]:
  """The config changes a run from pixels starts from (`--set` wins)."""
  check_pixel_agent(agent)
  return dict(_agent_module(agent).PIXEL_DEFAULTS)


def whole_iterations(env_steps: int, per_iteration: int) -> int:
  """`env_steps` rounded up to whole iterations of `per_iteration` env steps."""
  return -(-int(env_steps) // int(per_iteration)) * int(per_iteration)


def _rounding_notes(meta: Mapping[str, Any], eval_every: Optional[int],
                    total: int) -> List[str]:
  """Notes on the env steps and evaluation points rounded to iterations."""
  per_iter = int(meta.get('env_steps_per_iteration') or 0)
  if not per_iter:
    return []
  unit = (f'whole iterations of {per_iter:,} env steps (num_envs x '
          'steps per iteration x action repeat)')
  notes = []
  if whole_iterations(total, per_iter) != total:
    notes.append(f'note: training {whole_iterations(total, per_iter):,} env '
                 f'steps: {total:,} rounded up to {unit}.')
  if eval_every and int(meta['eval_every']) != int(eval_every):
    notes.append(f'note: evaluating every {int(meta["eval_every"]):,} env '
                 f'steps: {int(eval_every):,} rounded up to {unit}.')
  return notes


def _new_run_meta(agent, task, backend, num_envs, steps, seed, overrides,
                  eval_every, eval_episodes, env_options, checkpoint_every,
                  resolution_schedule=None):
  module, cfg = resolve_config(agent, overrides or {})
  for name, value in (('num_envs', num_envs), ('steps', steps),
                      ('eval_every', eval_every),
                      ('eval_episodes', eval_episodes),
                      ('checkpoint_every', checkpoint_every)):
    if value is not None and (isinstance(value, bool) or not isinstance(
        value, (int, np.integer)) or value < 1):
      raise RunError(f'{name} must be an integer >= 1, got {value!r}.')
  num_envs = int(num_envs or cfg.num_envs)
  total = int(steps if steps is not None else cfg.total_steps)
  config_lib.validate(cfg)  # Its own fields, then with the run's num_envs.
  config_lib.validate(_with_num_envs(cfg, num_envs))
  env_options = dict(env_options or {})
  if env_options.get('pixels') is not None:
    check_pixel_agent(agent)
  if resolution_schedule is not None:
    if env_options.get('pixels') is None:
      raise RunError('A resolution schedule needs pixel observations '
                     '(--obs pixels or pixels+state).')
    if jax.process_count() > 1:
      raise RunError('A resolution schedule is not supported in a '
                     'multi-process job (its replay is not gathered to be '
                     'resized).')
    try:
      resolution_schedule = check_resolution_schedule(resolution_schedule)
    except ValueError as e:
      raise RunError(str(e)) from None
    check_schedule_pooling(agent, cfg)
    # The first stage's size is the run's env_options['pixels'] size.
    _, height, width = resolution_schedule[0]
    env_options['pixels'] = dict(env_options['pixels'], height=height,
                                 width=width)
  # A config may ask for an action repeat (SAC's CPU default does); an
  # explicit env option wins. Env steps count control steps either way.
  if getattr(cfg, 'action_repeat', 1) != 1:
    env_options.setdefault('action_repeat', int(cfg.action_repeat))
  # The per-iteration step count needs the recipe, which needs the spec.
  try:
    spec_env = envs.make(task, backend=backend, num_envs=1,
                         **env_kwargs(env_options))
    recipe = module.make(cfg, spec_env.spec)
  except (TypeError, ValueError) as e:
    if isinstance(e, (RunError, config_lib.ConfigError)):
      raise
    raise RunError(f'This run cannot be built with these settings: {e}'
                   ) from None
  per_iter = loops.env_steps_per_iteration(recipe, num_envs) * _action_repeat(
      env_options)
  # Evaluations fall on whole iterations (all envs step together, each
  # action repeated): eval_every is rounded up to a multiple of them.
  eval_every = whole_iterations(int(eval_every or max(per_iter, total // 10)),
                                per_iter)
  chunk = min(eval_every, int(checkpoint_every or eval_every))
  iterations = max(1, min(chunk // per_iter, _MAX_ITERATIONS_PER_CALL))
  meta = {'agent': agent, 'task': task, 'backend': backend,
          'num_envs': num_envs, 'steps': total, 'seed': int(seed),
          'env_options': env_options, 'config': config_lib.to_dict(cfg),
          'eval_every': eval_every, 'eval_episodes': int(eval_episodes),
          'iterations_per_call': iterations,
          'env_steps_per_iteration': per_iter}
  if resolution_schedule is not None:
    meta['resolution_schedule'] = resolution_schedule
  return meta


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
  _check_buildable(meta)  # Before config.json: a bad run leaves nothing.
  with _run_lock(out):
    if out:
      _write_json(os.path.join(out, CONFIG_FILE), meta)
    return _train(meta, out, resume=False, checkpoint_every=checkpoint_every,
                  keep=keep_checkpoints, save_replay=save_replay,
                  tensorboard=tensorboard, verbose=verbose,
                  eval_every_asked=eval_every)


def _check_buildable(meta: Mapping[str, Any]) -> None:
  """Builds a run's envs and programs and traces its init (nothing runs).

  The combination of settings (replay size against envs and episode length,
  action repeat against episode length, ...) is checked here, before a new
  run writes anything; the programs are cached for the training that
  follows.

  Raises:
    RunError: the settings do not make a run, and why.
  """
  try:
    progs = _programs(meta)
    jax.eval_shape(progs.init, jax.random.PRNGKey(0))
  except (TypeError, ValueError, ZeroDivisionError) as e:
    if isinstance(e, (RunError, config_lib.ConfigError)):
      raise
    raise RunError(f'This run cannot be built with these settings: '
                   f'{str(e).splitlines()[0] if str(e) else repr(e)}') from None


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


AGENT_ONLY = 'agent'  # checkpoint_contents of a multi-process run.


def check_resumable(meta: Mapping[str, Any], run_dir: str) -> None:
  """Raises RunError for a run that cannot be resumed (multi-process)."""
  procs = int(meta.get('num_processes') or 1)
  if procs > 1 or meta.get('checkpoint_contents') == AGENT_ONLY:
    raise RunError(
        f'{run_dir} was trained by a multi-process job ({procs} processes): '
        'its checkpoints hold the agent state only (the environment and '
        'replay state were sharded across the processes and not gathered), '
        'so it cannot be resumed. Its policy can still be evaluated, played '
        f'and exported (roxie eval/play/export --run {run_dir}); to train '
        'on, start a new run.')


def _check_positive(**values) -> None:
  for name, value in values.items():
    if value is not None and int(value) < 1:
      raise ValueError(f'{name} must be >= 1, got {value}.')


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
      _write_json(os.path.join(out, CONFIG_FILE), meta)  # A new total.
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


def _is_float(x) -> bool:
  dtype = getattr(x, 'dtype', None)
  return dtype is not None and jax.dtypes.issubdtype(dtype, jnp.inexact)


@jax.jit
def _finite_flags(tree):
  """[L] bool: whether each floating leaf of `tree` is all finite."""
  leaves = [x for x in jax.tree.leaves(tree) if _is_float(x)]
  if not leaves:
    return jnp.ones((0,), bool)
  return jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves])


def nonfinite_leaves(tree) -> List[str]:
  """Paths of the floating-point leaves of `tree` holding a NaN or inf."""
  flags = np.asarray(jax.device_get(_finite_flags(tree)))
  if flags.all():
    return []
  paths = [jax.tree_util.keystr(p) for p, x in
           jax.tree_util.tree_flatten_with_path(tree)[0] if _is_float(x)]
  return [p for p, ok in zip(paths, flags) if not ok]


def _nonfinite_message(bad: List[str], total: int, what: str) -> str:
  listed = ', '.join(bad[:3]) + (f' and {len(bad) - 3} more' if len(bad) > 3
                                 else '')
  return (f'{len(bad)} of {total} parameter arrays of {what} are not finite '
          f'(NaN or inf): {listed}')


def _count_inexact(tree) -> int:
  return sum(1 for x in jax.tree.leaves(tree) if _is_float(x))


@contextlib.contextmanager
def _host_errors():
  """Host-callback errors as themselves, not as an XLA INTERNAL error.

  An exception raised in a host callback (the native backend's physics)
  reaches Python as a JaxRuntimeError whose message ends with the original
  one (e.g. `StaleStateError: ...`); that line is the useful one.
  """
  try:
    yield
  except jax.errors.JaxRuntimeError as e:
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    for line in reversed(lines):
      if 'StaleStateError' in line:
        raise TrainingFault(
            'the native backend\'s physics was stepped from a stale state '
            '(another program, or another run sharing these envs, stepped '
            'them since): ' + line.split('StaleStateError', 1)[1].lstrip(
                ': ')) from None
    raise


def _resolution(meta: Mapping[str, Any]) -> Optional[Tuple[int, int]]:
  pixels = (meta.get('env_options') or {}).get('pixels')
  return None if not pixels else (int(pixels['height']), int(pixels['width']))


# metrics.csv columns of the run's health (after the recipe's metrics).
HEALTH_COLUMNS = ('clipped_actions', 'diverged_envs', 'nonfinite_params')


def _health(runner: _Runner, nonfinite: int) -> Dict[str, int]:
  return {'clipped_actions': runner.clipped, 'diverged_envs': runner.diverged,
          'nonfinite_params': nonfinite}


def _health_text(runner: _Runner) -> str:
  """What the progress line adds when actions were clipped or physics diverged."""
  parts = []
  if runner.clipped:
    parts.append(f'clipped_actions={runner.clipped}')
  if runner.diverged:
    parts.append(f'diverged_envs={runner.diverged}')
  return (' ' + ' '.join(parts)) if parts else ''


def _warn(progress: '_Progress', text: str) -> None:
  """A warning on stderr, shown even when quiet."""
  progress.clear()
  print(f'roxie: warning: {text}', file=sys.stderr, flush=True)


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


def _save_checkpoint(out, progs, state, key, runner: _Runner, meta, csv_log,
                     *, wall: float, save_replay: bool, keep: int) -> None:
  jax.block_until_ready(state)  # Host physics is read after the program ran.
  saved = dataclasses.replace(runner, csv_rows=csv_log.rows,
                              csv_columns=csv_log.columns, wall_time=wall)
  agent_only = meta.get('checkpoint_contents') == AGENT_ONLY
  ckpt_meta = {'run': json.loads(json.dumps(_run_identity(meta))),
               'runner': saved.to_json(),
               'replay_saved': bool(save_replay and not agent_only
                                    and not progs.recipe.on_policy)}
  from roxie import __version__  # pylint: disable=g-import-not-at-top
  ckpt_meta['roxie_version'] = __version__
  if agent_only:  # This process's copy of the replicated agent state.
    ckpt_meta['contents'] = AGENT_ONLY
    items = {'agent': distributed.local_copy(state.agent)}
  else:
    items = _items(progs, state, key, save_replay)
  ckpt_lib.save(out, runner.env_steps, items, meta=ckpt_meta, keep=keep,
                files={METRICS_FILE: csv_log.text()})
  save_agent_state(os.path.join(out, STATE_FILE),
                   distributed.local_copy(state.agent))


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


def _count_rows(path: str) -> int:
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    return max(0, sum(1 for _ in f) - 1)


def _saved_total(run_dir: str) -> Optional[int]:
  try:
    with open(os.path.join(run_dir, CONFIG_FILE)) as f:
      return json.load(f).get('steps')
  except (OSError, ValueError):
    return None


def _nan(x: Optional[float]) -> float:
  return float('nan') if x is None else float(x)


def final_line(result: RunResult) -> str:
  return (f'final eval_return={result.eval_return:.1f} '
          f'env_steps={result.env_steps} sps={result.sps:.0f}')


# --- evaluation of saved runs ----------------------------------------------------------


def load_run_agent_state(run_dir: str, template):
  """A run's trained agent state: its latest checkpoint's, else agent_state.npz.

  Args:
    run_dir: a run directory.
    template: the agent state's structure (e.g. `jax.eval_shape` of
      `recipe.init`).

  Raises:
    FileNotFoundError: the run has neither.
    roxie.checkpoint.CheckpointError / ValueError: unreadable or not fitting.
  """
  path = ckpt_lib.latest(run_dir)
  if path is None:
    state = load_agent_state(os.path.join(run_dir, STATE_FILE), template)
    where = os.path.join(run_dir, STATE_FILE)
  else:
    try:
      items, _ = ckpt_lib.restore(path, {'agent': template})
    except ckpt_lib.CheckpointError as e:
      raise ckpt_lib.CheckpointError(f'{e}{older_checkpoint_hint(path)}'
                                     ) from None
    state = jax.tree.map(jnp.asarray, items['agent'])
    where = path
  bad = nonfinite_leaves(state)
  if bad:
    raise ValueError(
        f'{where}: the trained policy cannot be used: '
        f'{_nonfinite_message(bad, _count_inexact(state), "its agent state")}'
        '. Training diverged; an older checkpoint of the run may still be '
        'finite.')
  return state


def older_checkpoint_hint(path: str) -> str:
  """For a damaged checkpoint: the newest older one that reads, and how."""
  run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
  here = os.path.basename(os.path.normpath(path))
  for step in reversed(ckpt_lib.list_steps(run_dir)):
    older = os.path.join(ckpt_lib.checkpoint_dir(run_dir),
                         ckpt_lib.step_name(step))
    if ckpt_lib.step_name(step) >= here:
      continue
    try:
      ckpt_lib.read_meta(older)
    except ckpt_lib.CheckpointError:
      continue
    return (f'\nAn older checkpoint, {older}, looks intact: to use it, move '
            f'the damaged one out of the way (mv {path} '
            f'{os.path.dirname(path)}/damaged-{here}) and run the command '
            'again.')
  return ''


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
