"""Training and evaluation runs: the host side around the compiled loop.

`train(...)` builds the environment, the recipe and the compiled loop, calls
the loop, and between calls evaluates, writes `metrics.csv`, saves the agent
state and reports progress. Everything heavy runs inside the compiled loop.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any, Dict, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from roxie import config as config_lib
from roxie import envs
from roxie import loops

DEFAULT_TASK = 'CartpoleSwingup'
STATE_FILE = 'agent_state.npz'
CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.csv'

_METRIC_COLUMNS = ('env_steps', 'wall_time', 'eval_return', 'eval_return_std',
                   'train_episode_return', 'sps')


@dataclasses.dataclass
class RunResult:
  eval_return: float
  eval_return_std: float
  env_steps: int
  sps: float
  wall_time: float
  out: Optional[str]


def _agent_module(agent: str):
  from roxie import agents  # pylint: disable=g-import-not-at-top
  return agents.get_agent(agent)


def resolve_config(agent: str, overrides: Mapping[str, Any]):
  """The agent's Config with overrides applied (raises ConfigError/KeyError)."""
  module = _agent_module(agent)
  return module, config_lib.apply_overrides(module.Config(), overrides)


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


class _Progress:
  """A one-line progress report; a bar on a TTY, plain lines otherwise."""

  def __init__(self, total: int, enabled: bool):
    self.total = total
    self.enabled = enabled
    self.tty = enabled and sys.stderr.isatty()
    self.start = time.time()

  def update(self, steps: int, sps: float, last_eval: Optional[float]):
    if not self.tty:
      return
    frac = min(1.0, steps / max(1, self.total))
    width = 24
    bar = '#' * int(frac * width) + '-' * (width - int(frac * width))
    eta = (self.total - steps) / sps if sps > 0 else float('nan')
    ev = f'{last_eval:.1f}' if last_eval is not None else '-'
    sys.stderr.write(f'\r[{bar}] {steps}/{self.total} steps  {sps:,.0f} sps  '
                     f'eval {ev}  eta {eta:,.0f}s ')
    sys.stderr.flush()

  def log(self, line: str):
    if self.tty:
      sys.stderr.write('\r' + ' ' * 100 + '\r')
    if self.enabled:
      print(line, flush=True)


def train(agent: str = 'sac', task: str = DEFAULT_TASK, *, backend: str = 'cpu',
          num_envs: Optional[int] = None, steps: Optional[int] = None,
          seed: int = 0, out: Optional[str] = None,
          overrides: Optional[Mapping[str, Any]] = None,
          eval_every: Optional[int] = None, eval_episodes: int = 10,
          verbose: bool = True, env_options: Optional[Mapping[str, Any]] = None
          ) -> RunResult:
  """Trains `agent` on `task`; returns the final evaluation.

  Args:
    agent: one of `roxie.agents.AGENTS`.
    task: a registered task name.
    backend: 'cpu' (native MuJoCo) or 'mjx'.
    num_envs: parallel training environments (default: the config's).
    steps: total environment steps (default: the config's `total_steps`).
    seed: PRNG seed.
    out: run directory for config.json, metrics.csv and the agent state.
    overrides: config fields to change (values may be strings).
    eval_every: environment steps between evaluations (default: ~10 per run).
    eval_episodes: episodes per evaluation (one per evaluation env).
    verbose: print progress and the final line.
    env_options: extra keyword arguments for `roxie.envs.make`.
  """
  module, cfg = resolve_config(agent, overrides or {})
  num_envs = int(num_envs or cfg.num_envs)
  total = int(steps if steps is not None else cfg.total_steps)
  env_options = dict(env_options or {})
  env = envs.make(task, backend=backend, num_envs=num_envs, **env_options)
  eval_env = envs.make(task, backend=backend, num_envs=eval_episodes,
                       **env_options)
  recipe = module.make(cfg, env.spec)
  per_iter = loops.env_steps_per_iteration(recipe, num_envs)
  eval_every = int(eval_every or max(per_iter, total // 10))
  iterations = max(1, min(eval_every // per_iter, 1000))
  if out:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, CONFIG_FILE), 'w') as f:
      json.dump({'agent': agent, 'task': task, 'backend': backend,
                 'num_envs': num_envs, 'steps': total, 'seed': seed,
                 'env_options': env_options,
                 'config': config_lib.to_dict(cfg)}, f, indent=2)

  init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
  evaluate = loops.make_evaluator(recipe, eval_env)
  key = jax.random.PRNGKey(seed)
  key, k_init = jax.random.split(key)
  progress = _Progress(total, verbose)
  t0 = time.time()
  state = init(k_init)
  env_steps, next_eval = 0, eval_every
  last_eval = None
  train_return = float('nan')
  rows = []
  csv_path = os.path.join(out, METRICS_FILE) if out else None
  metric_names = None
  sps = 0.0
  while env_steps < total:
    state, output = run(state)
    env_steps += iterations * per_iter
    stats = jax.device_get(output.stats)
    if stats.completed > 0:
      train_return = float(stats.completed_return / stats.completed)
    elapsed = time.time() - t0
    sps = env_steps / elapsed
    progress.update(env_steps, sps, last_eval)
    if env_steps >= next_eval or env_steps >= total:
      next_eval += eval_every
      key, k_eval = jax.random.split(key)
      result = jax.device_get(evaluate(state.agent, k_eval))
      last_eval = float(result.mean)
      metrics = {k: float(v) for k, v in jax.device_get(output.metrics).items()}
      if not all(math.isfinite(v) for v in metrics.values()):
        progress.log(f'warning: non-finite training metrics at {env_steps} '
                     f'steps: {metrics}')
      row = {'env_steps': env_steps, 'wall_time': round(time.time() - t0, 2),
             'eval_return': last_eval, 'eval_return_std': float(result.std),
             'train_episode_return': train_return, 'sps': round(sps, 1)}
      row.update(metrics)
      rows.append(row)
      if csv_path:
        if metric_names is None:
          metric_names = list(row)
          with open(csv_path, 'w', newline='') as f:
            csv.writer(f).writerow(metric_names)
        with open(csv_path, 'a', newline='') as f:
          csv.writer(f).writerow([row.get(k, '') for k in metric_names])
        save_agent_state(os.path.join(out, STATE_FILE), state.agent)
      progress.log(f'steps={env_steps} eval_return={last_eval:.1f} '
                   f'train_return={train_return:.1f} sps={sps:,.0f} '
                   f'time={time.time() - t0:.0f}s')
  wall = time.time() - t0
  final = RunResult(eval_return=float(last_eval), eval_return_std=float(
      rows[-1]['eval_return_std']), env_steps=env_steps, sps=sps,
                    wall_time=wall, out=out)
  if verbose:
    print(final_line(final), flush=True)
  return final


def final_line(result: RunResult) -> str:
  return (f'final eval_return={result.eval_return:.1f} '
          f'env_steps={result.env_steps} sps={result.sps:.0f}')


def load_run(run_dir: str):
  """Reads a run directory: (config dict, recipe module, Config)."""
  path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f'{run_dir} is not a roxie run: no {CONFIG_FILE}.')
  try:
    with open(path) as f:
      meta = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f'{path} is not valid JSON ({e}).') from e
  module = _agent_module(meta['agent'])
  cfg = config_lib.from_dict(module.Config, meta['config'])
  return meta, module, cfg


def evaluate_run(run_dir: str, *, episodes: int = 10, backend: Optional[str] = None,
                 seed: int = 0) -> loops.EvalResult:
  """Re-evaluates the saved policy of a run (on either backend)."""
  meta, module, cfg = load_run(run_dir)
  backend = backend or meta['backend']
  env = envs.make(meta['task'], backend=backend, num_envs=episodes,
                  **meta.get('env_options', {}))
  recipe = module.make(cfg, env.spec)
  template = jax.eval_shape(lambda k: recipe.init(k, env.spec),
                            jax.random.PRNGKey(0))
  template = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), template)
  agent_state = load_agent_state(os.path.join(run_dir, STATE_FILE), template)
  evaluate = loops.make_evaluator(recipe, env)
  return jax.device_get(evaluate(agent_state, jax.random.PRNGKey(seed)))
