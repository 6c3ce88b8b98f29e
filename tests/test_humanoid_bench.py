"""benchmarks/humanoid.py: arguments, the --large mapping, refusals, the table.

No training here: the mapping is a pure function of each recipe's Config,
and HUMANOID.md is generated from small hand-made CSVs.
"""

import dataclasses
import json
import os
import sys

import pytest

from roxie import agents
from roxie import config as config_lib
from roxie import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import dmc  # pylint: disable=g-import-not-at-top,wrong-import-position
import humanoid  # pylint: disable=g-import-not-at-top,wrong-import-position


def _paths(tmp_path):
  return ['--results', str(tmp_path / 'h.csv'), '--curves',
          str(tmp_path / 'hc.csv'), '--runs', str(tmp_path / 'runs')]


def test_defaults_and_seed_forms(tmp_path):
  args = humanoid.parse_args(_paths(tmp_path))
  assert args.agents == ['sac'] and args.backend == 'cpu'
  assert args.tasks == ['HumanoidStand', 'HumanoidWalk', 'HumanoidRun']
  assert args.seeds == [0] and args.variant == 'default'
  # SAC's CPU default repeats actions 4 times; the humanoid acts at every
  # control step (the task table's 1), as the release did.
  assert args.settings == {'sac': {'action_repeat': '1'}}
  assert humanoid.parse_args(['--seeds', '3'] + _paths(tmp_path)).seeds == [
      0, 1, 2]
  assert humanoid.parse_args(['--seeds', '3,5'] + _paths(tmp_path)).seeds == [
      3, 5]
  args = humanoid.parse_args(['--large', '--backend', 'mjx', '--agents',
                              'ppo,td4', '--tasks', 'HumanoidRun']
                             + _paths(tmp_path))
  assert args.variant == 'large' and humanoid.variant_label(args) == (
      'large-mjx')
  # The task's action repeat is a run setting every agent takes.
  assert args.settings['ppo']['action_repeat'] == '1'
  assert humanoid.split_variant('my-run-mjx') == ('my-run', 'mjx')


OFF_POLICY_LARGE = dict(num_envs=1024, batch_size=512, steps_per_iteration=2,
                        updates_per_iteration=20, n_step=5,
                        replay_capacity=500_000, warmup_steps=10_000,
                        hidden_sizes=(256, 256), layer_norm=True,
                        max_grad_norm=1.0, discount=0.99, tau=0.005,
                        critic_lr=3e-4)
EXPECTED = {
    'ddpg': dict(OFF_POLICY_LARGE, actor_lr=3e-4, noise_start=0.4,
                 noise_end=0.1),
    'td3': dict(OFF_POLICY_LARGE, actor_lr=3e-4, noise_start=0.4,
                noise_end=0.1, target_noise=0.2, target_noise_clip=0.5,
                policy_delay=2),
    'd4pg': dict(OFF_POLICY_LARGE, actor_lr=3e-4, noise_start=0.4,
                 noise_end=0.1, num_atoms=101, v_min=-5., v_max=120.),
    'td4': dict(OFF_POLICY_LARGE, actor_lr=3e-4, noise_start=0.4,
                noise_end=0.1, num_atoms=101, v_min=-5., v_max=120.,
                target_noise=0.2, target_noise_clip=0.5, policy_delay=2),
    'sac': dict(OFF_POLICY_LARGE, actor_lr=3e-4, alpha_lr=3e-4),
    'mpo': dict(OFF_POLICY_LARGE, policy_lr=3e-4, num_samples=20,
                epsilon=0.1, epsilon_mean=1e-3, epsilon_std=1e-5,
                dual_lr=1e-2),
    'ppo': dict(num_envs=1024, rollout_length=32, num_epochs=5,
                num_minibatches=4, clip_epsilon=0.2, gae_lambda=0.95,
                entropy_coef=0.002),
}


@pytest.mark.parametrize('agent', sorted(EXPECTED))
def test_large_maps_each_published_setting_onto_the_config(agent):
  module = agents.get_agent(agent)
  overrides, lines = humanoid.large_overrides(agent, module.Config)
  assert overrides == EXPECTED[agent]
  num_envs = run_lib.resolve_run_defaults(module, overrides).num_envs
  cfg = config_lib.validate(config_lib.apply_overrides(
      module.Config(), run_lib.split_overrides(overrides)[1]),
      num_envs=num_envs)
  if agent == 'ppo':  # 32-step rollouts x 1,024 envs, 4 minibatches
    assert cfg.rollout_length * num_envs // cfg.num_minibatches == 8192
  else:  # 20 gradient steps per 2,048 env steps
    assert cfg.steps_per_iteration * num_envs == 2048
    assert cfg.updates_per_iteration == 20
  # Every line names the fields its setting became, as `--set` takes them.
  text = dict(lines)
  assert text['1,024 parallel envs'] == 'num_envs=1024'
  if agent != 'ppo':
    assert text['20 gradient steps per 2,048 env steps'] == (
        'steps_per_iteration=2, updates_per_iteration=20')
    assert text['MLP [256, 256] with LayerNorm'] == (
        'hidden_sizes=256,256, layer_norm=True')
  if agent in ('d4pg', 'td4'):
    assert text['categorical critics, 101 atoms on [-5, 120]'] == (
        'num_atoms=101, v_min=-5.0, v_max=120.0')


def test_large_agrees_with_train_sps_where_both_set_a_field():
  import train_sps  # pylint: disable=g-import-not-at-top
  for agent, module in ((a, agents.get_agent(a)) for a in EXPECTED):
    mine, _ = humanoid.large_overrides(agent, module.Config)
    names = {f.name for f in dataclasses.fields(module.Config)}
    theirs = {k: v for k, v in train_sps.LARGE[agent].items() if k in names}
    shared = set(mine) & set(theirs)
    assert shared, agent
    assert {k: mine[k] for k in shared} == {k: theirs[k] for k in shared}


@dataclasses.dataclass(frozen=True)
class _NoNStep:
  num_envs: int = 8
  batch_size: int = 256
  steps_per_iteration: int = 1
  updates_per_iteration: int = 4


def test_large_refuses_a_setting_the_config_cannot_take():
  with pytest.raises(humanoid.UsageError, match=r"'n-step 5' \(needs n_step\)"):
    humanoid.large_overrides('sac', _NoNStep)
  with pytest.raises(humanoid.UsageError, match='no settings'):
    humanoid.large_overrides('myagent', _NoNStep)


def test_large_refusal_exits_2_and_writes_nothing(tmp_path, monkeypatch,
                                                  capsys):
  real = agents.get_agent
  fake = type('FakeSac', (), {'Config': _NoNStep})
  monkeypatch.setattr(agents, 'get_agent',
                      lambda name: fake if name == 'sac' else real(name))
  assert humanoid.main(['--large'] + _paths(tmp_path)) == 2
  assert 'n_step' in capsys.readouterr().err
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize('argv, message', [
    (['--agents', 'sacc'], 'unknown agent'),
    (['--tasks', 'CheetahRun'], 'humanoid tasks'),
    (['--seeds', 'x'], '--seeds'),
    (['--steps', '0'], 'positive'),
    (['--eval-episodes', '5'], '>= 10'),
    (['--set', 'batch_size=128'], '--variant'),
    (['--set', 'batch_sise=128', '--variant', 'b'], 'batch_size'),
    (['--set', 'batch_size=abc', '--variant', 'b'], 'batch_size'),
    (['--large', '--set', 'num_envs=0', '--variant', 'b'], 'num_envs'),
    (['--variant', 'a/b'], '--variant'),
    # Bug reproduced: rows made with --set (or without --large) were
    # filed under the labels of the default and the large settings.
    (['--variant', 'default', '--set', 'batch_size=128'], '--variant default'),
    (['--large', '--variant', 'default'], '--variant default'),
    (['--variant', 'large'], '--variant large'),
    (['--large', '--variant', 'large', '--set', 'batch_size=128'],
     '--variant large'),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv,
                                              message):
  assert humanoid.main(argv + _paths(tmp_path)) == 2
  assert message in capsys.readouterr().err
  assert not os.listdir(tmp_path)


def test_large_prints_the_field_each_setting_became(tmp_path, capsys):
  argv = ['--large', '--agents', 'sac,ppo', '--report'] + _paths(tmp_path)
  assert humanoid.main(argv) == 0
  out = capsys.readouterr().out
  assert '-> n_step=5' in out
  assert 'Gaussian exploration noise 0.4 -> 0.1' in out.split(
      "(not sac's:")[1].splitlines()[0]  # not SAC's: it explores by entropy
  assert '-> rollout_length=32' in out
  assert not os.listdir(tmp_path)  # --report without rows writes nothing


def test_start_command_carries_backend_and_settings(tmp_path):
  args = humanoid.parse_args(['--large', '--backend', 'mjx', '--set',
                              'batch_size=1024', '--variant', 'big']
                             + _paths(tmp_path))
  cmd = humanoid.start_command(args, 'sac', 'HumanoidWalk', [2, 5], 'runs/x')
  assert cmd[:3] == ['train', '--agent', 'sac']
  assert cmd[cmd.index('--backend') + 1] == 'mjx'
  assert cmd[cmd.index('--seeds') + 1] == '2,5,'  # One population.
  assert cmd[cmd.index('--out') + 1] == 'runs/x'
  sets = [cmd[i + 1] for i, x in enumerate(cmd) if x == '--set']
  assert 'batch_size=1024' in sets  # --set wins over --large's 512
  assert 'batch_size=512' not in sets
  assert {'num_envs=1024', 'n_step=5', 'hidden_sizes=256,256',
          'action_repeat=1'} <= set(sets)
  args = humanoid.parse_args(['--large', '--agents', 'ppo']
                             + _paths(tmp_path))
  ppo = humanoid.start_command(args, 'ppo', 'HumanoidWalk', [0], 'runs/y')
  assert ppo[ppo.index('--backend') + 1] == 'cpu'
  assert 'rollout_length=32' in ppo
  assert 'action_repeat=1' in ppo  # A run setting PPO takes too.
  # A field PPO does not have is refused, not passed to roxie train.
  with pytest.raises(humanoid.UsageError, match="ppo: Unknown config field"):
    humanoid.parse_args(['--agents', 'sac,ppo', '--set', 'batch_size=64',
                         '--variant', 'b'] + _paths(tmp_path))


def _row(**kw):
  row = dict(agent='sac', task='HumanoidStand', seed=0, budget=1_100_000,
             variant='large-mjx', overrides='', env_steps=1_100_000,
             eval_return=0., eval_return_std=0., eval_episodes=10, cpu_s=0.,
             wall_s=0., version='0.1.0', commit='abc123', machine='box x2')
  row.update(kw)
  return row


def _curve(**kw):
  row = dict(agent='sac', task='HumanoidStand', seed=0, variant='large-mjx',
             env_steps=0, eval_return=0., cpu_s=0., wall_s=0.,
             version='0.1.0', commit='abc123')
  row.update(kw)
  return row


def test_report_from_a_hand_made_csv(tmp_path, monkeypatch):
  results, curves = str(tmp_path / 'h.csv'), str(tmp_path / 'hc.csv')
  # Seed 0: 12 evaluations (10, 20, ..., 120 at 100k, ..., 1.2M); its row at
  # 1.1M takes the last 10 up to there: 20..110, mean 65.
  dmc.append_row(results, dmc.COLUMNS, _row(seed=0, wall_s=11_000.,
                                            cpu_s=22_000., eval_return=110.))
  for k in range(1, 13):
    dmc.append_row(curves, dmc.CURVE_COLUMNS,
                   _curve(seed=0, env_steps=100_000 * k, eval_return=10. * k))
  # Seed 1: three evaluations only, mean 75.
  dmc.append_row(results, dmc.COLUMNS, _row(seed=1, wall_s=5_500.,
                                            cpu_s=11_000., eval_return=105.))
  for steps, ret in ((900_000, 45.), (1_000_000, 75.), (1_100_000, 105.)):
    dmc.append_row(curves, dmc.CURVE_COLUMNS,
                   _curve(seed=1, env_steps=steps, eval_return=ret))
  # PPO on HumanoidRun, no curve: its row's own evaluation is the score.
  dmc.append_row(results, dmc.COLUMNS, _row(
      agent='ppo', task='HumanoidRun', variant='default-cpu', budget=50_000,
      env_steps=50_000, eval_return=12.5, wall_s=100., cpu_s=150.))
  # A run of another agent goes first in the release's order (SAC's walk
  # before its stand would be out of order too).
  dmc.append_row(results, dmc.COLUMNS, _row(
      agent='sac', task='HumanoidWalk', variant='large-mjx', env_steps=10,
      eval_return=3., wall_s=1.))

  path = humanoid.write_report(results, curves)
  assert path == str(tmp_path / 'HUMANOID.md')
  text = open(path).read()
  assert ('| sac | HumanoidStand | mjx | large | 2 | 1,100,000 | 70 | '
          '0: 65, 1: 75 (fewest evals: 3) | 917 (~9.2 h) | 925 (~2.6 h) | '
          '150 | 2.29 | 4.58 |') in text
  assert ('| ppo | HumanoidRun | cpu | default | 1 | 50,000 | 12 | 0: 12 (no '
          'curve: the budget evaluation) | 761 (~4.7 h) | 7 (~1.8 h) | 500 | '
          '0.03 | 0.04 |') in text
  order = [text.index(f'| {a} | {t} |') for a, t in (
      ('sac', 'HumanoidStand'), ('sac', 'HumanoidWalk'), ('ppo',
                                                          'HumanoidRun'))]
  assert order == sorted(order)
  assert '--results' in text and 'abc123' in text and 'box x2' in text
  # The best run (seed 1's 75) is far below the shipping threshold.
  assert ('Best run so far: sac on HumanoidStand (large, seed 1), 75: below '
          'it, so no humanoid policy ships.') in text
  # The curves are drawn beside it (a PNG) and linked.
  png = tmp_path / humanoid.CURVES_PNG
  assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert f'![learning curves]({humanoid.CURVES_PNG})' in text
  # The same through the command line, which also refuses nothing here.
  os.remove(path)
  assert humanoid.main(['--report', '--results', results, '--curves',
                        curves]) == 0
  assert open(path).read() == text
  # A run at the threshold is named as the one to ship.
  dmc.append_row(results, dmc.COLUMNS, _row(
      agent='td3', task='HumanoidWalk', variant='default-cpu', budget=50_000,
      env_steps=50_000, eval_return=humanoid.SHIP_THRESHOLD, wall_s=1.))
  text = open(humanoid.write_report(results, curves)).read()
  assert ('Best run so far: td3 on HumanoidWalk (default, seed 0), 500: it '
          'clears the threshold: export it') in text
  # Once its bundle is in roxie/policies/, the report says it ships.
  from roxie import export  # pylint: disable=g-import-not-at-top
  policies = tmp_path / 'policies'
  (policies / 'HumanoidWalk-td3').mkdir(parents=True)
  (policies / 'HumanoidWalk-td3' / export.META_FILE).write_text('{}')
  monkeypatch.setattr(export, 'policies_dir', lambda: str(policies))
  text = open(humanoid.write_report(results, curves)).read()
  assert ('500: it clears the threshold and ships as '
          "roxie/policies/HumanoidWalk-td3 (`roxie.load_policy("
          "'HumanoidWalk-td3')`).") in text


# ~20 s: fast, since it was the only test of the training path and that path
# broke unseen while it was `slow`.
def test_a_tiny_cell_end_to_end(tmp_path, monkeypatch, capsys):
  # The machinery on a pendulum (a humanoid compile is minutes on 2 cores):
  # the cell's seed trains as a population through dmc.py's machinery on
  # --backend, which appends the row and curve; a rerun skips the cell.
  # (Broke unseen while dmc.py moved to populations: humanoid.py called the
  # removed dmc.train_cell.)
  monkeypatch.setattr(humanoid, 'TASKS', ('PendulumSwingup',))
  argv = ['--tasks', 'PendulumSwingup', '--steps', '1000', '--eval-every',
          '500', '--set', 'num_envs=2', '--set', 'warmup_steps=100',
          '--set', 'batch_size=32', '--set', 'hidden_sizes=16,16',
          '--variant', 'tiny'] + _paths(tmp_path)
  assert humanoid.main(argv) == 0
  rows = dmc.read_rows(str(tmp_path / 'h.csv'), dmc.COLUMNS)
  assert [(r['agent'], r['task'], r['seed'], r['budget'], r['variant'])
          for r in rows] == [('sac', 'PendulumSwingup', '0', '1000',
                              'tiny-cpu')]
  assert float(rows[0]['env_steps']) >= 990
  assert 'num_envs=2' in rows[0]['overrides']
  assert float(rows[0]['cpu_s']) > 0 and float(rows[0]['wall_s']) > 0
  steps = [int(float(c['env_steps'])) for c in dmc.read_rows(
      str(tmp_path / 'hc.csv'), dmc.CURVE_COLUMNS)]
  assert steps == sorted(set(steps)) and steps[-1] >= 990 and len(steps) >= 2
  text = (tmp_path / 'HUMANOID.md').read_text()
  assert '| sac | PendulumSwingup | cpu | tiny | 1 |' in text
  run_dir = tmp_path / 'runs' / 'tiny-cpu' / 'sac-PendulumSwingup-seed0'
  with open(run_dir / 'config.json') as f:
    assert json.load(f)['backend'] == 'cpu'
  mtime = os.path.getmtime(tmp_path / 'h.csv')
  assert humanoid.main(argv) == 0  # Done: nothing trains, nothing appended.
  assert os.path.getmtime(tmp_path / 'h.csv') == mtime
  # A longer budget would resume the run: with the settings that made it,
  # nothing stands in the way; with another, it is refused (dmc.py's check).
  longer = [('2000' if a == '1000' else a) for a in argv]
  args = humanoid.parse_args(longer)
  assert dmc.resume_problems(humanoid.cell_args(args, 'sac'), 'sac',
                             'PendulumSwingup', args.seeds) == []
  other = [a.replace('hidden_sizes=16,16', 'hidden_sizes=32,32')
           for a in longer]
  assert humanoid.main(other) == 2
  assert ('hidden_sizes: the run has [16, 16], the cell asks for [32, 32]'
          in capsys.readouterr().err)
  assert os.path.getmtime(tmp_path / 'h.csv') == mtime


def test_a_report_holds_the_csvs_so_no_append_lands_between_read_and_write(
    tmp_path, monkeypatch):
  # As dmc.py's report (tests/test_dmc_bench.py): HUMANOID.md was written
  # from a read taken without the lock, so another job's row appended
  # between the read and the write was missing from the file written last.
  import threading  # pylint: disable=g-import-not-at-top
  results, curves = str(tmp_path / 'h.csv'), str(tmp_path / 'hc.csv')
  dmc.append_row(results, dmc.COLUMNS, _row(seed=0, eval_return=110.))
  dmc.append_row(curves, dmc.CURVE_COLUMNS,
                 _curve(seed=0, env_steps=100_000, eval_return=10.))
  read = threading.Event()
  seen = {}
  markdown = humanoid.markdown

  def slow_markdown(rows, *args, **kwargs):
    seen['rows'] = len(rows)
    read.set()
    threading.Event().wait(0.5)  # An unheld append lands in this window.
    with open(results) as f:
      seen['lines_at_write'] = f.read().count('\n')
    return markdown(rows, *args, **kwargs)

  monkeypatch.setattr(humanoid, 'markdown', slow_markdown)
  monkeypatch.setattr(humanoid, 'plot_curves', lambda *a, **k: False)
  job = threading.Thread(target=lambda: (
      read.wait(10), dmc.append_row(results, dmc.COLUMNS,
                                    _row(seed=1, eval_return=105.))),
      daemon=True)
  job.start()
  humanoid.write_report(results, curves)
  job.join(10)
  with open(results) as f:
    assert f.read().count('\n') == 3  # Header and both rows.
  # The report read one row and none landed before it was written: the
  # append waited for it (unlocked, it landed during the wait).
  assert seen['rows'] == 1
  assert seen['lines_at_write'] == 2
  assert not os.path.exists(str(tmp_path / 'HUMANOID.md.tmp'))
