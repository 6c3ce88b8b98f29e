"""roxie: pure-function building blocks for continuous-control RL on MuJoCo.

Sub-packages, each importable alone:
  roxie.losses    pure loss and target functions (rlax-style)
  roxie.networks  haiku modules: torsos, actors, critics
  roxie.buffers   device-resident replay and rollout storage (optax-style)
  roxie.envs      the environment protocol, the suite's tasks, two backends
  roxie.loops     scanned collectors, evaluation, make_compiled_loop
  roxie.agents    the seven recipes

roxie.load_policy(path_or_name) loads an exported policy bundle (or a shipped
policy by name); see roxie.export.
"""

__version__ = '0.1.0'

_LAZY = {'load_policy': 'roxie.export'}


def __getattr__(name):
  # `roxie.load_policy` without importing JAX or MuJoCo at `import roxie`.
  if name in _LAZY:
    import importlib  # pylint: disable=g-import-not-at-top
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(list(globals()) + list(_LAZY))
