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
