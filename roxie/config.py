"""Typed overrides of recipe config dataclasses (`--set field=value`)."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Dict, Iterable, Mapping


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


def apply_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
  """A copy of the dataclass `config` with fields replaced.

  String values are parsed by the field's annotated type; other values are
  checked against it. Unknown fields raise a `ConfigError` naming the valid
  ones.
  """
  fields = {f.name: f for f in dataclasses.fields(config)}
  hints = typing.get_type_hints(type(config))
  changes = {}
  for key, value in overrides.items():
    if key not in fields:
      close = difflib.get_close_matches(key, fields, n=3)
      hint = f' Did you mean {", ".join(close)}?' if close else ''
      raise ConfigError(
          f'Unknown config field {key!r} for {type(config).__qualname__}.{hint} '
          f'Fields: {", ".join(sorted(fields))}.')
    kind = hints[key]
    if isinstance(value, str):
      changes[key] = _parse(value, kind, key)
    else:
      changes[key] = value
  return dataclasses.replace(config, **changes)


def to_dict(config: Any) -> Dict[str, Any]:
  """A JSON-friendly dict of a config dataclass."""
  out = {}
  for f in dataclasses.fields(config):
    v = getattr(config, f.name)
    out[f.name] = list(v) if isinstance(v, tuple) else v
  return out


def from_dict(config_cls: Any, values: Mapping[str, Any]) -> Any:
  """Rebuilds a config dataclass from `to_dict` output."""
  hints = typing.get_type_hints(config_cls)
  kwargs = {}
  for f in dataclasses.fields(config_cls):
    if f.name in values:
      v = values[f.name]
      kind = hints[f.name]
      if typing.get_origin(kind) is tuple and isinstance(v, list):
        v = tuple(v)
      kwargs[f.name] = v
  unknown = set(values) - set(kwargs)
  if unknown:
    raise ConfigError(f'Unknown config fields for {config_cls.__qualname__}: '
                      f'{", ".join(sorted(unknown))}.')
  return config_cls(**kwargs)
