"""Typed overrides of recipe config dataclasses (`--set field=value`).

Sub-configs. A field whose annotation is itself a dataclass (the recipes'
`pixels: networks.PixelConfig`) groups settings in Python, but its fields
are addressed by their own names everywhere text is involved: `--set
encoder_pooling=mean` (or `--set pixels.encoder_pooling=mean`), the flat
keys of config.json (`to_dict` / `from_dict`, the layout roxie has always
written), validation messages. So sub-config field names must not clash
with the parent's (`sub_configs` checks).

`validate(config)` checks a recipe Config's values: each field's type from
the dataclass annotations, the ranges of `RULES` (by field name, so one
table serves every recipe, including user recipes that reuse the names),
and the few relations between fields (`replay_capacity` against the batch
and what one iteration writes, PPO's minibatch divisibility, ordered
pairs). The run layer calls it before anything is written.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import typing
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple


class ConfigError(ValueError):
  """A configuration key or value that does not fit the config dataclass."""


def _parse(value: str, kind: Any, name: str) -> Any:
  origin = typing.get_origin(kind)
  args = typing.get_args(kind)
  if origin is typing.Union:  # Optional[X]
    non_none = [a for a in args if a is not type(None)]
    if value.lower() in ('none', 'null'):
      return None
    return _parse(value, non_none[0], name)
  if origin in (tuple, list):
    elem = args[0] if args else str
    parts = [p for p in value.replace('(', '').replace(')', '').split(',')
             if p.strip()]
    return tuple(_parse(p.strip(), elem, name) for p in parts)
  try:
    if kind is bool:
      low = value.lower()
      if low in ('1', 'true', 'yes', 'on'):
        return True
      if low in ('0', 'false', 'no', 'off'):
        return False
      raise ValueError(value)
    if kind is int:
      f = float(value)
      if not f.is_integer():
        raise ValueError(value)
      return int(f)
    if kind is float:
      return float(value)
    if kind is str:
      return value
  except ValueError:
    raise ConfigError(
        f'Bad value {value!r} for {name}: expected {getattr(kind, "__name__", kind)}.'
    ) from None
  raise ConfigError(f'{name} has type {kind}, which cannot be set from text.')


def parse_overrides(items: Iterable[str]) -> Dict[str, str]:
  """['a=1', 'b=x'] -> {'a': '1', 'b': 'x'}, with clear errors."""
  out: Dict[str, str] = {}
  for item in items:
    if '=' not in item:
      raise ConfigError(f'Override {item!r} is not of the form field=value.')
    key, value = item.split('=', 1)
    out[key.strip()] = value.strip()
  return out


def sub_configs(config_or_cls: Any) -> Dict[str, type]:
  """{field name: dataclass} of the fields of a config that are sub-configs.

  A field annotated with a dataclass type (or Optional of one) is a
  sub-config; its fields share the parent's flat namespace (module
  docstring), so a name in both is refused here.
  """
  cls = (config_or_cls if isinstance(config_or_cls, type)
         else type(config_or_cls))
  hints = typing.get_type_hints(cls)
  out: Dict[str, type] = {}
  for f in dataclasses.fields(cls):
    kind = hints.get(f.name)
    if typing.get_origin(kind) is typing.Union:
      non_none = [a for a in typing.get_args(kind) if a is not type(None)]
      kind = non_none[0] if len(non_none) == 1 else None
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
      out[f.name] = kind
  if out:
    names = {f.name for f in dataclasses.fields(cls)}
    for sub, sub_cls in out.items():
      clash = names & {f.name for f in dataclasses.fields(sub_cls)}
      if clash:
        raise TypeError(
            f'{cls.__qualname__}.{sub} ({sub_cls.__qualname__}) has fields '
            f'named like {cls.__qualname__}\'s own: {", ".join(sorted(clash))}'
            '. Sub-config fields share the flat names of --set and '
            'config.json; rename them.')
  return out


def _sub_field_owner(config: Any, key: str) -> Optional[Tuple[str, str]]:
  """(sub-config field, its field) that the override `key` names, if any."""
  subs = sub_configs(config)
  if '.' in key:
    sub, name = key.split('.', 1)
    if sub in subs and name in {f.name for f in dataclasses.fields(subs[sub])}:
      return sub, name
    return None
  for sub, sub_cls in subs.items():
    if key in {f.name for f in dataclasses.fields(sub_cls)}:
      return sub, key
  return None


def field_names(config: Any) -> List[str]:
  """Every name `--set` takes for `config`: its fields, sub-configs' inlined."""
  subs = sub_configs(config)
  out = []
  for f in dataclasses.fields(config):
    if f.name in subs:
      out.extend(g.name for g in dataclasses.fields(subs[f.name]))
    else:
      out.append(f.name)
  return out


def apply_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
  """A copy of the dataclass `config` with fields replaced.

  String values are parsed by the field's annotated type; other values are
  checked against it. A sub-config's field is named by its own name (or
  `sub.name`). Unknown fields raise a `ConfigError` naming the valid ones.
  """
  fields = {f.name: f for f in dataclasses.fields(config)}
  subs = sub_configs(config)
  hints = typing.get_type_hints(type(config))
  changes = {}
  nested: Dict[str, Dict[str, Any]] = {}
  for key, value in overrides.items():
    owner = None if key in fields and key not in subs else _sub_field_owner(
        config, key)
    if owner is not None:
      nested.setdefault(owner[0], {})[owner[1]] = value
      continue
    if key in subs and isinstance(value, str):
      raise ConfigError(
          f'{key} is a group of settings; set its fields one by one: '
          + ', '.join(f'{g.name}=...' for g in dataclasses.fields(subs[key]))
          + '.')
    if key not in fields:
      names = field_names(config)
      close = difflib.get_close_matches(key, names, n=3)
      hint = f' Did you mean {", ".join(close)}?' if close else ''
      raise ConfigError(
          f'Unknown config field {key!r} for {type(config).__qualname__}.{hint} '
          f'Fields: {", ".join(sorted(names))}.')
    kind = hints[key]
    if isinstance(value, str):
      changes[key] = _parse(value, kind, key)
    else:
      changes[key] = value
  for sub, values in nested.items():
    current = changes.get(sub, getattr(config, sub))
    if current is None:
      current = subs[sub]()
    changes[sub] = apply_overrides(current, values)
  return dataclasses.replace(config, **changes)


def to_dict(config: Any) -> Dict[str, Any]:
  """A JSON-friendly dict of a config dataclass (sub-configs inlined, flat)."""
  subs = sub_configs(config)
  out = {}
  for f in dataclasses.fields(config):
    v = getattr(config, f.name)
    if f.name in subs:
      if v is not None:
        out.update(to_dict(v))
      continue
    out[f.name] = list(v) if isinstance(v, tuple) else v
  return out


def from_dict(config_cls: Any, values: Mapping[str, Any]) -> Any:
  """Rebuilds a config dataclass from `to_dict` output.

  A sub-config's fields are read from the flat keys `to_dict` writes (a
  nested {sub: {...}} mapping is taken too); a sub-config none of whose
  fields is given keeps its default. Entries named as run settings
  (`roxie.types.RUN_SETTINGS`) that the dataclass has no field for are left
  out: written when roxie's Configs still declared them (config.json files,
  policy bundles), they are the run's, not the agent's. A field the class
  lists in `ABSENT_MEANS` (a mapping, field name -> value) and `values`
  lacks takes that value rather than the default: a field added later, or
  whose default changed, reads what runs written before it trained with.
  The mappings of the class and its bases are merged (a subclass's entry
  wins), so a recipe's own entries add to its base's.
  """
  from roxie.types import RUN_SETTINGS  # pylint: disable=g-import-not-at-top
  absent = {}
  for klass in reversed(config_cls.__mro__):
    absent.update(vars(klass).get('ABSENT_MEANS', {}))
  values = {**{k: v for k, v in absent.items() if k not in values}, **values}
  hints = typing.get_type_hints(config_cls)
  subs = sub_configs(config_cls)
  names = set(field_names(config_cls)) | {f.name for f in
                                          dataclasses.fields(config_cls)}
  values = {k: v for k, v in values.items()
            if k in names or k not in RUN_SETTINGS}
  kwargs = {}
  used = set()
  for f in dataclasses.fields(config_cls):
    if f.name in subs:
      sub_names = {g.name for g in dataclasses.fields(subs[f.name])}
      given = {k: v for k, v in values.items() if k in sub_names}
      used.update(given)
      if isinstance(values.get(f.name), Mapping):
        given.update(values[f.name])
        used.add(f.name)
      if given:
        kwargs[f.name] = from_dict(subs[f.name], given)
      continue
    if f.name in values:
      v = values[f.name]
      kind = hints[f.name]
      if typing.get_origin(kind) is tuple and isinstance(v, list):
        v = tuple(v)
      kwargs[f.name] = v
      used.add(f.name)
  unknown = set(values) - used
  if unknown:
    raise ConfigError(f'Unknown config fields for {config_cls.__qualname__}: '
                      f'{", ".join(sorted(unknown))}.')
  return config_cls(**kwargs)


# --- validation ------------------------------------------------------------------

# field name -> (predicate on the value, what it must be). None values of
# Optional fields are not checked here (None means "the default").
_POSITIVE_INTS = ('num_envs', 'total_steps', 'steps_per_iteration',
                  'updates_per_iteration', 'batch_size', 'replay_capacity',
                  'n_step', 'num_samples', 'rollout_length', 'num_epochs',
                  'num_minibatches', 'action_repeat', 'policy_delay',
                  'encoder_feature_size', 'noise_decay_updates',
                  'critic_width')
_NON_NEGATIVE = ('warmup_steps', 'target_update_period', 'augment_pad',
                 'critic_blocks',
                 'noise_start', 'noise_end', 'target_noise',
                 'target_noise_clip', 'entropy_coef', 'saturation_weight',
                 'saturation_threshold', 'action_penalty_epsilon')
_POSITIVE = ('actor_lr', 'critic_lr', 'alpha_lr', 'policy_lr', 'dual_lr',
             'learning_rate', 'max_grad_norm', 'init_alpha',
             'init_temperature', 'init_alpha_mean', 'init_alpha_std',
             'epsilon', 'epsilon_mean', 'epsilon_std', 'clip_epsilon',
             'value_clip_epsilon', 'target_kl', 'obs_clip')
_UNIT_OPEN_CLOSED = ('discount', 'tau', 'encoder_tau')  # in (0, 1]

RULES: Dict[str, Tuple[Callable[[Any], bool], str]] = {}
RULES.update({n: (lambda v: v >= 1, '>= 1') for n in _POSITIVE_INTS})
RULES.update({n: (lambda v: v >= 0, '>= 0') for n in _NON_NEGATIVE})
RULES.update({n: (lambda v: v > 0, '> 0') for n in _POSITIVE})
RULES.update({n: (lambda v: 0 < v <= 1, 'in (0, 1]')
              for n in _UNIT_OPEN_CLOSED})
RULES['gae_lambda'] = (lambda v: 0 <= v <= 1, 'in [0, 1]')
RULES['num_atoms'] = (lambda v: v >= 2, '>= 2')
# Sequences of sizes: non-empty, every entry a positive int.
_SIZE_TUPLES = ('hidden_sizes', 'encoder_channels', 'encoder_strides')
# (low, high) pairs that must be ordered.
_ORDERED_PAIRS = ('log_std_bounds', 'log_std_range')


def _type_name(kind: Any) -> str:
  return getattr(kind, '__name__', None) or str(kind).replace('typing.', '')


def _check_type(value: Any, kind: Any, name: str) -> List[str]:
  """Problems of `value` against the annotation `kind` (empty if it fits)."""
  origin = typing.get_origin(kind)
  args = typing.get_args(kind)
  if origin is typing.Union:
    if value is None and type(None) in args:
      return []
    non_none = [a for a in args if a is not type(None)]
    for a in non_none:
      if not _check_type(value, a, name):
        return []
    return [f'{name} must be {" or ".join(_type_name(a) for a in args)}, '
            f'got {value!r}']
  if origin in (tuple, list):
    if not isinstance(value, (tuple, list)):
      return [f'{name} must be a sequence, got {value!r}']
    if origin is tuple and args and args[-1] is not Ellipsis:
      if len(value) != len(args):
        return [f'{name} must have {len(args)} entries, got {value!r}']
      elems = args
    else:
      elems = (args[0] if args else Any,) * len(value)
    for i, (v, a) in enumerate(zip(value, elems)):
      problems = _check_type(v, a, f'{name}[{i}]')
      if problems:
        return problems
    return []
  if kind is Any:
    return []
  if kind is bool:
    ok = isinstance(value, (bool, np_bool_types()))
  elif kind is int:
    ok = (isinstance(value, numbers.Integral)
          and not isinstance(value, (bool, np_bool_types())))
  elif kind is float:
    ok = (isinstance(value, numbers.Real)
          and not isinstance(value, (bool, np_bool_types())))
    if ok and not math.isfinite(float(value)):
      return [f'{name} must be a finite number, got {value!r}']
  elif kind is str:
    ok = isinstance(value, str)
  elif isinstance(kind, type):
    ok = isinstance(value, kind)
  else:
    ok = True  # An annotation this checker does not know: trust it.
  if not ok:
    return [f'{name} must be {_type_name(kind)}, got {value!r} '
            f'({type(value).__name__})']
  return []


def np_bool_types() -> Tuple[type, ...]:
  try:
    import numpy as np  # pylint: disable=g-import-not-at-top
  except ImportError:
    return ()
  return (np.bool_,)


def problems(config: Any, *, num_envs: Optional[int] = None) -> List[str]:
  """Every problem `validate` would report, one line each (empty: valid)."""
  if not dataclasses.is_dataclass(config) or isinstance(config, type):
    raise TypeError(f'validate() takes a config dataclass instance, got '
                    f'{type(config).__name__}.')
  hints = typing.get_type_hints(type(config))
  subs = sub_configs(config)
  out = []
  values = {}
  for f in dataclasses.fields(config):
    value = getattr(config, f.name)
    values[f.name] = value
    found = _check_type(value, hints.get(f.name, Any), f.name)
    if found:
      out.extend(found)
      continue
    if value is None:
      continue
    if f.name in subs:  # Its fields by their own (flat) names.
      out.extend(problems(value))
      continue
    rule = RULES.get(f.name)
    if rule is not None and not rule[0](value):
      out.append(f'{f.name} must be {rule[1]}, got {value!r}')
    if f.name in _SIZE_TUPLES:
      if len(value) == 0:
        out.append(f'{f.name} must not be empty')
      elif any(int(v) < 1 for v in value):
        out.append(f'{f.name} must hold sizes >= 1, got {tuple(value)!r}')
    if f.name in _ORDERED_PAIRS and not value[0] < value[1]:
      out.append(f'{f.name} must be (low, high) with low < high, got '
                 f'{tuple(value)!r}')
  if out:
    return out
  # Relations between fields (only when each field is itself valid), and
  # with the run's number of envs where it is given.
  if num_envs is not None:
    values['num_envs'] = int(num_envs)
  get = values.get
  if get('critic_blocks') and get('layer_norm') is False:
    out.append(f'critic_blocks ({get("critic_blocks")}) makes a residual '
               'critic, LayerNorm-ed by construction: it needs '
               'layer_norm=True')
  if get('v_min') is not None and get('v_max') is not None:
    if not get('v_min') < get('v_max'):
      out.append(f'v_min ({get("v_min")}) must be below v_max '
                 f'({get("v_max")})')
  if get('replay_capacity') is not None:
    capacity = get('replay_capacity')
    if get('batch_size') is not None and capacity < get('batch_size'):
      out.append(f'replay_capacity ({capacity}) must be >= batch_size '
                 f'({get("batch_size")})')
    if get('num_envs') is not None:
      # The ring holds capacity // num_envs rows per env; an iteration
      # writes steps_per_iteration of them and an n-step window reads
      # n_step more.
      need = get('num_envs') * max(
          2, (get('steps_per_iteration') or 1) + (get('n_step') or 1))
      if capacity < need:
        out.append(f'replay_capacity ({capacity}) must be >= {need}: '
                   f'num_envs ({get("num_envs")}) x (steps_per_iteration + '
                   'n_step), what one iteration writes and reads')
  if (get('rollout_length') is not None and get('num_minibatches') is not None
      and get('num_envs') is not None):
    batch = get('rollout_length') * get('num_envs')
    if batch % get('num_minibatches'):
      out.append(f'num_minibatches ({get("num_minibatches")}) must divide '
                 f'rollout_length x num_envs ({get("rollout_length")} x '
                 f'{get("num_envs")} = {batch})')
  return out


def validate(config: Any, *, num_envs: Optional[int] = None,
             where: str = '') -> Any:
  """Checks a recipe Config's fields; returns it unchanged if valid.

  Types come from the dataclass annotations (an int field takes an int, a
  float field a finite number, Optional[X] also None, Tuple[int, ...] a
  sequence of ints); ranges from `RULES` and the size/pair tables, by field
  name; relations between fields last.

  Args:
    config: a recipe Config instance (e.g. `roxie.agents.sac.Config()`).
    num_envs: the run's parallel envs, for the relations that depend on it
      (the replay's capacity, PPO's minibatches); None: not checked.
    where: where the config comes from, prefixed to the message (e.g. a
      config.json path).

  Returns:
    `config`.

  Raises:
    ConfigError: naming every bad field, what it must be and what it is.
  """
  found = problems(config, num_envs=num_envs)
  if found:
    prefix = f'{where}: ' if where else ''
    module = type(config).__module__.rsplit('.', 1)[-1]
    raise ConfigError(f'{prefix}invalid {module}.{type(config).__qualname__}'
                      ': ' + '; '.join(found) + '.')
  return config
