"""roxie: pure-function building blocks for continuous-control RL on MuJoCo.

Sub-packages, each importable alone:
  roxie.losses    pure loss and target functions (rlax-style)
  roxie.networks  haiku modules: torsos, actors, critics
  roxie.buffers   device-resident replay and rollout storage (optax-style)
  roxie.envs      the environment protocol, the suite's tasks, two backends
  roxie.loops     scanned collectors, evaluation, make_compiled_loop
  roxie.agents    the seven recipes
"""

__version__ = '0.1.0'
