"""A user's own recipe gets the run tooling of the seven built-in ones.

`roxie train --agent path/to/file.py:make` (or a module, or a factory passed
to `roxie.run.train`) trains, checkpoints, resumes, evaluates and exports
exactly like `--agent sac`; the run records the agent by an absolute
SOURCE:FACTORY name, so every later command finds it again.
"""

import json
import os

import pytest

from roxie import agents
from roxie import cli
from roxie import export

EXAMPLES = os.path.abspath(
    os.path.join(os.path.dirname(__file__), '..', 'examples'))
REDQ = os.path.join(EXAMPLES, 'redq.py')
TINY = ('--task', 'CartpoleBalance', '--num-envs', '2', '--eval-every', '40',
        '--eval-episodes', '2', '--episode-length', '20',
        '--set', 'hidden_sizes=16,16', '--set', 'batch_size=16',
        '--set', 'warmup_steps=20', '--set', 'replay_capacity=64',
        '--set', 'num_critics=3', '--quiet')


def _cli(capsys, *argv):
  code = cli.main([str(a) for a in argv])
  out, err = capsys.readouterr()
  return code, out, err


def test_names_of_user_agents(monkeypatch):
  monkeypatch.chdir(EXAMPLES)
  assert agents.canonical_name('SAC') == 'sac'
  assert agents.canonical_name('redq.py') == f'{REDQ}:make'
  assert agents.canonical_name('redq.py:make') == f'{REDQ}:make'
  assert agents.canonical_name('mylab.crossq:build') == 'mylab.crossq:build'
  assert agents.short_name(f'{REDQ}:make') == 'redq'
  assert agents.short_name('mylab.crossq:build') == 'crossq-build'
  module = agents.get_agent(f'{REDQ}:make')
  # A loaded module and its factory name themselves the same way, and a
  # second load is the same module (same classes for train, then eval).
  assert agents.canonical_name(module) == f'{REDQ}:make'
  assert agents.canonical_name(module.make) == f'{REDQ}:make'
  assert agents.get_agent('redq.py') is module
  assert agents.canonical_name(agents.get_agent('td3')) == 'td3'


@pytest.mark.parametrize('name, message', [
    ('nope', 'Unknown agent'),
    ('missing.py:make', 'does not exist'),
    ('redq.py:build', r'must define a factory build\(config, env_spec\)'),
    ('new_agent.py:make', 'must define a Config dataclass'),
])
def test_bad_user_agents_name_the_problem(monkeypatch, name, message):
  monkeypatch.chdir(EXAMPLES)
  with pytest.raises(KeyError, match=message):
    agents.get_agent(agents.canonical_name(name))


def test_a_bad_agent_is_a_usage_error_and_writes_nothing(tmp_path, capsys):
  out = tmp_path / 'run'
  code, _, err = _cli(capsys, 'train', '--agent', tmp_path / 'none.py:make',
                      '--out', out, *TINY)
  assert code == 2 and 'does not exist' in err
  assert not out.exists()


def test_a_user_agent_trains_resumes_evaluates_and_exports(
    tmp_path, capsys, monkeypatch):
  out = tmp_path / 'run'
  monkeypatch.chdir(os.path.dirname(EXAMPLES))  # A relative name, as typed.
  code, _, err = _cli(capsys, 'train', '--agent', 'examples/redq.py:make',
                      '--steps', 40, '--out', out, *TINY)
  assert code == 0, err
  with open(out / 'config.json') as f:
    meta = json.load(f)
  assert meta['agent'] == f'{REDQ}:make'
  assert meta['config']['num_critics'] == 3  # The user's own Config field.
  # Resume extends it, from anywhere (the name is absolute).
  monkeypatch.chdir(tmp_path)
  code, _, err = _cli(capsys, 'train', '--resume', out, '--steps', 80, '--quiet')
  assert code == 0, err
  code, stdout, err = _cli(capsys, 'eval', '--run', out, '--episodes', 2)
  assert code == 0 and 'eval_return=' in stdout, err
  code, stdout, err = _cli(capsys, 'export', '--run', out, '--to',
                           tmp_path / 'bundle')
  assert code == 0, err
  policy = export.load_policy(str(tmp_path / 'bundle'))
  assert policy.name == 'CartpoleBalance-redq'
  assert policy.agent == f'{REDQ}:make'
