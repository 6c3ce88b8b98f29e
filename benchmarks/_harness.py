"""Small helpers shared by the benchmark scripts: the machine header, timing.

Not a test and not part of the roxie package: the scripts in this folder
import it by file location (`python benchmarks/<script>.py` puts this folder
on `sys.path`).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from typing import Callable, List, Optional, Sequence


def cpu_model() -> str:
  """The CPU's model name (Linux /proc/cpuinfo; platform's guess elsewhere)."""
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.lower().startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def _version(name: str) -> str:
  try:
    from importlib import metadata  # pylint: disable=g-import-not-at-top
    return metadata.version(name)
  except Exception:  # not installed
    return '-'


def machine_header(title: str, extra: Sequence[str] = ()) -> str:
  """What the figures below were measured on, as a few printable lines."""
  import jax  # pylint: disable=g-import-not-at-top
  try:
    usable = len(os.sched_getaffinity(0))
  except AttributeError:
    usable = os.cpu_count()
  load = ', '.join(f'{x:.2f}' for x in os.getloadavg())
  devices = jax.devices()
  kinds = sorted({d.device_kind for d in devices})
  lines = [
      f'== {title}',
      f'machine: {cpu_model()}, {os.cpu_count()} cores ({usable} usable), '
      f'{platform.system()} {platform.machine()}',
      f'load average (1/5/15 min) at start: {load}',
      f'jax backend: {jax.default_backend()}, {len(devices)} device(s): '
      f'{", ".join(kinds)}',
      'versions: python {} | jax {} | jaxlib {} | mujoco {} | optax {} | '
      'dm-haiku {} | numpy {}'.format(
          platform.python_version(), _version('jax'), _version('jaxlib'),
          _version('mujoco'), _version('optax'), _version('dm-haiku'),
          _version('numpy')),
  ]
  flags = os.environ.get('XLA_FLAGS')
  if flags:
    lines.append(f'XLA_FLAGS={flags}')
  lines.extend(extra)
  return '\n'.join(lines)


def load_now() -> str:
  return ', '.join(f'{x:.2f}' for x in os.getloadavg())


def interleaved(fns: Sequence[Callable[[], None]], repeats: int, *,
                warmup: int = 1, cpu: Optional[List[List[float]]] = None
                ) -> List[List[float]]:
  """Times each function `repeats` times, in turns, after `warmup` calls each.

  The order alternates (A B, B A, A B, ...) so that slow drift in the
  machine's load falls on every function alike. Each function must block
  until its work is done (`jax.block_until_ready`).

  Args:
    fns: the functions.
    repeats: timed calls of each.
    warmup: untimed calls of each first.
    cpu: if given, a list that receives, for each function, its list of
      process CPU seconds (all threads), which other processes' load does not
      inflate the way it inflates wall-clock time.

  Returns:
    For each function, its list of wall-clock seconds.
  """
  for fn in fns:
    for _ in range(warmup):
      fn()
  times: List[List[float]] = [[] for _ in fns]
  cpus: List[List[float]] = [[] for _ in fns]
  order = list(range(len(fns)))
  for r in range(repeats):
    for i in (order if r % 2 == 0 else order[::-1]):
      c0 = time.process_time()
      t0 = time.perf_counter()
      fns[i]()
      times[i].append(time.perf_counter() - t0)
      cpus[i].append(time.process_time() - c0)
  if cpu is not None:
    cpu[:] = cpus
  return times


class Stopwatch:
  """Wall-clock and process CPU seconds of a block: `with Stopwatch() as t:`."""

  def __enter__(self):
    self._w, self._c = time.perf_counter(), time.process_time()
    return self

  def __exit__(self, *exc):
    self.wall = time.perf_counter() - self._w
    self.cpu = time.process_time() - self._c
    return False


def median(xs: Sequence[float]) -> float:
  return statistics.median(xs)


def fmt_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """A plain, right-aligned text table (first column left-aligned)."""
  cols = list(zip(*([list(header)] + [list(r) for r in rows])))
  widths = [max(len(str(x)) for x in c) for c in cols]
  def line(cells):
    out = []
    for j, (x, w) in enumerate(zip(cells, widths)):
      out.append(str(x).ljust(w) if j == 0 else str(x).rjust(w))
    return '  '.join(out)
  sep = '  '.join('-' * w for w in widths)
  return '\n'.join([line(header), sep] + [line(r) for r in rows])


def flush_print(*args):
  print(*args, flush=True)
  sys.stdout.flush()
