"""A run's health: non-finite parameters, clipped actions, diverged physics."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from roxie.run.errors import TrainingFault


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


# metrics.csv columns of the run's health (after the recipe's metrics).
HEALTH_COLUMNS = ('clipped_actions', 'diverged_envs', 'nonfinite_params')


def _health(runner: Any, nonfinite: int) -> Dict[str, int]:
  """The health columns of a row, from the runner's (`_Runner`) counts."""
  return {'clipped_actions': runner.clipped, 'diverged_envs': runner.diverged,
          'nonfinite_params': nonfinite}
