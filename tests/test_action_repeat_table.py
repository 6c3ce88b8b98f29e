"""The task table's action repeat is every recipe's default; --set wins.

Issue 13: one default configuration per recipe serves every state-based
task, and the only per-task setting is the action repeat, from one table
(`envs.tasks.ACTION_REPEAT`, PlaNet's values) that `roxie train` applies
unless `--set action_repeat=` (or an explicit env option) says otherwise.
"""

import pytest

from roxie import cli, envs
from roxie.run.config import new_run_config


def _resolve(agent, task, overrides=None, env_options=None):
  run = new_run_config(agent, task, 'cpu', None, 100_000, 0, overrides,
                       None, 10, env_options, None)
  return run


@pytest.mark.parametrize('agent', ['sac', 'td3', 'mpo', 'ppo'])
@pytest.mark.parametrize('task', ['CartpoleSwingup', 'FingerSpin',
                                  'CheetahRun'])
def test_listed_tasks_take_the_table_for_every_recipe(agent, task):
  run = _resolve(agent, task)
  want = envs.tasks.ACTION_REPEAT[task]
  assert run.env_options['action_repeat'] == want
  assert run.action_repeat == want
  assert 'action_repeat' not in run.config  # A run setting, recorded once.


def test_table_values_are_planets():
  # PlaNet (Hafner et al. 2019), as used by CURL / DrQ / SAC-AE.
  assert envs.tasks.ACTION_REPEAT == {
      'CartpoleSwingup': 8, 'ReacherEasy': 4, 'FingerSpin': 2,
      'CheetahRun': 4, 'WalkerWalk': 2, 'BallInCup': 4}


def test_an_override_or_env_option_wins_over_the_table():
  run = _resolve('sac', 'CartpoleSwingup', {'action_repeat': 4})
  assert run.env_options['action_repeat'] == 4
  assert run.action_repeat == 4
  assert run.env_steps_per_iteration == 8 * 1 * 4
  run = _resolve('ppo', 'CheetahRun', None, {'action_repeat': 1})
  assert run.env_options['action_repeat'] == 1


def test_unlisted_tasks_keep_the_recipes_own_default():
  assert _resolve('sac', 'CartpoleBalance').env_options == {
      'action_repeat': 4}  # SAC's CPU default.
  assert _resolve('td3', 'CartpoleBalance').action_repeat == 1
  assert _resolve('ppo', 'PendulumSwingup').action_repeat == 1


def test_physics_flag_reaches_env_options_only_when_not_the_default():
  parse = lambda *argv: cli._parser().parse_args(['train', *argv])
  assert cli._env_options(parse()) is None
  assert cli._env_options(parse('--physics', 'dm_control')) is None
  assert cli._env_options(parse('--physics', 'playground',
                                '--episode-length', '50')) == {
                                    'physics': 'playground',
                                    'episode_length': 50}
  with pytest.raises(SystemExit) as e:  # argparse: exit 2, names choices.
    parse('--physics', 'brax')
  assert e.value.code == 2
