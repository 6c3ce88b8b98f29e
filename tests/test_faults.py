"""Faults a user can cause: each gets a clear answer, nothing is lost.

Issue 14, items 1-12: a bad input exits 2 with nothing written; a fault
(non-finite training, a failed write) exits non-zero and never reports
success; a damaged run always has a way forward.

Most cases call `roxie.cli.main` in this process, so they share one tiny
trained run (module fixture) and its compiled programs; the settings are
test_resume.py's, so the persistent compile cache serves both. Cases about
what a process prints at exit or how it takes a signal run `roxie` in a
subprocess.
"""

import csv
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from roxie import checkpoint as ckpt
from roxie import cli
from roxie import config as config_lib
from roxie import envs
from roxie import export
from roxie import run as run_lib
from roxie.agents import get_agent
from roxie.types import RunDefaults

TINY = ('--agent', 'sac', '--task', 'CartpoleBalance', '--num-envs', '2',
        '--seed', '3', '--eval-every', '40', '--eval-episodes', '2',
        '--episode-length', '20', '--set', 'hidden_sizes=16,16',
        '--set', 'batch_size=16', '--set', 'warmup_steps=20',
        '--set', 'replay_capacity=64', '--quiet')
STEPS = 80  # Two evaluations and two checkpoints (at 40 and 80).


def _cli(capsys, *argv):
  code = cli.main([str(a) for a in argv])
  out, err = capsys.readouterr()
  return code, out, err


def _rows(run_dir):
  with open(os.path.join(run_dir, 'metrics.csv'), newline='') as f:
    return list(csv.DictReader(f))


def _untimed(rows):
  return [{k: v for k, v in r.items() if k not in ('wall_time', 'sps')}
          for r in rows]


def _snapshot(path):
  """Every file under path (but the lock) and its bytes."""
  out = {}
  for root, _, files in os.walk(path):
    for name in files:
      if name != '.lock':
        full = os.path.join(root, name)
        with open(full, 'rb') as f:
          out[os.path.relpath(full, path)] = f.read()
  return out


def _subprocess(*argv, **kwargs):
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(
      os.path.dirname(__file__), '..', '.jax_cache'))
  env.update(kwargs.pop('env', {}))
  return subprocess.Popen(
      [sys.executable, '-c', 'import sys; from roxie import cli; '
       'sys.exit(cli.main())', *[str(a) for a in argv]],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
      **kwargs)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A finished tiny run: checkpoints at 40 and 80 env steps."""
  out = str(tmp_path_factory.mktemp('faults') / 'run')
  code = cli.main(['train', *TINY, '--steps', str(STEPS), '--out', out])
  assert code == 0
  return out


@pytest.fixture
def run_copy(trained, tmp_path):
  dst = str(tmp_path / 'run')
  shutil.copytree(trained, dst)
  return dst


# --- 1. export --overwrite replaces only a bundle, never the run -------------


def test_export_overwrite_never_replaces_the_run_or_a_foreign_folder(
    trained, tmp_path, capsys):
  before = _snapshot(trained)
  code, _, err = _cli(capsys, 'export', '--run', trained, '--to', trained,
                      '--overwrite')
  assert code == 2 and 'would replace the run' in err
  parent = os.path.dirname(trained)  # A folder holding the run.
  code, _, err = _cli(capsys, 'export', '--run', trained, '--to', parent,
                      '--overwrite')
  assert code == 2 and 'would replace the run' in err
  assert _snapshot(trained) == before
  thesis = tmp_path / 'thesis'
  thesis.mkdir()
  (thesis / 'chapter1.tex').write_text('years of work')
  code, _, err = _cli(capsys, 'export', '--run', trained, '--to', thesis,
                      '--overwrite')
  assert code == 2 and 'not a roxie policy bundle' in err
  assert (thesis / 'chapter1.tex').read_text() == 'years of work'
  # A bundle with a stranger's file in it is not replaced either.
  fake = tmp_path / 'bundle'
  fake.mkdir()
  (fake / 'roxie.json').write_text(json.dumps(
      {'format': 'roxie-policy', 'agent': 'sac', 'task': 'T', 'config': {},
       'env_spec': {}}))
  (fake / 'notes.txt').write_text('mine')
  code, _, err = _cli(capsys, 'export', '--run', trained, '--to', fake,
                      '--overwrite')
  assert code == 2 and 'notes.txt' in err
  assert (fake / 'notes.txt').read_text() == 'mine'


def test_export_overwrite_replaces_a_bundle(trained, tmp_path, capsys):
  bundle = tmp_path / 'bundle'
  code, _, err = _cli(capsys, 'export', '--run', trained, '--to', bundle,
                      '--episodes', '2')
  assert code == 0, err
  (bundle / 'policy.npz').write_bytes(b'stale')
  code, _, err = _cli(capsys, 'export', '--run', trained, '--to', bundle,
                      '--episodes', '2', '--overwrite')
  assert code == 0, err
  assert (bundle / 'policy.npz').read_bytes() != b'stale'
  policy = export.load_policy(str(bundle))
  # 7. A NaN observation is refused, not answered with a NaN action.
  obs = np.zeros(policy.spec.obs_size, np.float32)
  assert np.all(np.isfinite(np.asarray(policy(obs))))
  obs[1] = np.nan
  with pytest.raises(ValueError, match='NaN or inf'):
    policy(obs)
  # 4. A bundle whose parameters are not finite is refused on load.
  with np.load(bundle / 'policy.npz') as data:
    params = {k: data[k] for k in data.files}
  name = sorted(params)[0]
  params[name] = np.full_like(params[name], np.nan)
  with open(bundle / 'policy.npz', 'wb') as f:
    np.savez(f, **params)
  code, _, err = _cli(capsys, 'eval', '--policy', bundle, '--episodes', '2')
  assert code == 2 and 'not finite' in err and name in err


# --- 2. a damaged metrics.csv is restored on resume --------------------------


@pytest.mark.parametrize('damage', ['deleted', 'emptied', 'last_row_cut'])
def test_resume_restores_a_damaged_metrics_csv(trained, run_copy, capsys,
                                               damage):
  path = os.path.join(run_copy, 'metrics.csv')
  if damage == 'deleted':
    os.remove(path)
  elif damage == 'emptied':
    open(path, 'w').close()
  else:
    with open(path, 'rb') as f:
      text = f.read()
    with open(path, 'wb') as f:
      f.write(text[:-25])
  code, _, err = _cli(capsys, 'train', '--resume', run_copy, '--steps', '120',
                      '--quiet')
  assert code == 0, err
  assert 'restored its 2 row(s) from the checkpoint' in err
  rows = _rows(run_copy)
  assert [int(r['env_steps']) for r in rows] == [40, 80, 120]
  assert _untimed(rows[:2]) == _untimed(_rows(trained))
  code, _, err = _cli(capsys, 'plot', run_copy, '-o',
                      os.path.join(run_copy, 'curve.png'))
  assert code == 0, err


# --- 3. a run stopped before its first checkpoint resumes from scratch -------


def test_a_run_without_a_checkpoint_restarts_in_place(trained, run_copy,
                                                      capsys):
  shutil.rmtree(ckpt.checkpoint_dir(run_copy))
  os.remove(os.path.join(run_copy, run_lib.STATE_FILE))
  # A new run over it is refused, with the --resume advice ...
  code, _, err = _cli(capsys, 'train', *TINY, '--steps', STEPS, '--out',
                      run_copy)
  assert code == 2 and f'--resume {run_copy}' in err
  # ... and that advice works: the same run again from step 0.
  code, _, err = _cli(capsys, 'train', '--resume', run_copy, '--quiet')
  assert code == 0, err
  assert _untimed(_rows(run_copy)) == _untimed(_rows(trained))
  kept = os.path.join(run_copy, 'metrics.csv' + run_lib.RESTART_SUFFIX)
  with open(kept) as f:  # The old rows are kept aside, not lost.
    assert len(list(csv.DictReader(f))) == 2
  assert ckpt.list_steps(run_copy) == [40, 80]


def test_a_kill_during_the_first_checkpoint_leaves_a_resumable_run(
    tmp_path, capsys):
  out = tmp_path / 'run'
  # Sleeps inside the first checkpoint's write, after its first item.
  proc = _subprocess('train', *TINY, '--steps', STEPS, '--out', out,
                     env={'ROXIE_CHECKPOINT_PAUSE': '60'})
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    root = ckpt.checkpoint_dir(str(out))
    if os.path.isdir(root) and any(n.startswith('.tmp-')
                                   for n in os.listdir(root)):
      break
    time.sleep(0.2)
  assert proc.poll() is None, proc.communicate()
  time.sleep(0.5)
  proc.kill()
  proc.communicate()
  assert ckpt.list_steps(str(out)) == []
  code, _, err = _cli(capsys, 'train', '--resume', out, '--quiet')
  assert code == 0, err
  assert [int(r['env_steps']) for r in _rows(out)] == [40, 80]


# --- 4. non-finite training is a fault, never a success -----------------------


def test_training_that_diverges_stops_with_a_fault(tmp_path, capsys):
  out = tmp_path / 'run'
  code, out_text, err = _cli(
      capsys, 'train', *TINY, '--steps', 200, '--out', out,
      '--set', 'critic_lr=1e30', '--set', 'actor_lr=1e30')
  assert code == cli.EXIT_FAULT
  assert 'training diverged' in err and 'not finite' in err
  assert 'final eval_return' not in out_text
  rows = _rows(out)
  assert int(rows[-1]['nonfinite_params']) > 0
  assert rows[-1]['eval_return'] == 'nan'
  assert all(int(r['nonfinite_params']) == 0 for r in rows[:-1])
  # The poisoned state was not saved: every checkpoint is finite.
  for step in ckpt.list_steps(str(out)):
    agent = ckpt.read(os.path.join(ckpt.checkpoint_dir(str(out)),
                                   ckpt.step_name(step)))['agent']
    assert all(np.isfinite(v).all() for v in agent.values()
               if np.issubdtype(v.dtype, np.inexact))


def test_health_columns_in_metrics(trained):
  for row in _rows(trained):
    assert row['nonfinite_params'] == '0'
    assert int(row['clipped_actions']) >= 0 and row['diverged_envs'] == '0'


def test_eval_and_export_refuse_a_non_finite_policy(run_copy, tmp_path,
                                                    capsys):
  shutil.rmtree(ckpt.checkpoint_dir(run_copy))  # agent_state.npz remains.
  path = os.path.join(run_copy, run_lib.STATE_FILE)
  with np.load(path) as data:
    leaves = [data[f'arr_{i}'] for i in range(len(data.files))]
  leaves = [np.full_like(x, np.nan) if np.issubdtype(x.dtype, np.floating)
            else x for x in leaves]
  with open(path, 'wb') as f:
    np.savez(f, *leaves)
  code, _, err = _cli(capsys, 'eval', '--run', run_copy, '--episodes', '2')
  assert code == 2 and 'not finite' in err
  code, _, err = _cli(capsys, 'export', '--run', run_copy, '--to',
                      tmp_path / 'b')
  assert code == 2 and 'not finite' in err and 'make_policy' not in err
  assert not (tmp_path / 'b').exists()


# --- 5. config values are validated before anything is written ---------------


@pytest.mark.parametrize('setting, needle', [
    ('discount=1.5', 'discount must be in (0, 1]'),
    ('batch_size=0', 'batch_size must be >= 1'),
    ('action_repeat=0', 'action_repeat must be >= 1'),
    ('action_repeat=3', 'does not divide the episode length'),
    ('num_envs=0', 'num_envs must be >= 1'),
    ('replay_capacity=10', 'replay_capacity (10) must be >= batch_size'),
    ('hidden_sizes=', 'hidden_sizes must not be empty'),
    ('critic_lr=nan', 'critic_lr must be a finite number'),
    # Would clip every standardised input to one value.
    ('obs_clip=0', 'obs_clip must be > 0'),
])
def test_bad_config_values_exit_2_and_write_nothing(tmp_path, capsys,
                                                    setting, needle):
  out = tmp_path / 'run'
  code, _, err = _cli(capsys, 'train', *TINY, '--steps', STEPS, '--out', out,
                      '--set', setting)
  assert code == 2 and needle in err, err
  assert 'Traceback' not in err
  assert not out.exists()


def test_validate_from_python():
  sac = get_agent('sac')
  assert config_lib.validate(sac.Config()) == sac.Config()
  bad = config_lib.apply_overrides(sac.Config(), {'tau': 0.0, 'n_step': 0})
  with pytest.raises(config_lib.ConfigError) as e:
    config_lib.validate(bad)
  assert 'tau must be in (0, 1], got 0.0' in str(e.value)
  assert 'n_step must be >= 1, got 0' in str(e.value)
  ppo = get_agent('ppo')
  with pytest.raises(config_lib.ConfigError,
                     match='num_minibatches .* must divide'):
    config_lib.validate(config_lib.apply_overrides(
        ppo.Config(), {'rollout_length': 5, 'num_minibatches': 2}),
        num_envs=3)
  with pytest.raises(config_lib.ConfigError, match='obs_clip must be > 0'):
    config_lib.validate(config_lib.apply_overrides(ppo.Config(),
                                                   {'obs_clip': -1.}))
  # Without the run's num_envs the relation is not checked.
  config_lib.validate(config_lib.apply_overrides(
      ppo.Config(), {'rollout_length': 5, 'num_minibatches': 2}))
  with pytest.raises(config_lib.ConfigError, match='num_envs must be int'):
    config_lib.validate(config_lib.apply_overrides(RunDefaults(),
                                                   {'num_envs': 2.7}))
  for agent in ('ddpg', 'td3', 'd4pg', 'td4', 'sac', 'mpo', 'ppo'):
    config_lib.validate(get_agent(agent).Config())  # The defaults are valid.


# --- 6. steps and evaluation points are whole iterations, said so -------------


def test_steps_and_eval_points_round_to_whole_iterations(tmp_path, capsys):
  # 8 env steps per iteration (2 envs x action repeat 4): 60 -> 64, and a
  # shorter last call ends the run there; --eval-every 36 -> 40.
  out = tmp_path / 'run'
  code, stdout, err = _cli(capsys, 'train', *TINY, '--steps', 60,
                           '--eval-every', 36, '--out', out)
  assert code == 0, err
  assert 'training 64 env steps: 60 rounded up' in err
  assert 'evaluating every 40 env steps: 36 rounded up' in err
  assert 'env_steps=64' in stdout
  assert [int(r['env_steps']) for r in _rows(out)] == [40, 64]
  assert ckpt.list_steps(str(out)) == [40, 64]


# --- 7. num_envs must be an integer -------------------------------------------


@pytest.mark.parametrize('num_envs', [2.7, 2.0, True])
def test_envs_make_refuses_a_non_integer_num_envs(num_envs):
  with pytest.raises(ValueError, match='num_envs must be an integer'):
    envs.make('CartpoleBalance', backend='cpu', num_envs=num_envs)


# --- 8. filesystem faults: one line, exit != 0, checkpoints intact ------------


def test_a_full_disk_is_one_line_and_keeps_the_last_checkpoint(
    trained, run_copy, capsys, monkeypatch):
  before = _snapshot(ckpt.checkpoint_dir(run_copy))

  def full(path, tree):
    raise ckpt.CheckpointWriteError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                                    path)
  monkeypatch.setattr(ckpt, '_write_item', full)
  code, out, err = _cli(capsys, 'train', '--resume', run_copy, '--steps',
                        '120')
  assert code == cli.EXIT_FAULT
  assert 'No space left on device' in err
  assert 'step_000000000080, is intact' in err
  assert err.count('\n') == 1 and 'Traceback' not in err
  assert 'final eval_return' not in out
  assert _snapshot(ckpt.checkpoint_dir(run_copy)) == before


def test_orbax_disk_errors_become_one_os_error(tmp_path, monkeypatch):
  """tensorstore reports ENOSPC as a ValueError; it becomes an OSError."""
  ocp = ckpt._orbax()  # pylint: disable=protected-access

  def save(self, *args, **kwargs):
    raise ValueError('RESOURCE_EXHAUSTED: Error writing "x": Failed to write '
                     "285 bytes: No space left on device [os_error_code='28']")
  monkeypatch.setattr(ocp.Checkpointer, 'save', save)
  with pytest.raises(ckpt.CheckpointWriteError) as e:
    ckpt.save(str(tmp_path), 4, {'a': {'x': np.ones(3)}})
  assert e.value.errno == errno.ENOSPC
  assert ckpt.list_steps(str(tmp_path)) == []
  assert os.listdir(ckpt.checkpoint_dir(str(tmp_path))) == []


def test_a_read_only_out_is_one_line(tmp_path, capsys, monkeypatch):
  def read_only(path, doc):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
  monkeypatch.setattr(run_lib.files, '_write_json', read_only)
  code, _, err = _cli(capsys, 'train', *TINY, '--steps', STEPS, '--out',
                      tmp_path / 'run')
  assert code == cli.EXIT_FAULT
  assert 'Read-only file system' in err and err.count('\n') == 1


# --- 9. a hand-edited config.json names the file and the field ---------------


@pytest.mark.parametrize('edit, needle', [
    (lambda m: m.update(steps='abc'), "field 'steps' must be a JSON integer"),
    (lambda m: m.pop('config'), "has no 'config' field"),
    (lambda m: m.update(agent='td3'),
     "field 'config' has entries that agent 'td3' does not have"),
    (lambda m: m['config'].update(discount=2.0),
     'discount must be in (0, 1]'),
    (lambda m: m['config'].update(batch_size='64'), 'batch_size must be int'),
    (None, 'must hold a JSON object'),
])
def test_a_hand_edited_config_json_names_the_field(run_copy, capsys, edit,
                                                   needle):
  path = os.path.join(run_copy, 'config.json')
  with open(path) as f:
    meta = json.load(f)
  if edit is None:
    meta = [meta]
  else:
    edit(meta)
  with open(path, 'w') as f:
    json.dump(meta, f)
  for argv in (('train', '--resume', run_copy),
               ('eval', '--run', run_copy, '--episodes', '2')):
    code, _, err = _cli(capsys, *argv)
    assert code == 2 and needle in err and path in err, err


# --- 10. a damaged checkpoint: one message, and the way to the older one -----


def test_a_damaged_latest_checkpoint_points_to_the_older_one(run_copy):
  latest = ckpt.latest(run_copy)
  for root, _, files in os.walk(os.path.join(latest, 'agent')):
    for name in files:
      if not name.endswith('.json'):
        with open(os.path.join(root, name), 'r+b') as f:
          f.truncate(max(0, os.path.getsize(os.path.join(root, name)) // 2))
  proc = _subprocess('eval', '--run', run_copy, '--episodes', '2')
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 2, err
  assert 'roxie: error:' in err and 'step_000000000040, looks intact' in err
  assert 'Event loop is closed' not in err and 'Traceback' not in err
  # Moving it aside as told makes eval use the older one.
  os.rename(latest, os.path.join(os.path.dirname(latest), 'damaged'))
  assert ckpt.latest(run_copy).endswith('step_000000000040')


# --- 11. Ctrl-C before training starts is not swallowed -----------------------


def test_ctrl_c_while_building_stops_the_run(tmp_path, capsys, monkeypatch):
  real = run_lib._check_buildable  # pylint: disable=protected-access

  def interrupted_while_building(*args):
    os.kill(os.getpid(), signal.SIGINT)  # As a Ctrl-C during the build.
    return real(*args)
  monkeypatch.setattr(run_lib.programs, '_check_buildable',
                      interrupted_while_building)
  out = tmp_path / 'run'
  code, stdout, err = _cli(capsys, 'train', *TINY, '--steps', STEPS, '--out',
                           out)
  assert code == 130
  assert 'before training started' in err and f'--resume {out}' in err
  assert 'final eval_return' not in stdout
  assert not os.path.exists(ckpt.checkpoint_dir(str(out)))


def test_ctrl_c_at_start_up_is_not_swallowed(tmp_path):
  proc = _subprocess('train', *TINY, '--steps', 100_000, '--out',
                     tmp_path / 'run')
  time.sleep(1.5)  # Importing JAX, building the envs.
  proc.send_signal(signal.SIGINT)
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 130, err
  assert 'final eval_return' not in out
  assert 'Exception ignored' not in err and 'Traceback' not in err


# --- 12. smaller ones ---------------------------------------------------------


def test_eval_episodes_0_is_a_usage_error(trained, capsys):
  code, _, err = _cli(capsys, 'eval', '--run', trained, '--episodes', '0')
  assert code == 2 and '--episodes must be >= 1' in err


def test_out_pointing_at_a_file_is_a_usage_error(tmp_path, capsys):
  target = tmp_path / 'file.txt'
  target.write_text('keep')
  code, _, err = _cli(capsys, 'train', *TINY, '--steps', STEPS, '--out',
                      target)
  assert code == 2 and 'is a file' in err and 'Errno' not in err
  assert target.read_text() == 'keep'


def test_a_stale_native_state_names_the_stale_state_error():
  message = ('INTERNAL: CpuCallback error: Traceback (most recent call '
             'last):\n  ...\nroxie.envs.native.StaleStateError: The native '
             'backend was handed a stale EnvState (physics token 3, host '
             'physics at 5)')
  with pytest.raises(run_lib.TrainingFault, match=r'^the native backend.*'
                     r'stale EnvState \(physics token 3'):
    with run_lib._host_errors():  # pylint: disable=protected-access
      raise jax.errors.JaxRuntimeError(message)
