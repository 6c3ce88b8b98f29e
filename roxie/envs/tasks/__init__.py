"""The task registry: every module in this package contributes `TASKS`."""

import importlib
import pkgutil
from typing import Dict

from roxie.envs.task import Task


def _collect() -> Dict[str, Task]:
  found: Dict[str, Task] = {}
  for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    module = importlib.import_module(f'{__name__}.{info.name}')
    for name, task in getattr(module, 'TASKS', {}).items():
      if name in found:
        raise ValueError(f'Task {name!r} is defined twice.')
      found[name] = task
  return found


TASKS: Dict[str, Task] = _collect()


# Control steps per agent decision for the DeepMind Control benchmarks, the
# one per-task setting a recipe's defaults may take: PlaNet's values (Hafner
# et al., 2019, https://arxiv.org/abs/1811.04551), which CURL, DrQ and
# SAC-AE's DMC tables use. Every recipe reads it through `action_repeat`; a
# task not listed acts at every control step.
ACTION_REPEAT: Dict[str, int] = {
    'CartpoleSwingup': 8,
    'ReacherEasy': 4,
    'FingerSpin': 2,
    'CheetahRun': 4,
    'WalkerWalk': 2,
    'BallInCup': 4,
}


def action_repeat(name: str) -> int:
  """The benchmark action repeat for task `name` (1 where none is listed)."""
  get_task(name)  # An unknown name is an error, not 1.
  return ACTION_REPEAT.get(name, 1)


def get_task(name: str) -> Task:
  """The task called `name`, or a KeyError listing the available ones."""
  try:
    return TASKS[name]
  except KeyError:
    import difflib  # pylint: disable=g-import-not-at-top
    close = difflib.get_close_matches(name, TASKS, n=3)
    hint = f' Did you mean {", ".join(close)}?' if close else ''
    raise KeyError(
        f'Unknown task {name!r}.{hint} Available tasks: '
        f'{", ".join(sorted(TASKS))}.') from None
