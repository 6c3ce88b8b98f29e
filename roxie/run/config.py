"""A run's settings: resolution from the agent's Config, checks and differences.

config.json holds them (see the package docstring); `load_run` reads and
checks one, `new_run_config` resolves a new run's from `train`'s arguments.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import jax
import numpy as np

from roxie import config as config_lib
from roxie import envs
from roxie import loops
from roxie.run.errors import RunError
from roxie.types import RUN_SETTINGS, RunDefaults
from roxie.run.files import CONFIG_FILE


DEFAULT_TASK = 'CartpoleSwingup'


_MAX_ITERATIONS_PER_CALL = 1000


# config.json fields that define a run: a resume must not change them.
RUN_FIELDS = ('agent', 'task', 'backend', 'num_envs', 'seed', 'env_options',
              'config', 'eval_every', 'eval_episodes', 'iterations_per_call')


def _agent_module(agent: str):
  from roxie import agents  # pylint: disable=g-import-not-at-top
  return agents.get_agent(agent)


def _agent_name(agent: Any) -> str:
  """A built-in name, or a user agent's SOURCE:FACTORY (see roxie.agents)."""
  from roxie import agents  # pylint: disable=g-import-not-at-top
  return agents.canonical_name(agent)


assert RUN_SETTINGS == tuple(f.name for f in dataclasses.fields(RunDefaults))


def split_overrides(overrides: Mapping[str, Any]
                    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
  """(run settings, Config fields) of `--set` overrides."""
  run = {k: v for k, v in overrides.items() if k in RUN_SETTINGS}
  return run, {k: v for k, v in overrides.items() if k not in RUN_SETTINGS}


def resolve_config(agent: str, overrides: Mapping[str, Any]):
  """The agent's Config with its overrides applied (run settings aside).

  Raises:
    roxie.config.ConfigError: a field the Config does not have, or a bad
      value; KeyError: an unknown agent.
  """
  module = _agent_module(agent)
  fields = split_overrides(overrides)[1]
  try:
    return module, config_lib.apply_overrides(module.Config(), fields)
  except config_lib.ConfigError as e:
    if any(k not in config_lib.field_names(module.Config) for k in fields):
      raise config_lib.ConfigError(
          f'{e} Run settings (also --set): {", ".join(RUN_SETTINGS)}.'
      ) from None
    raise


def run_defaults(module: Any) -> RunDefaults:
  """How the recipe module runs unless told: its `RUN_DEFAULTS`.

  A user agent's module without one gets `RunDefaults()`, or, where its
  Config still declares fields of those names (as roxie's did before they
  became run settings), their defaults.
  """
  found = getattr(module, 'RUN_DEFAULTS', None)
  if isinstance(found, RunDefaults):
    return found
  if found is not None:
    raise RunError(f'{module.__name__}.RUN_DEFAULTS must be a '
                   f'roxie.types.RunDefaults, got {type(found).__name__}.')
  legacy = {f.name: f.default for f in dataclasses.fields(module.Config)
            if f.name in RUN_SETTINGS
            and f.default is not dataclasses.MISSING}
  return RunDefaults(**legacy)


def resolve_run_defaults(module: Any,
                         overrides: Mapping[str, Any]) -> RunDefaults:
  """The module's run defaults with the `--set` run settings applied.

  Raises:
    roxie.config.ConfigError: a bad value (text parsed as for Config fields).
  """
  return config_lib.validate(config_lib.apply_overrides(
      run_defaults(module), split_overrides(overrides)[0]))


def config_json(cfg: Any) -> Dict[str, Any]:
  """config.json's 'config' of an agent Config: its fields, run settings out.

  (A user agent's Config may still declare fields named as run settings;
  the run's values are the RunConfig's, so they are not recorded twice.)
  """
  return {k: v for k, v in config_lib.to_dict(cfg).items()
          if k not in RUN_SETTINGS}


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """What defines a run: config.json, typed.

  `from_json` reads config.json's object (checking each field's JSON type)
  and `to_json` writes it back, key for key; nothing else names its keys.
  The optional fields are None in a config.json written by an older roxie
  that did not have them.

  Attributes:
    agent: a built-in agent's name, or a user agent's SOURCE:FACTORY.
    task: the task's registered name.
    backend: 'cpu' (native MuJoCo) or 'mjx'.
    num_envs: parallel training environments.
    steps: the total of environment steps to train.
    seed: the run's PRNG seed.
    config: the agent's Config as JSON (`config_json`); see
      `agent_config`. A config.json written before num_envs, total_steps
      and action_repeat became run settings also has those (kept as
      written, so its checkpoints' identity holds; the run's own values
      are `num_envs`, `steps` and `action_repeat`).
    env_options: keyword arguments of `roxie.envs.make` as JSON (see
      `env_kwargs`): episode_length, action_repeat, pixels (a
      `roxie.envs.PixelSpec`'s fields), ...
    eval_every: environment steps between evaluations (whole iterations).
    eval_episodes: episodes per evaluation.
    iterations_per_call: loop iterations per compiled call.
    env_steps_per_iteration: num_envs x steps per iteration x action repeat.
    resolution_schedule: ((env steps, height, width), ...) of a run from
      pixels that changes its image size (see `roxie.run.schedules`).
    num_devices: devices the run is data-parallel over.
    num_processes: processes of a multi-process job.
    checkpoint_contents: `AGENT_ONLY` when checkpoints hold the agent
      state only (a multi-process job).
  """
  agent: str
  task: str
  backend: str
  num_envs: int
  steps: int
  seed: int
  config: Mapping[str, Any]
  env_options: Optional[Mapping[str, Any]] = None
  eval_every: Optional[int] = None
  eval_episodes: Optional[int] = None
  iterations_per_call: Optional[int] = None
  env_steps_per_iteration: Optional[int] = None
  resolution_schedule: Optional[Tuple[Tuple[int, int, int], ...]] = None
  num_devices: Optional[int] = None
  num_processes: Optional[int] = None
  checkpoint_contents: Optional[str] = None

  # --- config.json --------------------------------------------------------

  @classmethod
  def from_json(cls, doc: Any, where: str = 'config.json') -> 'RunConfig':
    """The RunConfig of a config.json object, its fields' types checked.

    Args:
      doc: the parsed JSON.
      where: the file's path, for messages.

    Raises:
      ValueError: naming the file and the field that is missing or wrong (a
        hand-edited file), never a bare KeyError.
    """
    if not isinstance(doc, dict):
      raise ValueError(f'{where} must hold a JSON object (a roxie run\'s '
                       f'settings), not a {type(doc).__name__}.')
    for name, kind in _JSON_TYPES + _JSON_OPTIONAL_TYPES:
      if name not in doc:
        if (name, kind) in _JSON_TYPES:
          raise ValueError(f'{where} has no {name!r} field (edited by '
                           'hand?); a roxie run needs it.')
        continue
      value = doc[name]
      if name in ('env_options', 'num_devices') and value is None:
        continue
      if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f'{where}: field {name!r} must be a JSON '
                         f'{"integer" if kind is int else kind.__name__}, '
                         f'got {value!r}.')
      low = {'seed': None, 'steps': 0}.get(name, 1)
      if kind is int and low is not None and value < low:
        raise ValueError(f'{where}: field {name!r} must be >= {low}, got '
                         f'{value}.')
    if doc['backend'] not in ('cpu', 'mjx'):
      raise ValueError(f"{where}: field 'backend' must be 'cpu' or 'mjx', "
                       f"got {doc['backend']!r}.")
    schedule = doc.get('resolution_schedule')
    if schedule is not None:
      schedule = tuple(tuple(int(x) for x in stage) for stage in schedule)
    optional_int = lambda name: (None if doc.get(name) is None
                                 else int(doc[name]))
    return cls(
        agent=doc['agent'], task=doc['task'], backend=doc['backend'],
        num_envs=doc['num_envs'], steps=doc['steps'], seed=doc['seed'],
        config=doc['config'], env_options=doc.get('env_options'),
        eval_every=doc.get('eval_every'),
        eval_episodes=doc.get('eval_episodes'),
        iterations_per_call=doc.get('iterations_per_call'),
        env_steps_per_iteration=optional_int('env_steps_per_iteration'),
        resolution_schedule=schedule, num_devices=doc.get('num_devices'),
        num_processes=optional_int('num_processes'),
        checkpoint_contents=doc.get('checkpoint_contents'))

  def to_json(self) -> Dict[str, Any]:
    """config.json's object: the fields in their order, None ones left out."""
    doc = {'agent': self.agent, 'task': self.task, 'backend': self.backend,
           'num_envs': self.num_envs, 'steps': self.steps, 'seed': self.seed,
           'env_options': _plain(self.env_options),
           'config': _plain(self.config)}
    if self.env_options is None:
      del doc['env_options']
    optional = (('eval_every', self.eval_every),
                ('eval_episodes', self.eval_episodes),
                ('iterations_per_call', self.iterations_per_call),
                ('env_steps_per_iteration', self.env_steps_per_iteration),
                ('resolution_schedule', _plain(self.resolution_schedule)),
                ('num_devices', self.num_devices),
                ('num_processes', self.num_processes),
                ('checkpoint_contents', self.checkpoint_contents))
    doc.update((k, v) for k, v in optional if v is not None)
    return doc

  def identity(self) -> Dict[str, Any]:
    """What a checkpoint records of the run it belongs to (JSON)."""
    return {'agent': self.agent, 'task': self.task, 'backend': self.backend,
            'num_envs': self.num_envs, 'seed': self.seed,
            'env_options': _plain(self.env_options),
            'config': _plain(self.config),
            'resolution_schedule': _plain(self.resolution_schedule)}

  def missing_run_fields(self) -> List[str]:
    """The fields a resume needs that an older config.json lacks."""
    return [name for name, value in (
        ('env_options', self.env_options), ('eval_every', self.eval_every),
        ('eval_episodes', self.eval_episodes),
        ('iterations_per_call', self.iterations_per_call)) if value is None]

  def program_key(self) -> str:
    """Settings that make the same envs and programs (all but the seed)."""
    return json.dumps(dict(self.identity(), seed=None,
                           resolution_schedule=None,
                           eval_every=self.eval_every,
                           eval_episodes=self.eval_episodes,
                           iterations_per_call=self.iterations_per_call,
                           num_devices=self.num_devices),
                      sort_keys=True, default=str)

  # --- what the fields mean -------------------------------------------------

  def agent_module(self):
    """The recipe module (or a user agent's) named by `agent`."""
    return _agent_module(self.agent)

  def agent_config(self) -> Any:
    """The agent's Config dataclass built from `config`."""
    return config_lib.from_dict(self.agent_module().Config, dict(self.config))

  def env_kwargs(self, backend: Optional[str] = None) -> Dict[str, Any]:
    """Keyword arguments of `roxie.envs.make` for the training envs.

    With `backend` (another than the run's): those that fit it.
    """
    return env_kwargs(self.env_options, backend)

  @property
  def action_repeat(self) -> int:
    """Control steps per agent step."""
    return _action_repeat(self.env_options or {})

  @property
  def pixels(self) -> Optional[Mapping[str, Any]]:
    """The PixelSpec fields of a run from pixels (None: the state vector)."""
    return (self.env_options or {}).get('pixels')

  @property
  def resolution(self) -> Optional[Tuple[int, int]]:
    """(height, width) of a run from pixels (None: the state vector)."""
    pixels = self.pixels
    return None if not pixels else (int(pixels['height']),
                                     int(pixels['width']))

  @property
  def devices(self) -> int:
    return int(self.num_devices or 1)

  @property
  def processes(self) -> int:
    return int(self.num_processes or 1)

  @property
  def agent_only(self) -> bool:
    """Whether checkpoints hold the agent state only (multi-process)."""
    return self.checkpoint_contents == AGENT_ONLY

  def with_pixel_size(self, height: int, width: int) -> 'RunConfig':
    """This run with frames of another size (a resolution schedule stage)."""
    options = dict(self.env_options or {})
    options['pixels'] = dict(options['pixels'], height=int(height),
                             width=int(width))
    return dataclasses.replace(self, env_options=options)


# The fields of config.json every run has, with their JSON types.
_JSON_TYPES = (('agent', str), ('task', str), ('backend', str),
               ('num_envs', int), ('steps', int), ('seed', int),
               ('config', dict))
_JSON_OPTIONAL_TYPES = (('env_options', dict), ('eval_every', int),
                        ('eval_episodes', int), ('iterations_per_call', int),
                        ('num_devices', int))


def _plain(value: Any) -> Any:
  """A JSON-ready copy: tuples become lists, mappings dicts."""
  if value is None:
    return None
  return json.loads(json.dumps(value))


def as_run_config(run: Any) -> RunConfig:
  """A RunConfig, or config.json's object (the dict callers used before)."""
  return run if isinstance(run, RunConfig) else RunConfig.from_json(run)


def load_run_config(run_dir: str):
  """Reads a run directory: (RunConfig, recipe module, Config), checked.

  Raises:
    FileNotFoundError: no config.json.
    ValueError: naming the file and the field that is missing or wrong.
  """
  path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f'{run_dir} is not a roxie run: no {CONFIG_FILE}.')
  try:
    with open(path) as f:
      doc = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f'{path} is not valid JSON ({e}).') from e
  run = RunConfig.from_json(doc, path)
  module, cfg = _check_agent(run, path)
  return run, module, cfg


def load_run(run_dir: str):
  """Reads a run directory: (config.json's object, recipe module, Config)."""
  run, module, cfg = load_run_config(run_dir)
  return run.to_json(), module, cfg


def _check_agent(run: RunConfig, path: str):
  """(recipe module, Config) of a run, checked against its config.json.

  Raises:
    ValueError: naming the file and the field that is wrong.
  """
  try:
    module = run.agent_module()
  except KeyError as e:
    raise ValueError(f"{path}: field 'agent': {e.args[0]}") from None
  try:
    cfg = config_lib.from_dict(module.Config, dict(run.config))
  except config_lib.ConfigError as e:
    unknown = str(e).split(': ', 1)[-1]
    raise ValueError(
        f"{path}: field 'config' has entries that agent {run.agent!r} "
        f'does not have ({unknown.rstrip(".")}); was \'agent\' or '
        '\'config\' edited? They must be those that trained the run.'
    ) from None
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: field 'config' does not build "
                     f"{run.agent}'s Config ({e}).") from None
  try:
    config_lib.validate(cfg, num_envs=run.num_envs,
                        where=f"{path} field 'config'")
  except config_lib.ConfigError as e:
    raise ValueError(str(e)) from None
  return module, cfg


def run_differences(run: Any, given: Mapping[str, Any]) -> List[str]:
  """What in `given` (run fields, or config overrides) differs from a run.

  Args:
    run: the run's RunConfig (or config.json's object).
    given: RunConfig fields as `train` takes them (agent, task, backend,
      num_envs, seed, eval_every, eval_episodes, env_options) and/or
      'overrides', a mapping of config fields (values may be strings, as
      from `--set`).

  Returns:
    One line per difference, e.g. "agent: the run has 'sac', asked for
    'td3'"; empty if everything given matches.
  """
  run = as_run_config(run)
  diffs = []
  for key, value in given.items():
    if value is None:
      continue
    if key == 'overrides':
      settings, fields = split_overrides(value)
      saved = run.agent_config()
      asked = config_lib.to_dict(config_lib.apply_overrides(saved, fields))
      have = config_lib.to_dict(saved)
      for field in fields:
        field = field.rsplit('.', 1)[-1]  # pixels.encoder_pooling: flat key.
        if asked[field] != have[field]:
          diffs.append(f'config {field}: the run has {have[field]!r}, asked '
                       f'for {asked[field]!r}')
      ran = RunDefaults(num_envs=run.num_envs, total_steps=run.steps,
                        action_repeat=run.action_repeat)
      asked = config_lib.apply_overrides(ran, settings)
      for field in settings:
        if getattr(asked, field) != getattr(ran, field):
          diffs.append(f'{field}: the run has {getattr(ran, field)!r}, asked '
                       f'for {getattr(asked, field)!r}')
    elif key == 'env_options':
      have = dict(run.env_options or {})
      for k, v in value.items():
        if have.get(k) != v:
          diffs.append(f'{k}: the run has {have.get(k)!r}, asked for {v!r}')
    else:
      have = getattr(run, key)
      if key == 'eval_every' and run.env_steps_per_iteration:
        # Saved rounded up to whole iterations (see `whole_iterations`).
        value = whole_iterations(value, run.env_steps_per_iteration)
      if isinstance(value, str) and isinstance(have, str):
        same = value.lower() == have.lower()
      else:
        same = value == have
      if not same:
        diffs.append(f'{key}: the run has {have!r}, asked for {value!r}')
  return diffs


def _action_repeat(env_options: Mapping[str, Any]) -> int:
  """Control steps per agent step under these env options."""
  return int(env_options.get('action_repeat', 1))


OBS_CHOICES = ('state', 'pixels', 'pixels+state')


def pixel_options(obs: str = 'pixels', *, resolution: Tuple[int, int] = (64, 64),
                  camera: Any = 0, frame_stack: int = 3, render_every: int = 1,
                  depth: bool = False,
                  renderer: str = 'host') -> Optional[Dict[str, Any]]:
  """env_options['pixels'] for `roxie train --obs OBS` (None for 'state').

  Args:
    obs: 'state' (the flat state vector, no rendering), 'pixels' (camera
      frames only) or 'pixels+state' (frames and the state vector).
    resolution: (height, width) of the frames.
    camera: camera id or name of the task's model.
    frame_stack: frames stacked per observation.
    render_every: render every this many agent steps (the last frame is held
      in between).
    depth: also a depth image.
    renderer: `roxie.envs.PixelSpec.renderer` ('host', 'warp' or 'auto').

  Raises:
    ValueError: an unknown `obs` or renderer, or a bad size.
  """
  if obs not in OBS_CHOICES:
    raise ValueError(f'Unknown observation kind {obs!r}; choose one of '
                     f'{", ".join(OBS_CHOICES)}.')
  if obs == 'state':
    return None
  from roxie.envs.pixels import RENDERERS  # pylint: disable=g-import-not-at-top
  if renderer not in RENDERERS:
    raise ValueError(f'Unknown renderer {renderer!r}; choose one of '
                     f'{", ".join(RENDERERS)}.')
  height, width = (int(d) for d in resolution)
  for name, value in (('resolution', min(height, width)),
                      ('frame_stack', frame_stack),
                      ('render_every', render_every)):
    if int(value) < 1:
      raise ValueError(f'{name} must be >= 1, got {value}.')
  if isinstance(camera, str) and camera.lstrip('-').isdigit():
    camera = int(camera)
  return {'height': height, 'width': width, 'camera': camera, 'rgb': True,
          'depth': bool(depth), 'frame_stack': int(frame_stack),
          'render_every': int(render_every), 'state': obs == 'pixels+state',
          **({} if renderer == 'host' else {'renderer': renderer})}


# env_options that choose how MJX simulates (the task, its observations and
# rewards are the same on either backend): left out where a run's policy is
# evaluated or exported on the native backend.
MJX_ONLY_OPTIONS = ('impl', 'naconmax', 'njmax')


def env_kwargs(env_options: Optional[Mapping[str, Any]],
               backend: Optional[str] = None) -> Dict[str, Any]:
  """Keyword arguments for `roxie.envs.make` from a run's env_options.

  env_options are JSON (config.json); a 'pixels' entry (a dict) becomes a
  `roxie.envs.PixelSpec`. For `backend` 'cpu' the MJX-only options
  (`MJX_ONLY_OPTIONS`, e.g. impl 'warp') are left out.
  """
  kwargs = dict(env_options or {})
  if backend == 'cpu':
    kwargs = {k: v for k, v in kwargs.items() if k not in MJX_ONLY_OPTIONS}
  pixels = kwargs.get('pixels')
  if pixels is not None and not dataclasses.is_dataclass(pixels):
    from roxie.envs.pixels import PixelSpec  # pylint: disable=g-import-not-at-top
    fields = dict(pixels)
    for key in ('sensors', 'depth_range'):
      if isinstance(fields.get(key), list):
        fields[key] = tuple(fields[key])
    kwargs['pixels'] = PixelSpec(**fields)
  return kwargs


def pixel_agents() -> Tuple[str, ...]:
  """The recipes that train from pixels (those with `PIXEL_DEFAULTS`)."""
  from roxie import agents  # pylint: disable=g-import-not-at-top
  return tuple(a for a in agents.AGENTS
               if getattr(_agent_module(a), 'PIXEL_DEFAULTS', None) is not None)


def check_pixel_agent(agent: str) -> None:
  """Raises RunError unless `agent` trains from pixel observations."""
  if getattr(_agent_module(agent), 'PIXEL_DEFAULTS', None) is not None:
    return
  why = (' PPO trains from the state vector only (its networks take a flat '
         'observation and it has no pixel encoder).' if agent == 'ppo' else
         f' {agent} has no pixel encoder yet.')
  raise RunError(f'{agent} cannot train from pixels.{why} Agents that can: '
                 f'{", ".join(pixel_agents())}; or use --obs state.')


def pixel_defaults(agent: str) -> Dict[str, Any]:
  """The config changes a run from pixels starts from (`--set` wins)."""
  check_pixel_agent(agent)
  return dict(_agent_module(agent).PIXEL_DEFAULTS)


def whole_iterations(env_steps: int, per_iteration: int) -> int:
  """`env_steps` rounded up to whole iterations of `per_iteration` env steps."""
  return -(-int(env_steps) // int(per_iteration)) * int(per_iteration)


def _rounding_notes(run: RunConfig, eval_every: Optional[int],
                    total: int) -> List[str]:
  """Notes on the env steps and evaluation points rounded to iterations."""
  per_iter = int(run.env_steps_per_iteration or 0)
  if not per_iter:
    return []
  unit = (f'whole iterations of {per_iter:,} env steps (num_envs x '
          'steps per iteration x action repeat)')
  notes = []
  if whole_iterations(total, per_iter) != total:
    notes.append(f'note: training {whole_iterations(total, per_iter):,} env '
                 f'steps: {total:,} rounded up to {unit}.')
  if eval_every and int(run.eval_every) != int(eval_every):
    notes.append(f'note: evaluating every {int(run.eval_every):,} env '
                 f'steps: {int(eval_every):,} rounded up to {unit}.')
  return notes


def _new_run_meta(agent, task, backend, num_envs, steps, seed, overrides,
                  eval_every, eval_episodes, env_options, checkpoint_every,
                  resolution_schedule=None) -> Dict[str, Any]:
  """config.json's object of a new run (see `new_run_config`)."""
  return new_run_config(agent, task, backend, num_envs, steps, seed, overrides,
                        eval_every, eval_episodes, env_options,
                        checkpoint_every, resolution_schedule).to_json()


def new_run_config(agent: str, task: str, backend: str,
                   num_envs: Optional[int], steps: Optional[int], seed: int,
                   overrides: Optional[Mapping[str, Any]],
                   eval_every: Optional[int], eval_episodes: int,
                   env_options: Optional[Mapping[str, Any]],
                   checkpoint_every: Optional[int],
                   resolution_schedule: Optional[Any] = None) -> RunConfig:
  """The RunConfig of a new run, resolved from `train`'s arguments.

  The agent's Config with the overrides applied (and checked) supplies
  what is not given; eval_every is rounded up to whole iterations and the
  iterations per call follow from it and checkpoint_every.

  It stays one function: each setting is resolved from the ones before it
  (the action repeat from the config and the task table, the steps per
  iteration from the recipe built with them, eval_every from those), so the
  chain reads top to bottom in the order the checks raise.

  Raises:
    RunError, roxie.config.ConfigError: settings that do not make a run.
  """
  from roxie.run.schedules import check_resolution_schedule, check_schedule_pooling  # pylint: disable=g-import-not-at-top
  module, cfg = resolve_config(agent, overrides or {})
  defaults = resolve_run_defaults(module, overrides or {})
  for name, value in (('num_envs', num_envs), ('steps', steps),
                      ('eval_every', eval_every),
                      ('eval_episodes', eval_episodes),
                      ('checkpoint_every', checkpoint_every)):
    if value is not None and (isinstance(value, bool) or not isinstance(
        value, (int, np.integer)) or value < 1):
      raise RunError(f'{name} must be an integer >= 1, got {value!r}.')
  num_envs = int(num_envs or defaults.num_envs)
  total = int(steps if steps is not None else defaults.total_steps)
  config_lib.validate(cfg)  # Its own fields, then with the run's num_envs.
  config_lib.validate(cfg, num_envs=num_envs)
  env_options = dict(env_options or {})
  if env_options.get('pixels') is not None:
    check_pixel_agent(agent)
  if resolution_schedule is not None:
    if env_options.get('pixels') is None:
      raise RunError('A resolution schedule needs pixel observations '
                     '(--obs pixels or pixels+state).')
    if jax.process_count() > 1:
      raise RunError('A resolution schedule is not supported in a '
                     'multi-process job (its replay is not gathered to be '
                     'resized).')
    try:
      resolution_schedule = check_resolution_schedule(resolution_schedule)
    except ValueError as e:
      raise RunError(str(e)) from None
    check_schedule_pooling(agent, cfg)
    # The first stage's size is the run's env_options['pixels'] size.
    _, height, width = resolution_schedule[0]
    env_options['pixels'] = dict(env_options['pixels'], height=height,
                                 width=width)
  # The DeepMind Control benchmarks' action repeat per task
  # (`envs.tasks.ACTION_REPEAT`, PlaNet's table) is every recipe's default
  # on the tasks it lists; `--set action_repeat=N` (an override) or an
  # explicit env option wins. Elsewhere the recipe's run defaults may ask
  # for one (SAC's do). Env steps count control steps either way.
  table = envs.tasks.ACTION_REPEAT.get(task)
  if (table is not None and 'action_repeat' not in (overrides or {})
      and 'action_repeat' not in env_options):
    env_options['action_repeat'] = table
  elif defaults.action_repeat != 1:
    env_options.setdefault('action_repeat', int(defaults.action_repeat))
  # The per-iteration step count needs the recipe, which needs the spec.
  try:
    spec_env = envs.make(task, backend=backend, num_envs=1,
                         **env_kwargs(env_options))
    recipe = module.make(cfg, spec_env.spec)
  except (TypeError, ValueError) as e:
    if isinstance(e, (RunError, config_lib.ConfigError)):
      raise
    raise RunError(f'This run cannot be built with these settings: {e}'
                   ) from None
  per_iter = loops.env_steps_per_iteration(recipe, num_envs) * _action_repeat(
      env_options)
  # Evaluations fall on whole iterations (all envs step together, each
  # action repeated): eval_every is rounded up to a multiple of them.
  eval_every = whole_iterations(int(eval_every or max(per_iter, total // 10)),
                                per_iter)
  chunk = min(eval_every, int(checkpoint_every or eval_every))
  iterations = max(1, min(chunk // per_iter, _MAX_ITERATIONS_PER_CALL))
  return RunConfig(
      agent=agent, task=task, backend=backend, num_envs=num_envs,
      steps=total, seed=int(seed), config=config_json(cfg),
      env_options=env_options, eval_every=eval_every,
      eval_episodes=int(eval_episodes), iterations_per_call=iterations,
      env_steps_per_iteration=per_iter,
      resolution_schedule=(None if resolution_schedule is None else tuple(
          tuple(stage) for stage in resolution_schedule)))


AGENT_ONLY = 'agent'  # checkpoint_contents of a multi-process run.


def check_resumable(run: Any, run_dir: str) -> None:
  """Raises RunError for a run that cannot be resumed (multi-process).

  Args:
    run: its RunConfig (or config.json's object).
    run_dir: its directory, for the message.
  """
  run = as_run_config(run)
  procs = run.processes
  if procs > 1 or run.agent_only:
    raise RunError(
        f'{run_dir} was trained by a multi-process job ({procs} processes): '
        'its checkpoints hold the agent state only (the environment and '
        'replay state were sharded across the processes and not gathered), '
        'so it cannot be resumed. Its policy can still be evaluated, played '
        f'and exported (roxie eval/play/export --run {run_dir}); to train '
        'on, start a new run.')


def _check_positive(**values) -> None:
  for name, value in values.items():
    if value is not None and int(value) < 1:
      raise ValueError(f'{name} must be >= 1, got {value}.')

