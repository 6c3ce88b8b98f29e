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


def matmul_flops(fn: Callable, *args, **kwargs) -> float:
  """FLOPs of the matrix products `fn(*args, **kwargs)` runs, from its jaxpr.

  Counts `dot_general` (2 x batch x free x free x contracted elements) and
  `conv_general_dilated` (2 x output elements x kernel window x input
  features per group), the arithmetic an update-bound agent is made of, and
  nothing else (elementwise work is not counted). A `scan` body counts
  `length` times, a `cond` its costliest branch, every other nested jaxpr
  (jit, custom_jvp/vjp, remat, ...) once.

  Why not XLA's cost analysis (`compiled.cost_analysis()['flops']`): it
  counts a while loop's body once, whatever its trip count, so a program of
  U scanned updates reports the FLOPs of one, and a PPO update's epochs x
  minibatches loop reports one minibatch step.

  Raises:
    ValueError: the jaxpr holds a `while` loop, whose trip count a jaxpr
      does not state (a `fori_loop` with static bounds is a `scan`).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from jax.extend import core as jcore  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  def size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1

  def jaxprs_of(value):
    if isinstance(value, jcore.ClosedJaxpr):
      return [value.jaxpr]
    if isinstance(value, jcore.Jaxpr):
      return [value]
    if isinstance(value, (tuple, list)):
      return [j for v in value for j in jaxprs_of(v)]
    return []

  def count(jaxpr) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
      name = eqn.primitive.name
      if name == 'dot_general':
        (lc, rc), (lb, rb) = eqn.params['dimension_numbers']
        lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
        lhs_free = [n for d, n in enumerate(lhs) if d not in (*lc, *lb)]
        rhs_free = [n for d, n in enumerate(rhs) if d not in (*rc, *rb)]
        total += 2.0 * (size([lhs[d] for d in lb]) * size(lhs_free) *
                        size(rhs_free) * size([lhs[d] for d in lc]))
      elif name == 'conv_general_dilated':
        out = eqn.outvars[0].aval.shape
        kernel = eqn.invars[1].aval.shape
        spec = eqn.params['dimension_numbers'].rhs_spec  # (out, in, *space)
        window = size([kernel[d] for d in spec[2:]])
        total += 2.0 * size(out) * window * kernel[spec[1]]
      elif name == 'scan':
        total += eqn.params['length'] * count(eqn.params['jaxpr'].jaxpr)
      elif name == 'cond':
        total += max(count(b.jaxpr) for b in eqn.params['branches'])
      elif name == 'while':
        raise ValueError(
            'matmul_flops: a while loop has no static trip count; use '
            'lax.scan (or fori_loop with static bounds).')
      else:
        for value in eqn.params.values():
          for sub in jaxprs_of(value):
            total += count(sub)
    return total

  return count(jax.make_jaxpr(fn)(*args, **kwargs).jaxpr)
