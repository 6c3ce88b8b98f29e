"""The seven recipes, installed as `roxie.agents`.

Each module defines a `Config` dataclass (defaults sensible on a 2-core CPU)
and `make(config, env_spec) -> roxie.types.Recipe`:

  from roxie.agents import sac
  recipe = sac.make(sac.Config(batch_size=512), env.spec)
"""

import importlib
from types import ModuleType

AGENTS = ('ddpg', 'td3', 'd4pg', 'td4', 'sac', 'mpo', 'ppo')
DEFAULT_AGENT = 'sac'


def get_agent(name: str) -> ModuleType:
  """The recipe module called `name`, or a KeyError naming the choices."""
  key = name.lower()
  if key not in AGENTS:
    raise KeyError(f'Unknown agent {name!r}. Choose one of: {", ".join(AGENTS)}.')
  return importlib.import_module(f'{__name__}.{key}')
