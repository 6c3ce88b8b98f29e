"""The envs, recipe and compiled programs of a run, and their cache."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Mapping

import jax

from roxie import config as config_lib
from roxie import distributed
from roxie import envs
from roxie import loops
from roxie.run.config import RUN_FIELDS, _action_repeat, _agent_module, env_kwargs
from roxie.run.errors import RunError


@dataclasses.dataclass
class _Programs:
  env: Any
  eval_env: Any
  recipe: Any
  init: Any
  run: Any
  evaluate: Any
  per_iter: int
  iterations: int
  # The native CPU backend keeps its physics on the host, outside the loop
  # state: checkpoints save it with env.get_host_state().
  host_physics: bool
  # Programs of fewer iterations, for a call that ends at an evaluation
  # point or at the run's total (built and compiled when first needed).
  shorter: Dict[int, Any] = dataclasses.field(default_factory=dict)

  def run_for(self, iterations: int):
    """The training program of `iterations` iterations per call."""
    if iterations == self.iterations:
      return self.run
    if iterations not in self.shorter:
      _, self.shorter[iterations] = loops.make_compiled_loop(
          self.recipe, self.env, iterations=iterations)
    return self.shorter[iterations]


_PROGRAMS: Dict[str, _Programs] = {}


_PROGRAMS_MAX = 4


def _programs(meta: Mapping[str, Any]) -> _Programs:
  """Envs, recipe and jitted programs of a run (cached per run settings).

  The cache lets several runs with the same settings in one process (seeds,
  a resume) share their compiled programs. A cached native env's host
  physics is re-initialised by `init` or restored by `set_host_state`, so
  nothing carries over between runs; runs sharing programs must not train
  at the same time (they share host physics).
  """
  key = json.dumps({k: meta.get(k) for k in RUN_FIELDS + ('num_devices',)
                    if k != 'seed'}, sort_keys=True, default=str)
  cached = _PROGRAMS.get(key)
  if cached is not None:
    return cached
  module = _agent_module(meta['agent'])
  cfg = config_lib.from_dict(module.Config, meta['config'])
  env_options = dict(meta.get('env_options') or {})
  num_devices = int(meta.get('num_devices') or 1)
  if num_devices > 1:  # Data-parallel: envs and replay split per device.
    env = distributed.make_sharded_env(
        meta['task'], mesh=distributed.make_mesh(num_devices),
        backend=meta['backend'], num_envs=meta['num_envs'],
        **env_kwargs(env_options))
  else:
    env = envs.make(meta['task'], backend=meta['backend'],
                    num_envs=meta['num_envs'], **env_kwargs(env_options))
  eval_env = envs.make(meta['task'], backend=meta['backend'],
                       num_envs=meta['eval_episodes'],
                       **env_kwargs(env_options))
  recipe = module.make(cfg, env.spec)
  iterations = int(meta['iterations_per_call'])
  init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
  evaluate = loops.make_evaluator(recipe, eval_env)
  progs = _Programs(env=env, eval_env=eval_env, recipe=recipe, init=init,
                    run=run, evaluate=evaluate,
                    per_iter=loops.env_steps_per_iteration(
                        recipe, meta['num_envs']) * _action_repeat(env_options),
                    iterations=iterations,
                    host_physics=meta['backend'] == 'cpu')
  while len(_PROGRAMS) >= _PROGRAMS_MAX:
    _PROGRAMS.pop(next(iter(_PROGRAMS)))
  _PROGRAMS[key] = progs
  return progs


def _check_buildable(meta: Mapping[str, Any]) -> None:
  """Builds a run's envs and programs and traces its init (nothing runs).

  The combination of settings (replay size against envs and episode length,
  action repeat against episode length, ...) is checked here, before a new
  run writes anything; the programs are cached for the training that
  follows.

  Raises:
    RunError: the settings do not make a run, and why.
  """
  try:
    progs = _programs(meta)
    jax.eval_shape(progs.init, jax.random.PRNGKey(0))
  except (TypeError, ValueError, ZeroDivisionError) as e:
    if isinstance(e, (RunError, config_lib.ConfigError)):
      raise
    raise RunError(f'This run cannot be built with these settings: '
                   f'{str(e).splitlines()[0] if str(e) else repr(e)}') from None
