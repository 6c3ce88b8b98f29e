"""The seven recipes, installed as `roxie.agents`.

Each module defines a `Config` dataclass (defaults sensible on a 2-core CPU)
and `make(config, env_spec) -> roxie.types.Recipe`:

  from roxie.agents import sac
  recipe = sac.make(sac.Config(batch_size=512), env.spec)

A user's own agent is named the same way everywhere an agent name goes
(`roxie train --agent`, `roxie.run.train`, run folders, export): a Python
file or an importable module, with the factory after a colon (default
`make`), e.g. `examples/redq.py:make` or `mylab.agents.crossq:make`. Its
module defines what a built-in recipe module does: a `Config` dataclass and
the factory `(config, env_spec) -> Recipe`, and `PIXEL_DEFAULTS` for pixels
where it has them. What export, play and eval act with is the recipe's
`policy` field (`roxie.types.Policy(params, apply)`, built in the factory);
a module that instead defines the older module-level pair
`policy_params(state)` and `make_policy(config, spec)` still exports.
"""

import hashlib
import importlib
import importlib.util
import os
import sys
import types
from types import ModuleType
from typing import Any

AGENTS = ('ddpg', 'td3', 'd4pg', 'td4', 'sac', 'mpo', 'ppo')
DEFAULT_AGENT = 'sac'


def _split(name: str):
  """('source', 'factory') of a user agent's name."""
  source, sep, factory = name.rpartition(':')
  if not sep or not factory.isidentifier():
    source, factory = name, 'make'
  return source, factory


def is_builtin(name: str) -> bool:
  return name.lower() in AGENTS


def canonical_name(agent: Any) -> str:
  """The name a run records for `agent`: a built-in's, or SOURCE:FACTORY.

  Args:
    agent: a built-in name, 'path/to/file.py[:factory]',
      'package.module[:factory]', a recipe module, or a factory function
      defined at a module's top level.

  Returns:
    The lower-case built-in name, or 'SOURCE:FACTORY' with a file SOURCE
    made absolute (so resume, eval and export find it from anywhere).
  """
  if isinstance(agent, types.ModuleType):
    agent = _module_source(agent)
  elif callable(agent):
    module = sys.modules.get(getattr(agent, '__module__', ''), None)
    if module is None or getattr(module, agent.__name__, None) is not agent:
      raise KeyError(f'Agent factory {agent!r} must be a function defined at '
                     'the top level of a module or file, so that a run can '
                     'load it again.')
    agent = f'{_module_source(module)}:{agent.__name__}'
  if not isinstance(agent, str) or not agent:
    raise KeyError(f'Unknown agent {agent!r}.')
  if is_builtin(agent):
    return agent.lower()
  source, factory = _split(agent)
  if source.endswith('.py'):
    source = os.path.abspath(source)
  return f'{source}:{factory}'


def _module_source(module: ModuleType) -> str:
  name = module.__name__
  if name.startswith(f'{__name__}.') and is_builtin(name.rsplit('.', 1)[1]):
    return name.rsplit('.', 1)[1]
  path = getattr(module, '__file__', None)
  if name.startswith('_roxie_user_agent_') or name == '__main__':
    if not path:
      raise KeyError(f'Cannot tell where agent module {name!r} comes from.')
    return os.path.abspath(path)
  return name


def short_name(agent: str) -> str:
  """A name for run folders: the built-in's, or the file or module's stem."""
  if is_builtin(agent):
    return agent.lower()
  source, factory = _split(agent)
  if source.endswith('.py'):
    stem = os.path.basename(source)[:-len('.py')]
  else:
    stem = source.rsplit('.', 1)[-1]
  return stem if factory == 'make' else f'{stem}-{factory}'


def _load_source(source: str) -> ModuleType:
  if source.endswith('.py'):
    path = os.path.abspath(source)
    if not os.path.isfile(path):
      raise KeyError(f'Agent file {source!r} does not exist.')
    # One module per file, under a stable name, so that loading it twice
    # (train, then eval in the same process) gives the same classes.
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    module_name = f'_roxie_user_agent_{digest}'
    if module_name in sys.modules:
      return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
      spec.loader.exec_module(module)
    except BaseException:
      del sys.modules[module_name]
      raise
    return module
  try:
    return importlib.import_module(source)
  except ImportError as e:
    raise KeyError(f'Unknown agent {source!r}: not one of {", ".join(AGENTS)}, '
                   f'and not an importable module or a .py file ({e}).') from None


def get_agent(name: str) -> ModuleType:
  """The recipe module called `name`, or a KeyError naming the choices.

  Args:
    name: a built-in name (see `AGENTS`), or a user agent as
      'path/to/file.py[:factory]' or 'package.module[:factory]' (see the
      module docstring).

  Returns:
    A module with `Config` and `make` (a user agent's factory under the name
    `make`), and whatever else its source defines.
  """
  if is_builtin(name):
    return importlib.import_module(f'{__name__}.{name.lower()}')
  if not isinstance(name, str) or (':' not in name and not name.endswith('.py')
                                   and '.' not in name):
    raise KeyError(f'Unknown agent {name!r}. Choose one of: {", ".join(AGENTS)}, '
                   'or name your own as path/to/file.py:make or '
                   'package.module:make.')
  source, factory = _split(name)
  module = _load_source(source)
  problems = []
  if not callable(getattr(module, factory, None)):
    problems.append(f'a factory {factory}(config, env_spec) -> Recipe')
  config = getattr(module, 'Config', None)
  if not (isinstance(config, type) and hasattr(config, '__dataclass_fields__')):
    problems.append('a Config dataclass (its fields are what --set changes)')
  if problems:
    raise KeyError(f'Agent {name!r}: {module.__file__ or source} must define '
                   f'{" and ".join(problems)}.')
  if factory == 'make':
    return module
  view = types.ModuleType(f'{module.__name__}:{factory}')
  view.__dict__.update({k: v for k, v in vars(module).items()
                        if not k.startswith('__')})
  view.__file__ = getattr(module, '__file__', None)
  view.make = getattr(module, factory)
  return view
