"""benchmarks/gpu.py: the smoke run writes every item, faults cost one item."""

import json
import math
import os
import subprocess
import sys

import pytest

from roxie.envs import warp_render

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'gpu.py')
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import gpu  # pylint: disable=g-import-not-at-top,wrong-import-position


def _run(args, tmp_path, env_extra=None, timeout=900):
  env = dict(os.environ)
  env.pop('OUT', None)
  # Reuse the tests' compile cache (cold in CI, warm on a rerun here).
  env.setdefault('JAX_COMPILATION_CACHE_DIR', os.environ.get(
      'ROXIE_JAX_CACHE', os.path.join(ROOT, '.jax_cache')))
  env.update(env_extra or {})
  return subprocess.run([sys.executable, SCRIPT, *args], cwd=tmp_path,
                        env=env, capture_output=True, text=True,
                        timeout=timeout)


def test_smoke_run_reports_every_item(tmp_path):
  out = tmp_path / 'gpu.json'
  proc = _run(['--smoke', '--out', str(out)], tmp_path)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  doc = json.loads(out.read_text())
  names = [it.name for it in gpu.plan(smoke=True)]
  assert list(doc['items']) == names
  for name, r in doc['items'].items():
    if r['status'] == 'ok':
      assert math.isfinite(r['value']) and r['value'] > 0, r
      assert r['compile_s'] > 0, r
    else:
      assert r['status'] == 'error' and r['error'], r
  # What runs on any CPU must have run: MJX physics and both trainings.
  for name in ('mjx_physics.jax.8', 'train.sac', 'train.ppo'):
    assert doc['items'][name]['status'] == 'ok', doc['items'][name]
  assert doc['items']['train.sac']['target'] == gpu.OFF_POLICY_TARGET
  assert doc['items']['train.sac']['learned'] is True
  # impl='warp' physics: where Warp is not installed (CI), roxie.envs's
  # message naming what to install is the recorded result; where it is, the
  # item ran on Warp's CPU device.
  warp = doc['items']['mjx_physics.warp.8']
  if warp_render.warp_installed():
    assert warp['status'] == 'ok', warp
  else:
    assert warp['status'] == 'error' and "impl='warp'" in warp['error']
  assert doc['device']['backend'] == 'cpu' and doc['versions']['jax']
  table = (tmp_path / 'gpu.md').read_text()
  for name in names:
    assert f'| {name} |' in table
  assert table in proc.stdout


def test_a_crash_costs_one_item_and_a_hang_is_killed(tmp_path):
  # Without Warp the two Warp items are refused at once, so the run is short.
  out = tmp_path / 'a.json'
  proc = _run(['--smoke', '--only', 'mjx_physics.warp,render', '--out',
               str(out)], tmp_path,
              {gpu.FAULT_ENV: 'mjx_physics.warp.8=crash'}, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  items = json.loads(out.read_text())['items']
  assert list(items) == ['mjx_physics.warp.8', 'render.warp.rgb64.8']
  assert items['mjx_physics.warp.8']['status'] == 'error'
  assert 'died (status 3)' in items['mjx_physics.warp.8']['error']
  # The next item ran in a fresh child and recorded its own result.
  render = items['render.warp.rgb64.8']
  assert render['status'] in ('ok', 'error')
  assert 'died' not in render.get('error', '')

  out = tmp_path / 'b.json'
  proc = _run(['--smoke', '--only', 'mjx_physics.warp', '--max-item-s', '3',
               '--out', str(out)], tmp_path,
              {gpu.FAULT_ENV: 'mjx_physics.warp.8=hang'}, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  r = json.loads(out.read_text())['items']['mjx_physics.warp.8']
  assert r['status'] == 'timeout' and r['limit_s'] == 3, r


def test_item_limit_reserves_the_later_items_minimums():
  items = [gpu.Item(n, 'physics', n, {}, max_s=m, min_s=lo)
           for n, m, lo in (('a', 100, 30), ('b', 50, 20), ('c', 60, 10))]
  assert gpu.item_limit(items, 0, 500) == 100  # max_s binds
  assert gpu.item_limit(items, 0, 90) == 60  # 90 - (20 + 10)
  assert gpu.item_limit(items, 0, 59) is None  # 29 left < its 30
  assert gpu.item_limit(items, 2, 10) == 10  # the last item: no reserve
  assert gpu.item_limit(items, 2, 9.5) is None


@pytest.mark.parametrize('args, env, message', [
    (['--smoke', '--only', 'nosuchitem', '--out', 'x.json'], {}, 'no item'),
    (['--smoke'], {}, '--out'),
    (['--smoke', '--budget-s', '0', '--out', 'x.json'], {}, 'positive'),
    (['--smoke', '--max-item-s', '-1', '--out', 'x.json'], {}, 'positive'),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, args, env, message):
  proc = _run(args, tmp_path, env, timeout=60)
  assert proc.returncode == 2
  assert message in proc.stderr
  assert not os.listdir(tmp_path)


def test_markdown_marks_targets_met_only_on_gpu_runs():
  doc = dict(mode='gpu', started='t', budget_s=420., wall_s=400.,
             commit='abc', versions={'jax': '0.11.2', 'warp-lang': None},
             device=dict(backend='gpu', count=1, kinds=['NVIDIA H200']),
             items={
                 'train.sac': dict(status='ok', value=160_000., unit='u',
                                   compile_s=50., target=150_000.),
                 'render.x': dict(status='ok', value=90_000., unit='u',
                                  compile_s=5., target=100_000.),
                 'train.ppo': dict(status='error', error='Boom | x\ny'),
             })
  text = gpu.markdown(doc)
  assert '| train.sac | - | 160,000 | u | 50.0 | >= 150,000: yes | ok |' in text
  assert '>= 100,000: NO' in text
  assert '| error: Boom / x y |' in text  # one line, no stray column
  assert 'jax 0.11.2' in text and 'warp-lang' not in text
  assert '>= 150,000: yes' not in gpu.markdown(dict(doc, mode='smoke'))


def test_use_this_tree_maps_agents_without_an_install(tmp_path):
  # Hide the installed (editable) roxie: only the checkout is on the path.
  code = (
      'import sys\n'
      'sys.meta_path[:] = [f for f in sys.meta_path\n'
      '                    if "editable" not in type(f).__module__.lower()]\n'
      f'sys.path.insert(0, {os.path.join(ROOT, "benchmarks")!r})\n'
      'import gpu\n'
      'gpu.use_this_tree()\n'
      'import roxie.agents\n'
      'from roxie.agents import sac\n'
      'print(roxie.agents.__file__)\n')
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        text=True, timeout=120, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == os.path.join(ROOT, 'agents', '__init__.py')


def test_trim_wheel_keeps_the_named_parts_and_their_record(tmp_path):
  import csv  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  import zipfile  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / 'pkg-1.0-py3-none-any.whl')
  files = {'pkg/__init__.py': b'x = 1\n', 'pkg/suite/a.xml': b'<a/>',
           'pkg/suite/big/mesh.stl': b'0' * 100, 'pkg/locomotion/b.py': b'',
           'pkg-1.0.dist-info/METADATA': b'Name: pkg\n'}
  record = ''.join(f'{n},sha256=x,{len(d)}\n' for n, d in files.items())
  record += 'pkg-1.0.dist-info/RECORD,,\n'
  with zipfile.ZipFile(path, 'w') as z:
    for n, d in files.items():
      z.writestr(n, d)
    z.writestr('pkg-1.0.dist-info/RECORD', record)
  assert gpu.trim_wheel(path, ('pkg/__init__.py', 'pkg/suite/'),
                        ('pkg/suite/big/',)) == 2
  with zipfile.ZipFile(path) as z:
    names = sorted(z.namelist())
    rows = list(csv.reader(io.StringIO(
        z.read('pkg-1.0.dist-info/RECORD').decode())))
    assert z.read('pkg/suite/a.xml') == b'<a/>'
  assert names == ['pkg-1.0.dist-info/METADATA', 'pkg-1.0.dist-info/RECORD',
                   'pkg/__init__.py', 'pkg/suite/a.xml']
  assert [r[0] for r in rows] == ['pkg/__init__.py', 'pkg/suite/a.xml',
                                  'pkg-1.0.dist-info/METADATA',
                                  'pkg-1.0.dist-info/RECORD']
  assert rows[0] == ['pkg/__init__.py', 'sha256=x', '6']


def test_wheels_for_the_tpu_image_are_cp311_and_bring_what_it_lacks():
  # Bug reproduced: --prepare-wheels could only fetch cp312 wheels for the
  # GPU image, which fail to install on the TPU image's Python 3.11, and left
  # out chex and optax, which that image lacks.
  tpu = gpu.download_command('/d', 'tpu', ['chex==1'])
  assert tpu[tpu.index('--python-version') + 1] == '3.11'
  gpu_cmd = gpu.download_command('/d', 'gpu', ['chex==1'])
  assert gpu_cmd[gpu_cmd.index('--python-version') + 1] == '3.12'
  assert tpu[-1] == 'chex==1' and tpu.count('--platform') == 5
  assert {'chex', 'optax', 'lxml'} <= set(gpu.IMAGES['tpu']['wheels'])
  # device_dmc.sh's wheels: checkpoints (orbax) in, MJX out.
  dmc_wheels = set(gpu.IMAGES['tpu-dmc']['wheels'])
  assert {'chex', 'optax', 'mujoco', 'orbax-checkpoint', 'tensorstore'
          } <= dmc_wheels
  assert not {'mujoco-mjx', 'trimesh'} & dmc_wheels
  assert 'device_dmc.sh' in gpu.IMAGES['tpu-dmc']['command']
  assert set(gpu.DEVICE_WHEELS) <= set(gpu.IMAGES['tpu']['wheels'])
  assert 'chex' not in gpu.IMAGES['gpu']['wheels']
  # The image's own JAX stays first on PYTHONPATH there; pip ignores the
  # machine's config, whose index is local.
  cmd = gpu.IMAGES['tpu']['command']
  assert 'PYTHONPATH=$PYTHONPATH:/tmp/site' in cmd
  assert cmd.startswith('PIP_CONFIG_FILE=/dev/null ')
  assert gpu.DEVICE_COMMAND == gpu.IMAGES['gpu']['command']
  assert gpu.parse_args(['--prepare-wheels', '/d', '--image', 'tpu']).image \
      == 'tpu'


def test_mujoco_wheel_loses_studio_and_the_tree_counts_against_the_carry(
    tmp_path):
  # Bug reproduced: the 'tpu-dmc' wheels (61.4 MiB) passed the 64 MiB check
  # alone, but with the working tree (5.5 MiB) the device tool refused the
  # call. MuJoCo Studio's GUI (mujoco/experimental/, 15 MB) is never
  # imported; the tracked files now count in the total.
  import zipfile  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / 'mujoco-3.17.0-cp311-cp311-linux_x86_64.whl')
  names = ['mujoco/__init__.py', 'mujoco/libmujoco.so.3.17.0',
           'mujoco/experimental/studio/__init__.py',
           'mujoco.libs/libGL.so', 'mujoco-3.17.0.dist-info/METADATA']
  with zipfile.ZipFile(path, 'w') as z:
    for n in names:
      z.writestr(n, b'x')
  assert gpu.trim_wheel(path, *gpu.wheel_trim(os.path.basename(path))) == 1
  with zipfile.ZipFile(path) as z:
    assert sorted(z.namelist()) == sorted(
        n for n in names if 'experimental' not in n)
  repo = tmp_path / 'repo'
  repo.mkdir()
  (repo / 'a.txt').write_bytes(b'12345')
  (repo / 'untracked.bin').write_bytes(b'0' * 100)
  subprocess.run(['git', 'init', '-q', str(repo)], check=True)
  subprocess.run(['git', '-C', str(repo), 'add', 'a.txt'], check=True)
  # The device tool carries untracked files git does not ignore too (the
  # check counted tracked files only): 5 + 100.
  assert gpu.tree_bytes(str(repo)) == 105
  # ... but not ignored ones, nor the wheel folder, counted on its own.
  (repo / '.gitignore').write_bytes(b'big/\n')  # 5 bytes, not ignored
  (repo / 'big').mkdir()
  (repo / 'big' / 'x.bin').write_bytes(b'0' * 1000)
  (repo / 'whl').mkdir()
  (repo / 'whl' / 'w.whl').write_bytes(b'0' * 2000)
  assert gpu.tree_bytes(str(repo)) == 2110
  assert gpu.tree_bytes(str(repo), skip=str(repo / 'whl')) == 110
  assert gpu.tree_bytes(str(tmp_path / 'nowhere')) == 0
