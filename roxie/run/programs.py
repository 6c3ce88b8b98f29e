"""The envs, recipe and compiled programs of a run, and their cache."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

import jax

from roxie import config as config_lib
from roxie import distributed
from roxie import envs
from roxie import loops
from roxie.run.config import RunConfig, as_run_config
from roxie.run.errors import RunError


@dataclasses.dataclass
class Programs:
  """A run's envs, recipe and programs (see `build_programs`)."""
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


_Programs = Programs  # The name before roxie.run became a package.


def build_programs(run: RunConfig) -> Programs:
  """Envs, recipe and jitted programs of a run (built, not compiled yet)."""
  module = run.agent_module()
  cfg = run.agent_config()
  kwargs = run.env_kwargs()
  if run.devices > 1:  # Data-parallel: envs and replay split per device.
    env = distributed.make_sharded_env(
        run.task, mesh=distributed.make_mesh(run.devices),
        backend=run.backend, num_envs=run.num_envs, **kwargs)
  else:
    env = envs.make(run.task, backend=run.backend, num_envs=run.num_envs,
                    **kwargs)
  eval_env = envs.make(run.task, backend=run.backend,
                       num_envs=run.eval_episodes, **kwargs)
  recipe = module.make(cfg, env.spec)
  iterations = int(run.iterations_per_call)
  init, program = loops.make_compiled_loop(recipe, env, iterations=iterations)
  evaluate = loops.make_evaluator(recipe, eval_env)
  return Programs(env=env, eval_env=eval_env, recipe=recipe, init=init,
                   run=program, evaluate=evaluate,
                   per_iter=loops.env_steps_per_iteration(
                       recipe, run.num_envs) * run.action_repeat,
                   iterations=iterations, host_physics=run.backend == 'cpu')


class ProgramCache:
  """Built programs of runs, by their settings (all but the seed).

  It lets several runs with the same settings in one process (seeds, a
  resume) share their compiled programs. A cached native env's host physics
  is re-initialised by `init` or restored by `set_host_state`, so nothing
  carries over between runs; runs sharing programs must not train at the
  same time (they share host physics). Whoever trains owns one: `train`
  and `resume` take it as `programs` (default: `DEFAULT_PROGRAMS`, this
  process's).
  """

  def __init__(self, max_size: int = 4):
    self.max_size = int(max_size)
    self._entries: Dict[str, Programs] = {}

  def get(self, run: RunConfig) -> Programs:
    """The programs of `run`, built on first use (oldest dropped when full)."""
    key = run.program_key()
    cached = self._entries.get(key)
    if cached is not None:
      return cached
    progs = build_programs(run)
    if self.max_size > 0:
      while len(self._entries) >= self.max_size:
        self._entries.pop(next(iter(self._entries)))
      self._entries[key] = progs
    return progs

  def clear(self) -> None:
    self._entries.clear()

  def __len__(self) -> int:
    return len(self._entries)


# The cache of `train` and `resume` calls that pass none.
DEFAULT_PROGRAMS = ProgramCache()


def _programs(run: Any,
              cache: Optional[ProgramCache] = None) -> Programs:
  """`cache.get(run)` (default `DEFAULT_PROGRAMS`); run may be a dict."""
  return (cache or DEFAULT_PROGRAMS).get(as_run_config(run))


def _check_buildable(run: Any,
                     cache: Optional[ProgramCache] = None) -> None:
  """Builds a run's envs and programs and traces its init (nothing runs).

  The combination of settings (replay size against envs and episode length,
  action repeat against episode length, ...) is checked here, before a new
  run writes anything; the programs are cached for the training that
  follows.

  Raises:
    RunError: the settings do not make a run, and why.
  """
  try:
    progs = _programs(run, cache)
    jax.eval_shape(progs.init, jax.random.PRNGKey(0))
  except (TypeError, ValueError, ZeroDivisionError) as e:
    if isinstance(e, (RunError, config_lib.ConfigError)):
      raise
    raise RunError(f'This run cannot be built with these settings: '
                   f'{str(e).splitlines()[0] if str(e) else repr(e)}') from None
