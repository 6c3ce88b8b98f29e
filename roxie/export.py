"""Exported policy bundles: `roxie export` and `roxie.load_policy`.

A bundle is a folder that holds everything needed to act, and nothing needed
to train:

  policy.npz   the policy's parameters (and observation statistics, for
               agents that normalise observations), one array per entry,
               named `group:module:parameter`
  roxie.json   task, agent, agent config, env spec and options, roxie
               version, training summary and the bundle's evaluation return
  metrics.csv  the training run's learning curve
  README.md    a model card (Hugging Face hub style: YAML front matter with
               library_name, tags and the evaluation return as model-index
               metrics)

The layout is one the Hugging Face hub serves as-is. Loading builds the
recipe's functions from the agent's config and uses only its policy's
`apply`: no critic, optimiser or agent state is initialised.

How an agent says what its policy is: its recipe's `policy` field,

  Recipe.policy = roxie.types.Policy(
      params=(state) -> nested dict of arrays,   # what acting needs
      apply=(params, obs) -> action)

where `apply` is the deterministic action `act(state, obs, key,
explore=False)` takes, for observations [..., O] (normalised inside `apply`
where the recipe normalises them). A recipe without one exports through its
module's older pair of functions, `policy_params(state)` and
`make_policy(config, spec) -> apply`, if it defines them; without either it
cannot be exported (`policy_hooks` says what to add). `export_run` checks
the exported policy against the recipe's own `act` on random observations
and refuses to write a bundle that disagrees.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shutil
import tempfile
import types
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

# Stdlib only at import, like this module: a pixel policy's env needs GL.
from roxie.gl import RenderingUnavailable

PARAMS_FILE = 'policy.npz'
META_FILE = 'roxie.json'
CARD_FILE = 'README.md'
METRICS_FILE = 'metrics.csv'
BUNDLE_FORMAT = 'roxie-policy'
BUNDLE_VERSION = 1
_SEP = ':'  # Joins nested parameter names; haiku never uses it in a name.
_PARITY_ATOL = 1e-5


class BundleError(ValueError):
  """A bundle or run that cannot be exported or loaded, and why."""


# -- policies ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Policy:
  """A deterministic policy: `policy(obs)` for obs [O] or [B, O].

  Attributes:
    name: the bundle's name (e.g. 'CartpoleSwingup-sac').
    agent: the recipe that trained it.
    task: the task it acts in.
    spec: the task's `roxie.types.EnvSpec`.
    config: the agent's Config.
    env_options: the options of `roxie.envs.make` the policy was trained
      with, as JSON (e.g. a shorter episode_length, 'action_repeat', and for
      a policy trained from pixels 'pixels': the `PixelSpec`'s fields);
      `make_env` builds that environment.
    metadata: the bundle's roxie.json as a dict (empty for a run's policy).
    params: the parameters `apply` takes.
    apply: the pure function `apply(params, obs [..., O]) -> action [..., A]`
      in [-1, 1], for use inside jitted code.
  """
  name: str
  agent: str
  task: str
  spec: Any
  config: Any
  env_options: Mapping[str, Any]
  metadata: Mapping[str, Any]
  params: Any
  apply: Callable[[Any, Any], Any]

  def __post_init__(self):
    import jax  # pylint: disable=g-import-not-at-top
    object.__setattr__(self, '_jitted', jax.jit(self.apply))

  def __call__(self, obs):
    """The action for obs [O] or [B, O] (a jax Array [A] or [B, A]).

    A policy trained from pixels takes its dict observation (one env's
    entries, or [B, ...] entries).
    """
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    if getattr(self.spec, 'obs_shapes', None) is not None:
      return self._jitted(self.params, obs)
    obs = jnp.asarray(obs, jnp.float32)
    if obs.ndim not in (1, 2) or obs.shape[-1] != self.spec.obs_size:
      raise ValueError(
          f'{self.name}: expected observations [{self.spec.obs_size}] or '
          f'[B, {self.spec.obs_size}] for {self.task}, got '
          f'{list(obs.shape)}.')
    # The action of a NaN observation is NaN; say so rather than return it
    # (jitted callers use `apply`, which does not check).
    if not bool(jnp.all(jnp.isfinite(obs))):
      raise ValueError(
          f'{self.name}: the observation holds NaN or inf (entries '
          f'{np_nonfinite(obs)}); a policy acts on finite observations.')
    return self._jitted(self.params, obs)

  @property
  def pixels(self) -> bool:
    """Whether the policy acts on dict (pixel) observations."""
    return getattr(self.spec, 'obs_shapes', None) is not None

  def make_env(self, num_envs: int = 1, backend: str = 'cpu', **options):
    """The environment the policy was trained in, a batch of `num_envs`.

    Built from `env_options` as the training run built it (pixel spec,
    frame stack, render cadence, action repeat, episode length), so its
    observations are the ones the policy takes. `options` override them
    (keyword arguments of `roxie.envs.make`, e.g. nthread).

    Raises:
      roxie.gl.RenderingUnavailable: a pixel policy, and no headless OpenGL
        here (the message names the packages to install).
    """
    from roxie import envs  # pylint: disable=g-import-not-at-top
    from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
    return envs.make(self.task, backend=backend, num_envs=int(num_envs),
                     **run_lib.env_kwargs({**self.env_options, **options},
                                          backend))

  def __repr__(self):
    if self.pixels:
      obs = ', '.join(f'{k}: {list(shape)}'
                      for k, shape, _ in self.spec.obs_shapes)
      obs = f'obs={{{obs}}}'
    else:
      obs = f'obs_size={self.spec.obs_size}'
    return (f'Policy({self.name!r}, agent={self.agent!r}, task={self.task!r}, '
            f'{obs}, action_size={self.spec.action_size})')


def np_nonfinite(obs, limit: int = 5) -> str:
  """The indices of the first non-finite entries of `obs`, as text."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  idx = [tuple(int(i) for i in ix)
         for ix in np.argwhere(~np.isfinite(np.asarray(obs)))[:limit]]
  return ', '.join(str(i[0] if len(i) == 1 else list(i)) for i in idx)


_HOOKS = ('policy_params', 'make_policy')


def policy_hooks(agent: str, module: types.ModuleType, recipe: Any,
                 config: Any, spec: Any):
  """The policy an agent exports: `recipe.policy`, else its module's hooks.

  Args:
    agent: the agent's name (for messages).
    module: the agent's module (`roxie.agents.get_agent(agent)`).
    recipe: the `Recipe` its factory built for `config` and `spec`.
    config: the agent's config.
    spec: the env spec.

  Returns:
    A `roxie.types.Policy`: `recipe.policy` where the recipe has one, else
    one made of the module-level `policy_params` and
    `make_policy(config, spec)`.

  Raises:
    BundleError: neither, or a `policy` whose parts are not functions.
  """
  from roxie.types import Policy as RecipePolicy  # pylint: disable=g-import-not-at-top
  where = getattr(module, '__file__', None) or module.__name__
  policy = getattr(recipe, 'policy', None)
  if policy is not None:
    if not (isinstance(policy, RecipePolicy) and callable(policy.params)
            and callable(policy.apply)):
      raise BundleError(
          f'Agent {agent!r} ({where}): its Recipe.policy must be a '
          'roxie.types.Policy(params=function, apply=function), got '
          f'{policy!r}.')
    return policy
  missing = [n for n in _HOOKS if not callable(getattr(module, n, None))]
  if missing:
    raise BundleError(
        f'Agent {agent!r} ({where}): its recipe has no policy, and its module '
        f'does not define {" and ".join(missing)}, so its policy cannot be '
        'exported. Set the Recipe\'s policy field in its factory:\n'
        '  Recipe(..., policy=roxie.types.Policy(params=..., apply=...))\n'
        'with\n'
        '  params(state) -> dict of arrays (what acting needs, e.g. '
        "{'actor': state.actor})\n"
        '  apply(params, obs) -> action (the deterministic action '
        'act(state, obs, key, explore=False) takes, observations normalised '
        'inside apply where the agent normalises)\n'
        '(or define the older module-level pair policy_params(state) and '
        'make_policy(config, spec) -> apply).')
  return RecipePolicy(params=module.policy_params,
                      apply=module.make_policy(config, spec))


def _flatten(tree: Mapping[str, Any], prefix: str = '') -> Dict[str, Any]:
  import numpy as np  # pylint: disable=g-import-not-at-top
  flat = {}
  for key, value in tree.items():
    if _SEP in key:
      raise BundleError(f'Parameter name {key!r} contains {_SEP!r}.')
    name = f'{prefix}{key}'
    if isinstance(value, Mapping):
      flat.update(_flatten(value, name + _SEP))
    else:
      flat[name] = np.asarray(value)
  return flat


def _unflatten(flat: Mapping[str, Any]) -> Dict[str, Any]:
  tree: Dict[str, Any] = {}
  for name, value in flat.items():
    *path, leaf = name.split(_SEP)
    node = tree
    for key in path:
      node = node.setdefault(key, {})
    node[leaf] = value
  return tree


def _check_policy(policy: Policy, where: str) -> None:
  """Traces `apply` on the params abstractly: wrong shapes fail here, clearly."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  obs = _example_obs(policy.spec, 1)
  try:
    out = jax.eval_shape(policy.apply, policy.params, obs)
  except Exception as e:  # haiku: missing params / shape mismatches
    raise BundleError(
        f'{where}: the parameters do not fit a {policy.agent} policy for '
        f'{policy.task} with this config ({type(e).__name__}: {e}).') from e
  if tuple(out.shape) != (1, policy.spec.action_size):
    raise BundleError(
        f'{where}: the policy gives actions of shape {list(out.shape)}, '
        f'expected [1, {policy.spec.action_size}].')


def _check_pixel_options(spec, env_options: Mapping[str, Any],
                         where: str) -> None:
  """A pixel policy's env_options must rebuild its observations (no GL)."""
  shapes = getattr(spec, 'obs_shapes', None)
  pixels = env_options.get('pixels')
  if shapes is None and pixels is None:
    return
  if shapes is None or pixels is None:
    raise BundleError(
        f'{where}: the env spec and env_options disagree on the observations '
        f'(obs_shapes {"set" if shapes else "missing"}, env_options.pixels '
        f'{"set" if pixels else "missing"}), so the environment the policy '
        'acts in cannot be rebuilt.')
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  try:
    run_lib.env_kwargs({'pixels': pixels})
  except (TypeError, ValueError) as e:
    raise BundleError(f'{where}: env_options.pixels is not a PixelSpec '
                      f'({e}).') from e


def _example_obs(spec, n: int, key=None):
  """n observations of `spec` (abstract; random with a key), array or dict."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  shapes = getattr(spec, 'obs_shapes', None)
  if shapes is None:
    if key is None:
      return jax.ShapeDtypeStruct((n, spec.obs_size), np.float32)
    return 3. * jax.random.normal(key, (n, spec.obs_size))
  out = {}
  for name, shape, dtype in shapes:
    shape = (n,) + tuple(shape)
    if key is None:
      out[name] = jax.ShapeDtypeStruct(shape, np.dtype(dtype))
    elif np.dtype(dtype) == np.uint8:
      key, k = jax.random.split(key)
      out[name] = jax.random.randint(k, shape, 0, 256).astype(jnp.uint8)
    else:
      key, k = jax.random.split(key)
      out[name] = 3. * jax.random.normal(k, shape)
  return out


def _spec_to_dict(spec) -> Dict[str, Any]:
  d = spec._asdict()
  d['obs_names'] = [[n, int(k)] for n, k in spec.obs_names]
  if d.get('obs_shapes') is not None:  # Dict observations, as JSON lists.
    d['obs_shapes'] = [[str(k), [int(x) for x in shape], str(t)]
                       for k, shape, t in spec.obs_shapes]
  return d


def _spec_from_dict(d: Mapping[str, Any]):
  from roxie.types import EnvSpec  # pylint: disable=g-import-not-at-top
  d = dict(d)
  d['obs_names'] = tuple((str(n), int(k)) for n, k in d['obs_names'])
  if d.get('obs_shapes') is not None:
    d['obs_shapes'] = tuple((str(k), tuple(int(x) for x in shape), str(t))
                            for k, shape, t in d['obs_shapes'])
  return EnvSpec(**d)


# -- loading -----------------------------------------------------------------


def policies_dir() -> str:
  """The folder of the policies shipped with roxie."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'policies')


def shipped_policies() -> Tuple[str, ...]:
  """Names of the policies shipped with roxie (`roxie.load_policy(name)`)."""
  root = policies_dir()
  if not os.path.isdir(root):
    return ()
  return tuple(sorted(n for n in os.listdir(root)
                      if os.path.isfile(os.path.join(root, n, META_FILE))))


def resolve_bundle(path_or_name: str) -> str:
  """The bundle folder for a path or a shipped policy's name."""
  path = os.fspath(path_or_name)
  if os.path.isfile(os.path.join(path, META_FILE)):
    return path
  shipped = os.path.join(policies_dir(), path)
  if os.sep not in path and os.path.isfile(os.path.join(shipped, META_FILE)):
    return shipped
  if os.path.isdir(path):
    hint = (' (it is a training run: export it first with `roxie export '
            f'--run {path} --to FOLDER`, or use --run)'
            if os.path.isfile(os.path.join(path, 'config.json')) else '')
    raise BundleError(f'{path} is not a roxie policy bundle: no {META_FILE}'
                      f'{hint}.')
  names = ', '.join(shipped_policies()) or 'none'
  raise BundleError(f'No policy bundle at {path!r}, and no shipped policy of '
                    f'that name (shipped: {names}).')


def read_metadata(path_or_name: str) -> Dict[str, Any]:
  """A bundle's roxie.json (path or shipped name), checked for its format."""
  folder = resolve_bundle(path_or_name)
  path = os.path.join(folder, META_FILE)
  try:
    with open(path) as f:
      meta = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise BundleError(f'{path} is unreadable ({e}).') from e
  if not isinstance(meta, dict) or meta.get('format') != BUNDLE_FORMAT:
    raise BundleError(f'{path} is not a roxie policy bundle description.')
  if int(meta.get('format_version', 0)) > BUNDLE_VERSION:
    raise BundleError(
        f'{path} is bundle format {meta["format_version"]}; this roxie reads '
        f'up to {BUNDLE_VERSION} (upgrade roxie).')
  missing = [k for k in ('agent', 'task', 'config', 'env_spec')
             if k not in meta]
  if missing:
    raise BundleError(f'{path} lacks {", ".join(missing)}.')
  return meta


def load_policy(path_or_name: str) -> Policy:
  """Loads an exported policy bundle, with no training code.

  Args:
    path_or_name: a bundle folder (written by `roxie export`), or the name of
      a policy shipped with roxie (see `shipped_policies()`, e.g.
      'CartpoleSwingup-sac').

  Returns:
    A `Policy`: call it on observations [O] or [B, O] for actions in [-1, 1];
    `policy.spec`, `policy.metadata` (the bundle's roxie.json) describe it.

  Raises:
    BundleError: not a bundle, unreadable, or parameters that do not fit.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from roxie import agents  # pylint: disable=g-import-not-at-top
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top

  folder = resolve_bundle(path_or_name)
  meta = read_metadata(folder)
  try:
    module = agents.get_agent(meta['agent'])
    cfg = config_lib.from_dict(module.Config, meta['config'])
  except (KeyError, ValueError, TypeError) as e:
    raise BundleError(f'{folder}: cannot rebuild the agent config '
                      f'({e}).') from e
  spec = _spec_from_dict(meta['env_spec'])
  try:
    # Builds functions only (networks are haiku transforms; nothing is
    # initialised): the policy's `apply` is all that runs.
    recipe = module.make(cfg, spec)
  except (KeyError, ValueError, TypeError) as e:
    raise BundleError(f'{folder}: cannot build the {meta["agent"]} recipe '
                      f'for its config and env spec ({e}).') from e
  apply = policy_hooks(meta['agent'], module, recipe, cfg, spec).apply
  params_path = os.path.join(folder, PARAMS_FILE)
  try:
    with np.load(params_path) as data:
      flat = {k: data[k] for k in data.files}
  except Exception as e:  # missing, truncated, not an npz
    raise BundleError(f'{params_path} is unreadable ({e}).') from e
  bad = sorted(k for k, v in flat.items()
               if np.issubdtype(v.dtype, np.inexact) and not np.isfinite(v).all())
  if bad:
    raise BundleError(
        f'{params_path}: {len(bad)} of {len(flat)} parameter arrays are not '
        f'finite (NaN or inf): {", ".join(bad[:3])}'
        f'{" ..." if len(bad) > 3 else ""}. The policy cannot act.')
  params = _unflatten({k: jnp.asarray(v) for k, v in flat.items()})
  env_options = dict(meta.get('env_options') or {})
  _check_pixel_options(spec, env_options, folder)
  policy = Policy(
      name=meta.get('name') or os.path.basename(os.path.normpath(folder)),
      agent=meta['agent'], task=meta['task'], spec=spec, config=cfg,
      env_options=env_options, metadata=meta,
      params=params, apply=apply)
  _check_policy(policy, folder)
  return policy


# -- from a training run -----------------------------------------------------


def _trained_state(run_dir: str):
  """(RunConfig, recipe module, Config, EnvSpec, recipe, agent state).

  The RunConfig has the frame size the saved state trained at last (that of
  its resolution schedule's stage, with one).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from roxie import envs  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  run, module, cfg = run_lib.load_run_config(run_dir)
  # With a resolution schedule: the size the saved state trained at last.
  run = run_lib.trained_run(run_dir, run)
  env = envs.make(run.task, backend='cpu', num_envs=1, nthread=1,
                  **run.env_kwargs('cpu'))
  spec = env.spec
  recipe = module.make(cfg, spec)
  # The same template evaluate_run builds: shapes only, nothing trained.
  template = jax.eval_shape(lambda k: recipe.init(k, spec),
                            jax.random.PRNGKey(0))
  template = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), template)
  load = getattr(run_lib, 'load_run_agent_state', None)
  if load is not None:  # The latest checkpoint's, else agent_state.npz.
    state = load(run_dir, template)
  else:
    state = run_lib.load_agent_state(
        os.path.join(run_dir, run_lib.STATE_FILE), template)
  return run, module, cfg, spec, recipe, state


def policy_from_run(run_dir: str, *, check: bool = True) -> Policy:
  """The deterministic policy of a training run's saved agent state.

  Args:
    run_dir: a run directory written by `roxie train`.
    check: compare the policy with the recipe's own `act(explore=False)` on
      random observations, and raise if they differ.

  Returns:
    A `Policy` (its `metadata` is empty).

  Raises:
    BundleError: the policy disagrees with the recipe (a stale hook).
    FileNotFoundError, ValueError: not a run, or an unreadable state.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from roxie import agents  # pylint: disable=g-import-not-at-top
  run, module, cfg, spec, recipe, state = _trained_state(run_dir)
  hooks = policy_hooks(run.agent, module, recipe, cfg, spec)
  params = jax.tree.map(np.asarray, hooks.params(state))
  if not isinstance(params, Mapping):
    raise BundleError(f'{run.agent}: its policy\'s params(state) must '
                      'return a dict.')
  policy = Policy(
      name=f'{run.task}-{agents.short_name(run.agent)}',
      agent=run.agent,
      task=run.task, spec=spec, config=cfg,
      env_options=dict(run.env_options or {}), metadata={},
      params=params, apply=hooks.apply)
  _check_policy(policy, run_dir)
  if check:
    key = jax.random.PRNGKey(1)
    obs = _example_obs(spec, 16, key)
    expected, _ = jax.jit(lambda s, o, k: recipe.act(s, o, k, explore=False))(
        state, obs, key)
    got = policy(obs)
    err = float(np.max(np.abs(np.asarray(expected) - np.asarray(got))))
    if not err <= _PARITY_ATOL:
      raise BundleError(
          f'The exported {run.agent} policy differs from the recipe\'s '
          f'act(explore=False) by up to {err:.3g}: its policy (Recipe.policy, '
          f'or the module\'s policy_params/make_policy) no longer matches '
          f'the recipe.')
  return policy


# -- evaluation --------------------------------------------------------------


def evaluate_policy(policy: Policy, *, episodes: int = 10,
                    backend: str = 'cpu', seed: int = 0):
  """Evaluates a policy with the library's compiled evaluator.

  The same program as `roxie eval --run` (`roxie.loops.make_evaluator`),
  so a run and its export score the same for the same seed.

  Args:
    policy: the policy.
    episodes: episodes, one per evaluation environment.
    backend: 'cpu' or 'mjx'.
    seed: PRNG seed of the resets.

  Returns:
    A `roxie.loops.EvalResult` (NumPy values).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from roxie import loops  # pylint: disable=g-import-not-at-top

  env = policy.make_env(num_envs=int(episodes), backend=backend)
  shim = types.SimpleNamespace(
      act=lambda params, obs, key, explore=False: (policy.apply(params, obs),
                                                   {}))
  evaluate = loops.make_evaluator(shim, env)
  return jax.device_get(evaluate(policy.params, jax.random.PRNGKey(seed)))


# -- writing -----------------------------------------------------------------


def _training_summary(run_dir: str, run) -> Dict[str, Any]:
  """roxie.json's 'training': how the run (a RunConfig) was trained."""
  summary = {'backend': run.backend, 'num_envs': run.num_envs,
             'seed': run.seed, 'steps_configured': run.steps}
  if run.resolution_schedule:  # [[env steps, height, width], ...]
    summary['resolution_schedule'] = [list(stage)
                                      for stage in run.resolution_schedule]
  path = os.path.join(run_dir, METRICS_FILE)
  if os.path.exists(path):
    with open(path, newline='') as f:
      rows = list(csv.DictReader(f))
    if rows:
      last = rows[-1]
      for key, name, kind in (('env_steps', 'env_steps', int),
                              ('wall_time', 'wall_time_s', float),
                              ('eval_return', 'final_train_eval_return',
                               float)):
        try:
          summary[name] = kind(float(last[key]))
        except (KeyError, TypeError, ValueError):
          pass
  return summary


def _yaml_str(s: str) -> str:
  return json.dumps(str(s))  # A JSON string is a valid YAML double-quoted one.


def model_card(meta: Mapping[str, Any], ref: Optional[str] = None) -> str:
  """The bundle's README.md: Hugging Face hub front matter and a summary.

  Args:
    meta: the bundle's metadata, with its evaluation.
    ref: how the usage examples name the bundle (a shipped name or a path;
      default the bundle's name).
  """
  ref = ref or meta['name']
  ev = meta['evaluation']
  tr = meta.get('training', {})
  name, agent, task = meta['name'], meta['agent'], meta['task']
  value = f'{ev["return_mean"]:.2f} +/- {ev["return_std"]:.2f}'
  from roxie import agents  # pylint: disable=g-import-not-at-top
  tags = ['reinforcement-learning', 'continuous-control', 'mujoco', 'jax',
          'roxie', agents.short_name(agent), task]
  front = ['---', 'library_name: roxie', 'license: apache-2.0', 'tags:']
  front += [f'- {_yaml_str(t)}' for t in tags]
  front += [
      'model-index:',
      f'- name: {_yaml_str(name)}',
      '  results:',
      '  - task:',
      '      type: reinforcement-learning',
      '      name: reinforcement-learning',
      '    dataset:',
      f'      name: {_yaml_str(task)}',
      f'      type: {_yaml_str(task)}',
      '    metrics:',
      '    - type: mean_reward',
      f'      value: {_yaml_str(value)}',
      '      name: mean_reward',
      '      verified: false',
      '---', '']
  steps = tr.get('env_steps')
  wall = tr.get('wall_time_s')
  pixels = (meta.get('env_options') or {}).get('pixels')
  body = [
      f'# {name}: {agent.upper()} on {task}', '',
      f'A deterministic {agent.upper()} policy for the `{task}` task '
      f'(DeepMind Control Suite, MuJoCo), trained with roxie '
      f'{meta["roxie_version"]}.',
      '',
      '## Evaluation', '',
      '| return (mean +/- std) | episodes | episode length | backend | seed |',
      '| --- | --- | --- | --- | --- |',
      f'| {value} | {ev["episodes"]} | {meta["env_spec"]["episode_length"]} '
      f'| {ev["backend"]} | {ev["seed"]} |', '',
      'Evaluated from this bundle with the deterministic action (the mode), '
      'one episode per environment from fresh resets; '
      f'`roxie eval --policy <this folder> --episodes {ev["episodes"]} '
      f'--seed {ev["seed"]}` reproduces it.', '',
      '## Use', '',
      '```python'] + (_pixel_use(ref, meta) if pixels else [
          'import roxie',
          f'policy = roxie.load_policy("{ref}")',
          'action = policy(obs)  # obs [O] or [B, O] -> action in [-1, 1]'
      ]) + [
      '```', '',
      '```bash',
      f'roxie eval --policy {ref}',
      f'roxie play --policy {ref} -o rollout.mp4',
      '```', '',
      '## Training', '',
      f'- agent: `{agent}`, task: `{task}`, backend: '
      f'`{tr.get("backend")}`, seed: {tr.get("seed")}, parallel envs: '
      f'{tr.get("num_envs")}',
      ] + ([_pixel_summary(meta)] if pixels else []) + [
      f'- environment steps: {steps if steps is not None else "?"}'
      + (f', wall-clock: {wall / 60:.1f} min' if wall is not None else ''),
      '- the learning curve is in `metrics.csv`; the full agent config is in '
      '`roxie.json`', '',
      '## Files', '',
      f'- `{PARAMS_FILE}`: policy parameters'
      + (' and observation statistics' if meta['params'].get(
          'observation_statistics') else '')
      + f' ({meta["params"]["num_parameters"]:,} numbers)',
      f'- `{META_FILE}`: task, agent, config, env spec, evaluation',
      f'- `{METRICS_FILE}`: the training run\'s metrics', '']
  return '\n'.join(front + body)


def _pixel_summary(meta: Mapping[str, Any]) -> str:
  """The card's line on a pixel policy's observations."""
  options = meta['env_options']
  p = options['pixels']
  images = ' and '.join(n for n, on in (('RGB', p.get('rgb', True)),
                                        ('depth', p.get('depth'))) if on)
  extras = ''.join(f', {n}' for n, on in (
      ('the state vector', p.get('state')),
      (f'sensors {", ".join(p.get("sensors") or ())}', p.get('sensors')))
                   if on)
  every = int(p.get('render_every', 1))
  return (f'- observations: {p["height"]}x{p["width"]} {images or "no"} '
          f'frames of camera {p.get("camera", 0)!r}, '
          f'{p.get("frame_stack", 3)} stacked'
          + (f', rendered every {every} agent steps' if every > 1 else '')
          + f'{extras}; action repeat {int(options.get("action_repeat", 1))} '
          '(`env_options` in `roxie.json`; `policy.make_env()` builds the '
          'environment, which renders with headless OpenGL)')


def _pixel_use(ref: str, meta: Mapping[str, Any]) -> list:
  """The card's Python example for a pixel policy."""
  shapes = ', '.join(f"'{k}': [1, {', '.join(str(x) for x in shape)}]"
                     for k, shape, _ in meta['env_spec']['obs_shapes'])
  return [
      'import jax, roxie',
      f'policy = roxie.load_policy("{ref}")',
      'env = policy.make_env()  # as trained: camera frames, frame stack, '
      'action repeat',
      'state = env.reset(jax.random.key(0))',
      f'action = policy(state.obs)  # {{{shapes}}} -> action in [-1, 1]',
      'state, ts = env.step(state, action)']


def _replace_dir(tmp: str, dest: str) -> None:
  """Moves `tmp` to `dest`, replacing an existing `dest` only at the end."""
  old = None
  if os.path.exists(dest):
    old = f'{dest}.old-{os.getpid()}'
    os.replace(dest, old)
  os.replace(tmp, dest)
  if old:
    shutil.rmtree(old, ignore_errors=True)


_BUNDLE_FILES = frozenset((PARAMS_FILE, META_FILE, CARD_FILE, METRICS_FILE))


def _inside(path: str, root: str) -> bool:
  """Whether `path` is `root` or lies under it (symlinks resolved)."""
  path, root = os.path.realpath(path), os.path.realpath(root)
  return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_destination(run_dir: str, folder: str, *, overwrite: bool) -> None:
  """Raises BundleError unless a bundle may be written to `folder`.

  A missing folder is fine. An existing one is replaced only with
  `overwrite`, and only if it is recognisably a roxie bundle: a roxie.json
  of the bundle format and no files but a bundle's. The run itself (or a
  folder holding it) is never replaced.
  """
  if _inside(run_dir, folder):
    raise BundleError(
        f'--to {folder} is the run {run_dir} itself, or holds it: exporting '
        'there would replace the run. Choose another folder.')
  if not os.path.lexists(folder):
    return
  if not overwrite:
    raise BundleError(f'{folder} already exists (pass --overwrite to replace '
                      'it, if it is a bundle roxie exported).')
  if not os.path.isdir(folder) or os.path.islink(folder):
    raise BundleError(f'{folder} is not a folder; --overwrite only replaces '
                      'a policy bundle. Choose another --to.')
  extra = sorted(set(os.listdir(folder)) - _BUNDLE_FILES)
  try:
    read_metadata(folder)
    is_bundle = os.path.isfile(os.path.join(folder, META_FILE))
  except BundleError:
    is_bundle = False
  if not is_bundle or extra:
    why = ('it holds files a bundle does not: ' + ', '.join(extra[:5])
           + (' ...' if len(extra) > 5 else '')) if is_bundle else (
               f'it has no bundle {META_FILE}')
    raise BundleError(
        f'{folder} is not a roxie policy bundle ({why}); --overwrite only '
        'replaces a bundle roxie exported, so nothing was changed. Choose '
        'another --to.')


def export_run(run_dir: str, folder: str, *, name: Optional[str] = None,
               eval_episodes: int = 10, eval_backend: str = 'cpu',
               eval_seed: int = 0, overwrite: bool = False) -> Dict[str, Any]:
  """Writes a run's policy as a self-contained bundle (see the module doc).

  The bundle is written next to `folder`, loaded back with `load_policy`,
  evaluated, and only then moved into place.

  Args:
    run_dir: a training run directory.
    folder: where the bundle goes (created; its parents too).
    name: the bundle's name (default '<task>-<agent>').
    eval_episodes: episodes of the evaluation recorded in the card.
    eval_backend: backend of that evaluation.
    eval_seed: its seed.
    overwrite: replace an existing `folder`, if it is a roxie bundle (see
      `check_destination`).

  Returns:
    The bundle's metadata (roxie.json's content).

  Raises:
    BundleError: `folder` exists (without overwrite), or the policy cannot be
      exported faithfully.
    FileNotFoundError, ValueError: not a run, or an unreadable state.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import roxie  # pylint: disable=g-import-not-at-top
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  folder = os.path.normpath(folder)
  check_destination(run_dir, folder, overwrite=overwrite)
  policy = policy_from_run(run_dir)
  run, _, _ = run_lib.load_run_config(run_dir)
  flat = _flatten(policy.params)
  meta = {
      'format': BUNDLE_FORMAT, 'format_version': BUNDLE_VERSION,
      'name': name or policy.name, 'agent': policy.agent, 'task': policy.task,
      'roxie_version': roxie.__version__,
      'env_spec': _spec_to_dict(policy.spec),
      'env_options': dict(policy.env_options),
      'config': config_lib.to_dict(policy.config),
      'params': {'file': PARAMS_FILE, 'groups': sorted(policy.params),
                 'observation_statistics': 'obs_stats' in policy.params,
                 'num_parameters': int(sum(v.size for v in flat.values()))},
      'training': _training_summary(run_dir, run),
  }
  parent = os.path.dirname(os.path.abspath(folder))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix='.export-', dir=parent)
  try:
    with open(os.path.join(tmp, PARAMS_FILE), 'wb') as f:
      np.savez(f, **flat)
    src_metrics = os.path.join(run_dir, METRICS_FILE)
    if os.path.exists(src_metrics):
      shutil.copyfile(src_metrics, os.path.join(tmp, METRICS_FILE))
    _write_json(os.path.join(tmp, META_FILE), meta)
    # Evaluate what was written, through the loading path.
    result = evaluate_policy(load_policy(tmp), episodes=eval_episodes,
                             backend=eval_backend, seed=eval_seed)
    meta['evaluation'] = {
        'return_mean': round(float(result.mean), 3),
        'return_std': round(float(result.std), 3),
        'episodes': int(eval_episodes), 'backend': eval_backend,
        'seed': int(eval_seed),
        'returns': [round(float(r), 3) for r in result.returns]}
    _write_json(os.path.join(tmp, META_FILE), meta)
    with open(os.path.join(tmp, CARD_FILE), 'w') as f:
      shipped = os.path.dirname(os.path.abspath(folder)) == policies_dir()
      f.write(model_card(meta, meta['name'] if shipped
                         else os.path.basename(folder)))
    os.chmod(tmp, 0o755)
    _replace_dir(tmp, folder)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return meta


def _write_json(path: str, obj: Any) -> None:
  with open(path, 'w') as f:
    json.dump(obj, f, indent=2)
    f.write('\n')


# -- command line ------------------------------------------------------------


def add_cli(sub: 'argparse._SubParsersAction') -> None:
  """Adds `roxie export` to the CLI's subcommands."""
  p = sub.add_parser('export', help="write a run's policy as a bundle",
                     description='Writes a self-contained policy bundle '
                     '(policy.npz, roxie.json, metrics.csv, a model card).')
  p.add_argument('--run', required=True, help='run directory')
  p.add_argument('--to', required=True, metavar='FOLDER',
                 help='bundle folder to write')
  p.add_argument('--name', default=None,
                 help='bundle name (default: <task>-<agent>)')
  p.add_argument('--episodes', type=int, default=10,
                 help='evaluation episodes recorded in the card')
  p.add_argument('--backend', default='cpu', choices=('cpu', 'mjx'),
                 help='backend of that evaluation')
  p.add_argument('--seed', type=int, default=0, help='evaluation seed')
  p.add_argument('--overwrite', action='store_true',
                 help='replace an existing bundle folder (only a roxie '
                 'bundle; any other folder, or the run, is refused)')
  p.set_defaults(cli_main=cli_main)


def _fail(message: str) -> int:
  import sys  # pylint: disable=g-import-not-at-top
  print(f'roxie: error: {message}', file=sys.stderr)
  return 2


def cli_main(args: argparse.Namespace) -> int:
  """Runs `roxie export`."""
  if args.episodes < 1:
    return _fail(f'--episodes must be >= 1, got {args.episodes}.')
  try:
    meta = export_run(args.run, args.to, name=args.name,
                      eval_episodes=args.episodes, eval_backend=args.backend,
                      eval_seed=args.seed, overwrite=args.overwrite)
  except (FileNotFoundError, ValueError, KeyError, RenderingUnavailable) as e:
    return _fail(str(e.args[0] if isinstance(e, KeyError) else e))
  ev = meta['evaluation']
  print(f'exported {meta["name"]} to {args.to}: eval_return='
        f'{ev["return_mean"]:.1f} std={ev["return_std"]:.1f} '
        f'episodes={ev["episodes"]}')
  return 0


def eval_cli(policy_path: str, *, episodes: int, backend: Optional[str],
             seed: int) -> int:
  """`roxie eval --policy FOLDER`: evaluates a bundle; prints like --run."""
  try:
    policy = load_policy(policy_path)
    result = evaluate_policy(policy, episodes=episodes,
                             backend=backend or 'cpu', seed=seed)
  except (FileNotFoundError, ValueError, KeyError, RenderingUnavailable) as e:
    return _fail(str(e.args[0] if isinstance(e, KeyError) else e))
  print(f'eval_return={float(result.mean):.1f} '
        f'std={float(result.std):.1f} episodes={episodes}')
  return 0
