"""Checkpoints: atomic commits, pruning, and clear errors for bad checkpoints.

Nothing here trains or compiles a training program: the module-level tests
use small NumPy trees, and the run-level tests write checkpoints of
zero-filled loop states with the shapes `jax.eval_shape` gives.
"""

import csv
import hashlib
import io
import json
import os
import shutil
import sys

import jax
import numpy as np
import pytest

from roxie import checkpoint as ckpt
from roxie import cli
from roxie import run as run_lib


def _tree():
  return {
      'params': {'mlp/~/linear_0': {'w': np.arange(6, dtype=np.float32)
                                    .reshape(2, 3),
                                    'b': np.zeros(3, np.float32)}},
      'opt': (np.int32(5), {'mu': np.ones((2, 3), np.float32)}),
      'key': np.array([0, 42], np.uint32),
      'host': np.linspace(0, 1, 10).reshape(2, 5),  # float64
      'flags': np.array([True, False]),
      'empty': np.zeros((2, 0), np.float32),  # orbax cannot store these
  }


def _assert_trees_equal(a, b):
  la, ta = jax.tree.flatten(a)
  lb, tb = jax.tree.flatten(b)
  assert ta == tb
  for x, y in zip(la, lb):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x, y)


def test_round_trip_of_every_dtype_and_empty_arrays(tmp_path):
  tree = _tree()
  path = ckpt.save(str(tmp_path), 10, {'state': tree, 'skipped': None},
                   meta={'note': 'hi'})
  assert os.path.basename(path) == 'step_000000000010'
  items, doc = ckpt.restore(path, {'state': tree})
  _assert_trees_equal(items['state'], tree)
  assert doc['meta'] == {'note': 'hi'} and doc['step'] == 10
  assert 'skipped' not in doc['items']
  # Restoring from shapes alone gives the same.
  shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
  items, _ = ckpt.restore(path, {'state': shapes})
  _assert_trees_equal(items['state'], tree)
  raw = ckpt.read(path)['state']
  np.testing.assert_array_equal(raw["['host']"], tree['host'])


def test_typed_prng_keys_round_trip(tmp_path):
  tree = {'k': jax.random.key(3), 'r': jax.random.key(4, impl='rbg')}
  path = ckpt.save(str(tmp_path), 1, {'s': tree})
  for template in (tree, jax.eval_shape(lambda: tree)):
    items, _ = ckpt.restore(path, {'s': template})
    for name in tree:
      assert items['s'][name].dtype == tree[name].dtype
      np.testing.assert_array_equal(jax.random.key_data(items['s'][name]),
                                    jax.random.key_data(tree[name]))


def test_latest_keep_and_leftovers(tmp_path):
  run = str(tmp_path)
  assert ckpt.latest(run) is None
  for step in (100, 200, 300):
    ckpt.save(run, step, {'s': {'x': np.full(3, step)}}, keep=2)
  assert ckpt.list_steps(run) == [200, 300]
  # A killed write leaves a .tmp- directory: ignored, then cleaned up.
  junk = os.path.join(ckpt.checkpoint_dir(run), '.tmp-step_000000000400-1-1')
  os.makedirs(os.path.join(junk, 's'))
  assert ckpt.latest(run).endswith('step_000000000300')
  assert ckpt.cleanup(run) == ['.tmp-step_000000000400-1-1']
  assert not os.path.exists(junk)
  # Saving a step again replaces it.
  ckpt.save(run, 300, {'s': {'x': np.full(3, 7)}}, keep=2)
  items, _ = ckpt.restore(ckpt.latest(run), {'s': {'x': np.zeros(3, int)}})
  np.testing.assert_array_equal(items['s']['x'], 7)
  assert sorted(os.listdir(ckpt.checkpoint_dir(run))) == [
      'step_000000000200', 'step_000000000300']


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
  run = str(tmp_path)
  ckpt.save(run, 1, {'s': {'x': np.ones(2)}})

  def boom(*args, **kwargs):
    raise OSError('disk full')
  monkeypatch.setattr(ckpt, '_fsync_tree', boom)
  with pytest.raises(OSError, match='disk full'):
    ckpt.save(run, 2, {'s': {'x': np.ones(2)}})
  assert ckpt.list_steps(run) == [1]
  assert os.listdir(ckpt.checkpoint_dir(run)) == ['step_000000000001']


def test_template_mismatch_names_the_arrays(tmp_path):
  tree = _tree()
  path = ckpt.save(str(tmp_path), 1, {'state': tree})
  other = dict(tree)
  other['params'] = {'mlp/~/linear_0': {'w': np.zeros((4, 3), np.float32),
                                        'b': np.zeros(3, np.float32)}}
  other['extra'] = np.zeros(2, np.int32)
  del other['flags']
  with pytest.raises(ckpt.CheckpointError) as e:
    ckpt.restore(path, {'state': other})
  msg = str(e.value)
  assert "['params']['mlp/~/linear_0']['w'] is float32[2,3] in the checkpoint, " \
         'float32[4,3] here' in msg
  assert "['extra'] (int32[2]) is missing from the checkpoint" in msg
  assert "['flags'] (bool[2]) is in the checkpoint but not here" in msg
  with pytest.raises(ckpt.CheckpointError, match="item 'replay' is missing"):
    ckpt.restore(path, {'state': tree, 'replay': tree})
  items, _ = ckpt.restore(path, {'state': tree, 'replay': tree},
                          optional=('replay',))
  assert items['replay'] is None


def _data_files(item_dir):
  """The files holding an orbax item's array data (its 'd' folders)."""
  return [os.path.join(r, f) for r, _, fs in os.walk(item_dir) for f in fs
          if os.path.basename(r) == 'd']


@pytest.mark.parametrize('damage, needle', [
    ('no_meta', 'incomplete: it has no meta.json'),
    ('truncated_meta', 'meta.json is truncated or corrupt'),
    ('not_a_manifest', 'not a roxie checkpoint manifest'),
    ('no_item_dir', 'incomplete: state/ is missing'),
    ('truncated_data', 'state'),
    ('flipped_bytes', 'state'),
    ('empty_data', 'state'),
])
def test_damaged_checkpoints_are_clear_errors(tmp_path, damage, needle):
  tree = {'w': np.arange(4000, dtype=np.float32)}
  path = ckpt.save(str(tmp_path), 5, {'state': tree})
  meta = os.path.join(path, 'meta.json')
  data = sorted(_data_files(os.path.join(path, 'state')),
                key=os.path.getsize)[-1]
  if damage == 'no_meta':
    os.remove(meta)
  elif damage == 'truncated_meta':
    with open(meta, 'r+b') as f:
      f.truncate(os.path.getsize(meta) // 2)
  elif damage == 'not_a_manifest':
    with open(meta, 'w') as f:
      json.dump([1, 2], f)
  elif damage == 'no_item_dir':
    shutil.rmtree(os.path.join(path, 'state'))
  elif damage == 'truncated_data':
    with open(data, 'r+b') as f:
      f.truncate(os.path.getsize(data) // 2)
  elif damage == 'flipped_bytes':
    with open(data, 'r+b') as f:
      f.seek(os.path.getsize(data) // 2)
      b = f.read(8)
      f.seek(os.path.getsize(data) // 2)
      f.write(bytes(x ^ 0xFF for x in b))
  elif damage == 'empty_data':
    open(data, 'wb').close()
  with pytest.raises(ckpt.CheckpointError) as e:
    ckpt.restore(path, {'state': tree})
  assert needle in str(e.value)
  assert path in str(e.value) or damage.endswith('data') or 'state' in str(
      e.value)
  if damage in ('truncated_data', 'flipped_bytes', 'empty_data'):
    assert 'corrupt' in str(e.value) or 'unreadable' in str(e.value)


# --- run directories ------------------------------------------------------------

_TINY = dict(hidden_sizes=(16, 16), batch_size=16, warmup_steps=20,
             replay_capacity=64)


def _fake_run(run_dir, agent='sac', task='CartpoleBalance', steps=(40,),
              rows=1, overrides=None, backend='cpu'):
  """A run directory with checkpoints of a zero loop state (no compile)."""
  meta = run_lib._new_run_meta(  # pylint: disable=protected-access
      agent, task, backend, 2, 80, 0, dict(_TINY, **(overrides or {})), 40, 2,
      {'episode_length': 20}, None)
  os.makedirs(run_dir)
  run_lib._write_json(os.path.join(run_dir, 'config.json'), meta)  # pylint: disable=protected-access
  progs = run_lib._programs(meta)  # pylint: disable=protected-access
  key = jax.random.PRNGKey(0)
  _, shapes = run_lib._templates(progs, key)  # pylint: disable=protected-access
  state = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
  log = run_lib._MetricsCsv(os.path.join(run_dir, 'metrics.csv'))  # pylint: disable=protected-access
  for i in range(rows):
    log.append({'env_steps': 40 * (i + 1), 'wall_time': 1.0,
                'eval_return': 1.0})
  for step in steps:
    runner = run_lib._Runner(env_steps=step, next_eval=step + 40)  # pylint: disable=protected-access
    run_lib._save_checkpoint(  # pylint: disable=protected-access
        run_dir, progs, state, key, runner, meta, log, wall=1.0,
        save_replay=True, keep=5)
  return meta


def _snapshot(run_dir):
  """Hashes of every file (but the lock), to show nothing was overwritten."""
  out = {}
  for root, _, files in os.walk(run_dir):
    for f in files:
      if f == '.lock':
        continue
      p = os.path.join(root, f)
      with open(p, 'rb') as fh:
        out[os.path.relpath(p, run_dir)] = hashlib.sha256(fh.read()).hexdigest()
  return out


def _cli(capsys, *argv):
  code = cli.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def _latest(run_dir):
  return ckpt.latest(run_dir)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """A sac run, and checkpoints of other agents / tasks / sizes to swap in."""
  base = tmp_path_factory.mktemp('runs')
  made = {}
  made['sac'] = str(base / 'sac')
  _fake_run(made['sac'])
  made['td3'] = str(base / 'td3')
  _fake_run(made['td3'], agent='td3')
  made['task'] = str(base / 'task')
  _fake_run(made['task'], task='PendulumSwingup')
  made['size'] = str(base / 'size')
  _fake_run(made['size'], overrides={'hidden_sizes': (32, 32)})
  return made


def _copy_run(runs, tmp_path, name='sac'):
  dst = str(tmp_path / 'run')
  shutil.copytree(runs[name], dst)
  return dst


@pytest.mark.parametrize('source, needles', [
    ('td3', ["agent 'td3' (this run: 'sac')"]),
    ('task', ["task 'PendulumSwingup' (this run: 'CartpoleBalance')"]),
    ('size', ['config hidden_sizes [32, 32] (this run: [16, 16])']),
])
def test_resume_from_another_runs_checkpoint_is_refused(runs, tmp_path,
                                                        capsys, source,
                                                        needles):
  run_dir = _copy_run(runs, tmp_path)
  shutil.rmtree(ckpt.checkpoint_dir(run_dir))
  shutil.copytree(ckpt.checkpoint_dir(runs[source]),
                  ckpt.checkpoint_dir(run_dir))
  before = _snapshot(run_dir)
  code, _, err = _cli(capsys, 'train', '--resume', run_dir, '--quiet')
  assert code == 2
  assert 'belongs to another run' in err
  for needle in needles:
    assert needle in err
  assert _snapshot(run_dir) == before


def test_wrong_shapes_are_named_even_without_run_metadata(runs, tmp_path,
                                                          capsys):
  """A checkpoint whose meta lacks the run identity: the leaf check speaks."""
  run_dir = _copy_run(runs, tmp_path)
  shutil.rmtree(ckpt.checkpoint_dir(run_dir))
  shutil.copytree(ckpt.checkpoint_dir(runs['size']),
                  ckpt.checkpoint_dir(run_dir))
  meta_path = os.path.join(_latest(run_dir), 'meta.json')
  with open(meta_path) as f:
    doc = json.load(f)
  del doc['meta']['run']
  with open(meta_path, 'w') as f:
    json.dump(doc, f)
  before = _snapshot(run_dir)
  code, _, err = _cli(capsys, 'train', '--resume', run_dir, '--quiet')
  assert code == 2
  assert 'does not fit' in err
  assert "in item 'agent'" in err
  assert (".actor['tanh_gaussian_actor/~/head']['w'] is float32[32,2] in the "
          'checkpoint, float32[16,2] here') in err
  assert _snapshot(run_dir) == before
  # `roxie eval` reads the same checkpoint and says the same.
  code, _, err = _cli(capsys, 'eval', '--run', run_dir, '--episodes', '2')
  assert code == 2 and 'float32[32,2] in the checkpoint' in err


@pytest.mark.parametrize('damage', ['truncate', 'delete_item', 'delete_meta',
                                    'garble_meta'])
def test_damaged_run_checkpoint_is_a_clear_error(runs, tmp_path, capsys,
                                                 damage):
  run_dir = _copy_run(runs, tmp_path)
  path = _latest(run_dir)
  item = os.path.join(path, 'replay')
  if damage == 'truncate':
    for f in _data_files(item):
      with open(f, 'r+b') as fh:
        fh.truncate(os.path.getsize(f) // 3)
  elif damage == 'delete_item':
    shutil.rmtree(item)
  elif damage == 'delete_meta':
    os.remove(os.path.join(path, 'meta.json'))
  else:
    with open(os.path.join(path, 'meta.json'), 'w') as f:
      f.write('{"format": 1, "step": 4')
  before = _snapshot(run_dir)
  code, out, err = _cli(capsys, 'train', '--resume', run_dir, '--quiet')
  assert code == 2, out
  assert path in err
  assert any(w in err for w in ('unreadable', 'corrupt', 'incomplete')), err
  assert _snapshot(run_dir) == before


def test_eval_uses_the_latest_checkpoint(runs, tmp_path, capsys):
  run_dir = _copy_run(runs, tmp_path)
  os.remove(os.path.join(run_dir, run_lib.STATE_FILE))
  code, out, err = _cli(capsys, 'eval', '--run', run_dir, '--episodes', '2')
  assert code == 0, err
  assert out.startswith('eval_return=')
  shutil.rmtree(os.path.join(_latest(run_dir), 'agent'))
  code, _, err = _cli(capsys, 'eval', '--run', run_dir, '--episodes', '2')
  assert code == 2 and 'agent/ is missing' in err


def test_resume_refuses_options_that_change_the_run(runs, tmp_path, capsys):
  run_dir = _copy_run(runs, tmp_path)
  before = _snapshot(run_dir)
  code, _, err = _cli(capsys, 'train', '--resume', run_dir, '--agent', 'td3',
                      '--task', 'CheetahRun', '--set', 'batch_size=32',
                      '--seed', '1', '--episode-length', '30',
                      '--num-envs', '4')
  assert code == 2
  for needle in ("agent: the run has 'sac', asked for 'td3'",
                 "task: the run has 'CartpoleBalance', asked for 'CheetahRun'",
                 'config batch_size: the run has 16, asked for 32',
                 'seed: the run has 0, asked for 1',
                 'episode_length: the run has 20, asked for 30',
                 'num_envs: the run has 2, asked for 4', 'only --steps'):
    assert needle in err
  code, _, err = _cli(capsys, 'train', '--resume', run_dir, '--out',
                      str(tmp_path / 'elsewhere'))
  assert code == 2 and '--out cannot be combined' in err
  code, _, err = _cli(capsys, 'train', '--resume', run_dir, '--set',
                      'batch_sise=16')
  assert code == 2 and 'batch_size' in err
  code, _, err = _cli(capsys, 'train', '--resume', str(tmp_path / 'nope'))
  assert code == 2 and 'not a roxie run' in err
  # Settings that match the run are accepted; the run is already at its
  # total, so there is nothing to do and nothing is written.
  code, out, err = _cli(capsys, 'train', '--resume', run_dir, '--agent', 'SAC',
                        '--set', 'hidden_sizes=16,16', '--seed', '0',
                        '--steps', '40')
  assert code == 0, err
  assert 'nothing to do' in out
  assert _snapshot(run_dir) == before


def test_a_run_directory_is_not_trained_over(runs, tmp_path, capsys):
  run_dir = _copy_run(runs, tmp_path)
  before = _snapshot(run_dir)
  code, _, err = _cli(capsys, 'train', '--out', run_dir, '--steps', '40')
  assert code == 2 and 'already holds a run' in err and '--resume' in err
  assert _snapshot(run_dir) == before


def test_a_run_being_trained_is_locked(runs, tmp_path, capsys):
  import fcntl  # pylint: disable=g-import-not-at-top
  run_dir = _copy_run(runs, tmp_path)
  with open(os.path.join(run_dir, '.lock'), 'a+') as f:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    code, _, err = _cli(capsys, 'train', '--resume', run_dir, '--steps', '80')
  assert code == 2 and 'Another process is training' in err


def test_bad_checkpoint_flags(tmp_path, capsys):
  for flag in ('--checkpoint-every', '--keep-checkpoints'):
    code, _, err = _cli(capsys, 'train', flag, '0', '--out',
                        str(tmp_path / 'r'))
    assert code == 2 and f'{flag} must be >= 1' in err
  assert not (tmp_path / 'r').exists()


def test_missing_tensorboardx_is_a_clear_error(tmp_path, capsys, monkeypatch):
  monkeypatch.setitem(sys.modules, 'tensorboardX', None)
  code, _, err = _cli(capsys, 'train', '--tensorboard', '--out',
                      str(tmp_path / 'r'))
  assert code == 2 and "pip install 'roxie[tensorboard]'" in err
  assert not (tmp_path / 'r').exists()


def test_metrics_rows_after_the_checkpoint_are_dropped_on_resume(tmp_path):
  path = str(tmp_path / 'metrics.csv')
  log = run_lib._MetricsCsv(path)  # pylint: disable=protected-access
  for i in range(4):
    log.append({'env_steps': i, 'x': i * 0.5})
  with open(path, 'a') as f:
    f.write('4,2.')  # A row cut short by a kill.
  log = run_lib._MetricsCsv(path)  # pylint: disable=protected-access
  assert log.adopt(2, None) == 3
  log.append({'env_steps': 2, 'x': 9.0})
  with open(path) as f:
    rows = list(csv.DictReader(f))
  assert [r['env_steps'] for r in rows] == ['0', '1', '2']
  assert rows[-1]['x'] == '9.0'


class _FakeTty(io.StringIO):

  def isatty(self):
    return True


def test_progress_bar_on_a_tty_and_silence_elsewhere(capsys):
  tty = _FakeTty()
  p = run_lib._Progress(100_000, 0, True, stream=tty)  # pylint: disable=protected-access
  p.status('starting')
  p.update(25_000, 5_000.0, 123.4)
  p.log('steps=25000 eval_return=123.4')
  p.close()
  text = tty.getvalue()
  assert 'starting' in text
  assert '25%' in text and '25k/100k steps' in text
  assert '5,000 sps' in text and 'eval 123.4' in text and 'ETA 00:15' in text
  assert capsys.readouterr().out == 'steps=25000 eval_return=123.4\n'
  plain = io.StringIO()
  p = run_lib._Progress(100, 0, True, stream=plain)  # pylint: disable=protected-access
  p.status('x')
  p.update(50, 10.0, None)
  p.close()
  assert plain.getvalue() == ''
