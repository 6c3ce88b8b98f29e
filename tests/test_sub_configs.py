"""Recipe configs hold their pixel settings as a sub-config (`pixels`).

In Python the settings compose (`sac.Config(pixels=PixelConfig(...))`); on
the command line and in config.json they keep their flat names, so files
written before the change read back the same and `--set encoder_*` works.
"""

import dataclasses
import json
import os
from typing import Tuple

import pytest

from roxie import config as config_lib
from roxie import networks
from roxie import run
from roxie.agents import d4pg, mpo, ppo, sac
from roxie.types import RUN_SETTINGS

FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures',
                       'runs_before_runconfig', 'sac', 'config.json')


def _saved_config():
  with open(FIXTURE) as f:
    return json.load(f)['config']


def test_pixel_settings_are_a_field_not_a_base_class():
  for module in (sac, mpo, d4pg):
    assert not issubclass(module.Config, networks.PixelConfig)
    assert module.Config().pixels == networks.PixelConfig()
  assert config_lib.sub_configs(sac.Config) == {'pixels': networks.PixelConfig}
  assert config_lib.sub_configs(ppo.Config) == {}


def test_config_json_keeps_its_flat_keys_in_their_order():
  # The agent config of a run written before the change (as a base class,
  # PixelConfig's fields came first), less the run settings it then held.
  saved = {k: v for k, v in _saved_config().items() if k not in RUN_SETTINGS}
  cfg = config_lib.from_dict(sac.Config, saved)
  assert cfg.pixels == networks.PixelConfig()
  assert cfg.hidden_sizes == (16, 16) and cfg.replay_capacity == 64
  written = config_lib.to_dict(cfg)
  # Fields added since the fixture was written come back at their defaults
  # (a run that predates them ran without them), or at what the Config's
  # ABSENT_MEANS says their absence means (SAC's normalize_observations,
  # now True by default); the rest, in their order.
  added = {k: v for k, v in written.items() if k not in saved}
  assert added == {'critic_blocks': 0, 'critic_width': 512,
                   'normalize_observations': False, 'obs_clip': 10.}
  assert {k: v for k, v in written.items() if k in saved} == saved
  assert [k for k in written if k in saved] == list(saved)


def test_a_saved_pixel_setting_comes_back_in_the_sub_config():
  saved = dict(_saved_config(), encoder_pooling='mean', encoder_tau=0.1)
  cfg = config_lib.from_dict(sac.Config, saved)
  assert cfg.pixels.encoder_pooling == 'mean'
  assert cfg.pixels.encoder_tau == 0.1
  # A nested mapping is read too; a config.json without any pixel key (a
  # user recipe's, or written by hand) keeps the defaults.
  nested = config_lib.from_dict(
      sac.Config, {'pixels': {'augment_pad': 0}, 'tau': 0.01})
  assert nested.pixels.augment_pad == 0 and nested.tau == 0.01
  assert config_lib.from_dict(sac.Config, {}).pixels == networks.PixelConfig()
  with pytest.raises(config_lib.ConfigError, match='encoder_pool'):
    config_lib.from_dict(sac.Config, {'encoder_pool': 'mean'})


def test_overrides_name_pixel_fields_flat_or_dotted():
  cfg = config_lib.apply_overrides(
      sac.Config(), {'encoder_pooling': 'mean', 'pixels.augment_pad': '0',
                     'encoder_channels': '8,8', 'tau': '0.01'})
  assert cfg.pixels == networks.PixelConfig(
      encoder_channels=(8, 8), encoder_pooling='mean', augment_pad=0)
  assert cfg.tau == 0.01
  assert sac.Config().pixels.encoder_pooling == 'flatten'  # Not mutated.


def test_bad_pixel_overrides_say_what_to_write():
  with pytest.raises(config_lib.ConfigError,
                     match="Did you mean encoder_pooling"):
    config_lib.apply_overrides(sac.Config(), {'encoder_pool': 'mean'})
  with pytest.raises(config_lib.ConfigError,
                     match='set its fields one by one: encoder_channels='):
    config_lib.apply_overrides(sac.Config(), {'pixels': 'mean'})
  # Validation reports a sub-config's field by the name --set takes.
  bad = config_lib.apply_overrides(sac.Config(), {'encoder_tau': 2.0,
                                                  'encoder_channels': ()})
  found = config_lib.problems(bad)
  assert 'encoder_tau must be in (0, 1], got 2.0' in found
  assert 'encoder_channels must not be empty' in found


def test_a_sub_config_whose_names_clash_with_its_parent_is_refused():

  @dataclasses.dataclass(frozen=True)
  class Inner:
    tau: float = 0.1

  @dataclasses.dataclass(frozen=True)
  class Outer:
    tau: float = 0.005
    inner: Inner = dataclasses.field(default_factory=Inner)

  with pytest.raises(TypeError, match='Outer.inner .* tau'):
    config_lib.sub_configs(Outer)


def test_run_differences_compare_pixel_fields_by_their_flat_names():
  cfg = config_lib.from_dict(sac.Config, {
      k: v for k, v in _saved_config().items() if k not in RUN_SETTINGS})
  with open(FIXTURE) as f:
    saved = run.RunConfig.from_json(json.load(f))
  assert saved.agent_config() == cfg
  assert run.run_differences(saved, {'overrides': {
      'encoder_pooling': 'flatten'}}) == []
  diffs = run.run_differences(saved, {'overrides': {
      'pixels.encoder_pooling': 'mean'}})
  assert diffs == ["config encoder_pooling: the run has 'flatten', asked for "
                   "'mean'"]


def _float_names(cfg) -> Tuple[str, ...]:
  return tuple(f.name for f in dataclasses.fields(cfg)
               if isinstance(getattr(cfg, f.name), float))


def test_a_population_refuses_to_sweep_a_pixel_setting_by_name():
  from roxie.loops import population  # pylint: disable=g-import-not-at-top
  assert 'encoder_tau' not in population.sweepable_fields(sac.Config())
  assert set(_float_names(sac.Config())) <= set(
      population.sweepable_fields(sac.Config()))
  with pytest.raises(ValueError, match=r'encoder_tau \(of Config.pixels\) '
                     'cannot differ per member'):
    population.check_hparams(sac.Config(), {'encoder_tau': (0.05, 0.1)}, 2)


@dataclasses.dataclass(frozen=True)
class _Base:
  a: int = 0
  ABSENT_MEANS = {'a': 1}


@dataclasses.dataclass(frozen=True)
class _Recipe(_Base):
  a: int = 5  # The default changed; a saved config without it trained 1.
  b: int = 0
  ABSENT_MEANS = {'b': 2}


def test_absent_means_of_a_class_and_its_bases_are_merged():
  # A recipe's own entries add to its base's (off_policy.ReplayConfig's
  # normalize_observations beside MPO's dual_transform); given values win.
  assert config_lib.from_dict(_Recipe, {}) == _Recipe(a=1, b=2)
  assert config_lib.from_dict(_Recipe, {'a': 7}) == _Recipe(a=7, b=2)
  assert config_lib.from_dict(_Base, {}) == _Base(a=1)
  assert config_lib.from_dict(mpo.Config, {}).dual_transform == 'exp'
  for module in (sac, d4pg):
    assert config_lib.from_dict(module.Config,
                                {}).normalize_observations is False
