"""Run settings (num_envs, total_steps, action_repeat) are not Config fields.

An agent's Config holds what its `make` reads; how a run uses it (how many
envs, how many env steps, the action repeat) is the recipe module's
`RUN_DEFAULTS` (`roxie.types.RunDefaults`), which the run layer reads and
`--set` still changes. Run folders written when those were Config fields
still load; user agents whose Config still declares them keep them as
their run defaults.
"""

import dataclasses
import types

import pytest

from roxie import agents
from roxie import config as config_lib
from roxie import run as run_lib
from roxie.types import RunDefaults

# The defaults each recipe had as Config fields, unchanged as run settings
# (but MPO's total_steps, 200k until it took the shared 4 updates a burst:
# its CartpoleSwingup passes 800 at 381k-461k env steps).
BEFORE = {'ddpg': (8, 200_000, 1), 'td3': (8, 200_000, 1),
          'd4pg': (8, 200_000, 1), 'td4': (8, 200_000, 1),
          'sac': (8, 150_000, 4), 'mpo': (8, 500_000, 1),
          'ppo': (16, 1_000_000, 1)}


def _new(agent, task='CartpoleBalance', overrides=None, num_envs=None,
         steps=None):
  return run_lib.new_run_config(agent, task, 'cpu', num_envs, steps, 0,
                                overrides, None, 10, None, None)


@pytest.mark.parametrize('agent', sorted(BEFORE))
def test_configs_hold_no_run_settings_and_the_defaults_are_unchanged(agent):
  module = agents.get_agent(agent)
  fields = {f.name for f in dataclasses.fields(module.Config)}
  assert not fields & set(run_lib.RUN_SETTINGS), agent
  assert run_lib.RUN_SETTINGS == ('num_envs', 'total_steps', 'action_repeat')
  defaults = module.RUN_DEFAULTS
  assert isinstance(defaults, RunDefaults)
  assert (defaults.num_envs, defaults.total_steps,
          defaults.action_repeat) == BEFORE[agent]
  run = _new(agent)  # CartpoleBalance is not in the task table.
  assert (run.num_envs, run.steps, run.action_repeat) == BEFORE[agent]
  assert not set(run.config) & set(run_lib.RUN_SETTINGS)


def test_set_changes_run_settings_and_config_json_records_them_once(tmp_path):
  run = _new('ppo', overrides={'num_envs': '4', 'total_steps': '2048',
                               'action_repeat': '2', 'learning_rate': '3e-4'})
  assert (run.num_envs, run.steps, run.action_repeat) == (4, 2048, 2)
  assert run.env_options == {'action_repeat': 2}  # PPO takes one now.
  assert run.config['learning_rate'] == 3e-4
  doc = run.to_json()
  assert not set(doc['config']) & set(run_lib.RUN_SETTINGS)
  # An explicit --num-envs / --steps wins over --set.
  run = _new('sac', overrides={'num_envs': 4, 'total_steps': 10_000},
             num_envs=2, steps=5_000)
  assert (run.num_envs, run.steps) == (2, 5_000)
  # What a resume compares: run settings asked with --set, against the run.
  assert run_lib.run_differences(run, {'overrides': {
      'num_envs': '3', 'action_repeat': '4', 'tau': '0.005'}}) == [
          'num_envs: the run has 2, asked for 3']
  # The validation that depends on the number of envs uses the run's.
  with pytest.raises(config_lib.ConfigError, match='must divide'):
    _new('ppo', overrides={'num_minibatches': '3'}, num_envs=16)


def test_bad_run_settings_are_refused_naming_them():
  with pytest.raises(config_lib.ConfigError, match='num_envs must be >= 1'):
    _new('sac', overrides={'num_envs': '0'})
  with pytest.raises(config_lib.ConfigError, match='expected int'):
    _new('sac', overrides={'action_repeat': '1.5'})
  with pytest.raises(config_lib.ConfigError,
                     match='Run settings \\(also --set\\): num_envs'):
    _new('sac', overrides={'num_env': '4'})


def test_a_config_json_or_bundle_that_had_them_as_config_fields_loads():
  run = _new('sac')
  doc = run.to_json()
  doc['config'] = dict(doc['config'], num_envs=run.num_envs,
                       total_steps=150_000, action_repeat=4)
  loaded = run_lib.RunConfig.from_json(doc)
  assert loaded.to_json() == doc  # Written back as it was (identity holds).
  assert loaded.agent_config() == run.agent_config()
  assert config_lib.from_dict(type(run.agent_config()), doc['config']) == (
      run.agent_config())
  # A field that never was one is still refused.
  with pytest.raises(config_lib.ConfigError, match='nope'):
    config_lib.from_dict(type(run.agent_config()), dict(doc['config'],
                                                        nope=1))


def _user_module(config_cls, **attrs):
  module = types.ModuleType('my_agent')
  module.Config = config_cls
  module.make = lambda config, spec: None
  module.__dict__.update(attrs)
  return module


def test_user_agents_run_defaults():
  @dataclasses.dataclass(frozen=True)
  class Legacy:  # Declares them as roxie's Configs used to.
    num_envs: int = 3
    total_steps: int = 999
    lr: float = 1e-3

  @dataclasses.dataclass(frozen=True)
  class Plain:
    lr: float = 1e-3

  assert run_lib.run_defaults(_user_module(Legacy)) == RunDefaults(
      num_envs=3, total_steps=999, action_repeat=1)
  assert run_lib.run_defaults(_user_module(Plain)) == RunDefaults()
  mine = RunDefaults(num_envs=2, total_steps=10, action_repeat=2)
  assert run_lib.run_defaults(_user_module(Plain, RUN_DEFAULTS=mine)) == mine
  with pytest.raises(run_lib.RunError, match='must be a roxie.types.RunDefaults'):
    run_lib.run_defaults(_user_module(Plain, RUN_DEFAULTS={'num_envs': 2}))
  assert run_lib.config_json(Legacy()) == {'lr': 1e-3}
