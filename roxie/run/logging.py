"""What a run reports: the progress bar, metrics.csv and TensorBoard.

Each of them is a `Logger`: `log(row)` takes one evaluation row (a mapping
of column to value), `close()` ends it.
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import sys
import time
from typing import Any, List, Mapping, Optional, Protocol, Tuple, runtime_checkable

from roxie.run.errors import RunError


@runtime_checkable
class Logger(Protocol):
  """Where a run's metrics rows go: metrics.csv, TensorBoard, the terminal."""

  def write(self, row: Mapping[str, Any]) -> None:
    """Takes one row: column -> value, 'env_steps' first."""

  def close(self) -> None:
    """Ends the log (flushes, closes files)."""


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

  def write(self, row: Mapping[str, Any], label: str = '') -> None:
    """The line of an evaluation row (stdout, when enabled)."""
    health = [f'{k}={row[k]}' for k in ('clipped_actions', 'diverged_envs')
              if row.get(k)]
    self.log((f'[{label}] ' if label else '') + f'steps={row["env_steps"]} eval_return={row["eval_return"]:.1f} '
             f'train_return={row["train_episode_return"]:.1f} '
             f'sps={row["sps"]:,.0f} time={row["wall_time"]:.0f}s'
             + (' ' + ' '.join(health) if health else ''))

  def close(self) -> None:
    self.clear()


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

  def write(self, row: Mapping[str, Any]) -> None:
    """Appends a row (a `Logger`)."""
    self.append(row)

  def close(self) -> None:
    """Nothing to do: each row is written when it comes."""

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


def _warn(progress: '_Progress', text: str) -> None:
  """A warning on stderr, shown even when quiet."""
  progress.clear()
  print(f'roxie: warning: {text}', file=sys.stderr, flush=True)
