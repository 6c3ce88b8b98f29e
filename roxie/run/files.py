"""A run directory's files: their names, agent_state.npz, the lock, JSON writes."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from roxie.run.errors import RunError


STATE_FILE = 'agent_state.npz'


CONFIG_FILE = 'config.json'


METRICS_FILE = 'metrics.csv'


# In each member's directory of a population (see roxie.run.population).
POPULATION_FILE = 'population.json'


TENSORBOARD_DIR = 'tensorboard'


LOCK_FILE = '.lock'


# metrics.csv of a run restarted from step 0 (no checkpoint), kept aside.
RESTART_SUFFIX = '.before-restart'


DEFAULT_KEEP_CHECKPOINTS = 2


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
