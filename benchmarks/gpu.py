"""The GPU benchmark in one run: MJX physics, training, Warp renderer, compiles.

One command on one accelerator (`bash benchmarks/gpu.sh`, or this file) that
measures, each item in turn within one time budget (`--budget-s`, default
420 s, so that a 15-minute device lease with its 1-2 minute start has room
for a rerun):

  mjx_physics.<impl>.<B>  MJX env steps/s on HumanoidWalk, random actions in a
                          jitted `lax.scan` (benchmarks/env_throughput.py's
                          `_scan`), impl 'jax' and 'warp' at B = 1,024 /
                          4,096 / 8,192 envs, with the scan's compile time;
  train.sac, train.ppo    training env steps/s of the compiled loop on
                          HumanoidWalk, backend MJX, with the published large
                          settings (benchmarks/train_sps.py's `measure` and
                          `LARGE`: 1,024 envs, batch 512, 20 updates per 2,048
                          env steps; PPO 32 x 1,024 rollouts), warm-up 0, and
                          its init and compile times;
  render.warp.rgb64.<B>   MJX's Warp renderer: frames/s (= env steps/s, one
                          64x64 RGB frame per env step, physics included) of
                          CartpoleSwingup at 1,024 envs
                          (benchmarks/render_throughput.py's `_runner`).

Targets (one H200): off-policy training >= 150,000 env steps/s; the Warp
renderer >= 100,000 frames/s. The JSON records each item's value or the text
of its error (where Warp is not installed, the Warp items' result is
roxie.envs's message naming what to install).

How it keeps to the budget: each item runs in a child process (one child runs
a group of items in turn and reports each as it ends); the parent kills a
child whose item overruns its own limit (the smaller of the item's `max_s` and
what the budget leaves after the later items' minimums) and carries on with
the group's next items in a fresh child; an item whose minimum no longer fits
is skipped and says so. A crash (a segfault in a kernel, an out-of-memory)
costs one item, not the run. The JSON is rewritten after every item, so a run
cut short still leaves what it measured. Output: the JSON at `--out`, else
`$OUT/gpu.json` (the device tool returns $OUT); a markdown table beside it
(`gpu.md`) and on stdout, for benchmarks/RESULTS-gpu.md.

`--smoke` runs every item at toy sizes on the CPU (PendulumSwingup, 8 envs,
each recipe's default CPU config on the native backend, a few hundred steps)
in about a minute on 2 cores: tests/test_gpu_script.py runs it in CI, so the
script cannot rot.

What the GPU machine needs (it has no network; see
/work/.library/device/KINDS.md): its image has Python 3.12 with jax 0.11.2
and the CUDA 13 plugin, chex, optax, numpy, scipy, absl-py, lxml and
orbax-checkpoint, but not MuJoCo. This script installs nothing and needs no
`pip install -e .`: it imports roxie from this checkout (mapping `agents/` to
`roxie.agents` itself where roxie is not installed). The rest travels as
wheels: `python benchmarks/gpu.py --prepare-wheels .whl` (here, with
network) downloads the cp312 wheels of `DEVICE_WHEELS` at this environment's
versions (mujoco 3.17.0, 25.4 MiB whole, 10.6 without MuJoCo Studio's GUI;
mujoco-mjx, 6.9; dm-haiku, jmp, dm-tree, dm-env, trimesh, glfw, 1.5
together) and dm-control 1.0.50 trimmed to the suite (56 MB whole, 4.7 MiB
trimmed), well under the 64 MiB a device call carries with the working
tree (5.5 MiB: what git does not ignore; the size check counts it). There, with `.whl` carried (and
ignored by git), run `DEVICE_COMMAND` (one line there, wrapped here):

  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir
    --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    || exit; bash benchmarks/gpu.sh

roxie pins jax < 0.11 and the machine's jax is 0.11.2; the jax, jaxlib and
CUDA plugin wheels are too large to carry, so the run uses 0.11.2 (the JSON
records every version). NVIDIA Warp (`roxie[warp]` = mujoco-mjx[warp] =
warp-lang 1.18.0) cannot travel in one call: its wheel is 149 MB, 115 MB of
it one compressed library (warp/bin/warp.so). Without it the Warp items
record "not installed" and the rest runs. (The only way to bring it is in
pieces over successive calls on a machine kept warm, 30 s between calls,
joined and installed there before the run.) Sizes measured with `pip
download --python-version 3.12 --platform manylinux_2_28_x86_64` on
2026-12-01.

The TPU image (tpu-v5e: Python 3.11 with JAX 0.10.2, numpy and scipy, and
neither chex nor optax) takes `--prepare-wheels .whl --image tpu`: cp311
wheels of the same list plus what that image lacks (`TPU_EXTRA_WHEELS`),
and runs `IMAGES['tpu']['command']` there (`--image tpu-dmc`: the wheels
`benchmarks/device_dmc.sh` needs, MJX left out and orbax added, 46.3 MiB,
51.8 with the tree, on 2026-12-07). On one TPU v5e
(2026-12-06) every MJX item overran its limit: compiling the HumanoidWalk
scan took 125 s, and it stepped 3,100 env steps/s at 128 envs, no more than
the native backend on 2 CPU cores (benchmarks/RESULTS.md, "MJX on one TPU
v5e"); the limits here are set for a GPU. What a TPU does serve is the
native backend's split, networks on the chip and physics on the host
(RESULTS.md, "SAC with BRO's critic and 4x the updates on one TPU v5e").

  bash benchmarks/gpu.sh                          # on the GPU machine
  python benchmarks/gpu.py --smoke --out /tmp/gpu.json   # anywhere, ~1 min
  python benchmarks/gpu.py --budget-s 300 --only mjx_physics.jax,train.sac
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCHEMA = 1
OFF_POLICY_TARGET = 150_000  # env steps/s, off-policy training, one H200.
RENDER_TARGET = 100_000  # frames/s, Warp renderer at 64x64.
# For tests of the fault handling: 'NAME=hang' or 'NAME=crash' makes that
# item hang or kill its child process.
FAULT_ENV = 'ROXIE_GPU_FAULT'
VERSION_PACKAGES = ('jax', 'jaxlib', 'jax-cuda13-plugin', 'jax-cuda12-plugin',
                    'mujoco', 'mujoco-mjx', 'warp-lang', 'dm-control',
                    'dm-haiku', 'optax', 'chex', 'numpy')


class UsageError(Exception):
  """Bad input: one line on stderr, exit status 2, nothing written."""


@dataclasses.dataclass(frozen=True)
class Item:
  """One measurement: what it is, its settings, and its time limits.

  Attributes:
    name: its key in the JSON ('mjx_physics.jax.1024').
    kind: 'physics', 'train' or 'render'.
    group: items of one group run in turn in one child process.
    params: the settings `run_item` reads (task, envs, steps, agent, ...).
    max_s: the most seconds it may take (compile included).
    min_s: the least it needs to be worth starting; later items keep this
      much of the budget for themselves.
    target: the figure the value should reach on one H200, if there is one.
  """
  name: str
  kind: str
  group: str
  params: Dict[str, Any]
  max_s: float
  min_s: float
  target: Optional[float] = None


def plan(smoke: bool) -> List[Item]:
  """The items of a run, in the order they run (the most wanted first).

  HumanoidWalk's MJX physics at the smallest size comes first (a quick check
  that MJX runs at all), then the two targets' items (SAC training, the Warp
  renderer) and PPO, then the larger physics sizes.

  Args:
    smoke: toy sizes on the CPU (CI) instead of the GPU sizes.

  Returns:
    The items; a group's items are adjacent (one child runs them in turn).
  """
  if smoke:
    # MJX compiles cost tens of CPU seconds even for a pendulum, so the
    # smoke run compiles one MJX physics size and trains on the native
    # backend: the same code paths at a fraction of the cost.
    physics = dict(task='PendulumSwingup', steps=50, repeats=2)
    physics_envs, render_envs = (8,), 8
    train = dict(task='PendulumSwingup', backend='cpu', large=False,
                 steps=256, calls=1, large_iterations=1)
    render = dict(task='PendulumSwingup', steps=5, repeats=2, size=64)
    # Generous limits: on a shared 2-core machine a compile can take 4x its
    # idle time, and the smoke run checks the code, not the speed.
    limits = dict(physics=(240, 5), train=(240, 5), warp=(120, 2),
                  render=(120, 2))
  else:
    physics = dict(task='HumanoidWalk', steps=100, repeats=3)
    physics_envs, render_envs = (1024, 4096, 8192), 1024
    # Timed calls of 20 (SAC: 40,960 env steps) and 10 (PPO: 327,680)
    # iterations each, so launch overheads do not dominate.
    train = dict(task='HumanoidWalk', backend='mjx', large=True, steps=0,
                 calls=3, large_iterations=60)
    render = dict(task='CartpoleSwingup', steps=50, repeats=3, size=64)
    limits = dict(physics=(90, 30), train=(180, 90), warp=(60, 10),
                  render=(120, 40))
  items = [Item(f'mjx_physics.jax.{physics_envs[0]}', 'physics',
                'mjx_physics.jax.small',
                dict(physics, impl='jax', envs=physics_envs[0]),
                *limits['physics'])]
  for agent, iters in (('sac', 60), ('ppo', 30)):
    params = dict(train, agent=agent)
    if not smoke:
      params['large_iterations'] = iters
    items.append(Item(f'train.{agent}', 'train', f'train.{agent}', params,
                      *limits['train'],
                      target=OFF_POLICY_TARGET if agent == 'sac' else None))
  # impl='warp' physics shares the Warp renderer's child (one import of
  # Warp, one kernel build) and goes first in it.
  for b in physics_envs:
    items.append(Item(f'mjx_physics.warp.{b}', 'physics', 'warp',
                      dict(physics, impl='warp', envs=b), *limits['warp']))
  items.append(Item(f'render.warp.rgb{render["size"]}.{render_envs}', 'render',
                    'warp', dict(render, envs=render_envs), *limits['render'],
                    target=RENDER_TARGET))
  for b in physics_envs[1:]:
    items.append(Item(f'mjx_physics.jax.{b}', 'physics',
                      'mjx_physics.jax.large', dict(physics, impl='jax',
                                                    envs=b),
                      *limits['physics']))
  if smoke:  # One child for all: imports cost more than the items here.
    items = [dataclasses.replace(it, group='smoke') for it in items]
  return items


def selected(smoke: bool, only: Optional[str],
             max_item_s: Optional[float] = None) -> List[Item]:
  """The plan's items whose names start with one of `only`'s (all if None).

  Args:
    smoke: the plan's sizes.
    only: comma-separated names or prefixes, or None.
    max_item_s: if given, a cap on every item's max_s (and min_s).

  Raises:
    UsageError: a name in `only` matches no item.
  """
  items = plan(smoke)
  if max_item_s is not None:
    items = [dataclasses.replace(it, max_s=min(it.max_s, max_item_s),
                                 min_s=min(it.min_s, max_item_s))
             for it in items]
  if not only:
    return items
  wanted = [w for w in only.split(',') if w]
  unknown = [w for w in wanted if not any(it.name.startswith(w)
                                          for it in items)]
  if unknown:
    raise UsageError(f'--only: no item matches {", ".join(unknown)}; items: '
                     f'{", ".join(it.name for it in items)}')
  return [it for it in items if any(it.name.startswith(w) for w in wanted)]


def describe(item: Item) -> str:
  """The item's settings in a few words (for a row whose item failed)."""
  p = item.params
  if item.kind == 'train':
    return (f"{p['task']}, {p['agent']}, backend {p['backend']}, "
            f"{'published large settings' if p['large'] else 'default config'}")
  what = f"impl {p['impl']}" if item.kind == 'physics' else (
      f"{p['size']}x{p['size']} RGB")
  return f"{p['task']}, {p['envs']:,} envs, {what}"


def item_limit(items: Sequence[Item], index: int, remaining: float
               ) -> Optional[float]:
  """Seconds item `index` may take, or None if its minimum no longer fits.

  Args:
    items: the whole plan, in order.
    index: the item about to start.
    remaining: seconds left of the run's budget.

  Returns:
    min(its max_s, what is left after reserving the later items' min_s), or
    None when that is less than its own min_s.
  """
  reserve = sum(it.min_s for it in items[index + 1:])
  left = remaining - reserve
  if left < items[index].min_s:
    return None
  return min(items[index].max_s, left)


# ------------------------------------------------- wheels for the GPU machine

# What each device image lacks of what roxie imports (KINDS.md's package
# lists against the modules a HumanoidWalk MJX run loads), as wheels for the
# image's Python; versions are pinned to this environment's, the ones tested
# here. The GPU image has chex, optax, absl-py and lxml; the TPU image
# (tpu-v5e) has JAX 0.10.2, numpy and scipy and little else.
DEVICE_WHEELS = ('mujoco', 'mujoco-mjx', 'dm-control', 'dm-haiku', 'jmp',
                 'dm-tree', 'dm-env', 'trimesh', 'glfw')
TPU_EXTRA_WHEELS = ('chex', 'optax', 'absl-py', 'toolz', 'etils',
                    'cloudpickle', 'tabulate', 'typing_extensions', 'wrapt',
                    'Pygments', 'lxml')
# `benchmarks/device_dmc.sh` on the TPU image (image 'tpu-dmc'): the native
# backend's physics without MJX (whose 6.9 MiB and trimesh it never imports),
# and `roxie train`'s checkpoints, orbax and what it imports (tensorstore is
# 20.8 MiB of it): 46 MiB with MuJoCo trimmed (61 whole, which with the
# tree's 5.5 was more than a call carries).
NATIVE_WHEELS = tuple(w for w in DEVICE_WHEELS
                      if w not in ('mujoco-mjx', 'trimesh'))
CHECKPOINT_WHEELS = ('orbax-checkpoint', 'tensorstore', 'humanize', 'msgpack',
                     'protobuf', 'simplejson')
# dm_control's 56 MB wheel is mostly locomotion and manipulation assets;
# roxie reads the suite's model files through these subpackages alone.
DM_CONTROL_KEEP = ('dm_control/__init__.py', 'dm_control/_render/',
                   'dm_control/mujoco/', 'dm_control/rl/', 'dm_control/suite/',
                   'dm_control/utils/')
DM_CONTROL_DROP = ('dm_control/suite/dog_assets/',
                   'dm_control/suite/all_domains.png')
# MuJoCo's wheel carries MuJoCo Studio's GUI (mujoco/experimental/: Dear
# ImGui, ImPlot, Studio), 15 of its 26 MB, which neither the physics nor
# rendering imports; without it the 'tpu-dmc' wheels and the working tree fit
# in one device call's 64 MiB.
MUJOCO_KEEP = ('mujoco/', 'mujoco.libs/')
MUJOCO_DROP = ('mujoco/experimental/',)
# Wheel file-name prefix: what of it to keep and to drop (`trim_wheel`).
TRIMS = {'dm_control-': (DM_CONTROL_KEEP, DM_CONTROL_DROP),
         'mujoco-': (MUJOCO_KEEP, MUJOCO_DROP)}


def wheel_trim(name: str) -> Optional[Tuple[Sequence[str], Sequence[str]]]:
  """`TRIMS`' (keep, drop) for the wheel file `name`, or None to keep it."""
  if not name.endswith('.whl'):
    return None
  return next((t for p, t in TRIMS.items() if name.startswith(p)), None)


CARRY_LIMIT = 64 * 2**20  # bytes one device call may carry
_PLATFORMS = ('manylinux_2_28_x86_64', 'manylinux_2_27_x86_64',
              'manylinux_2_17_x86_64', 'manylinux2014_x86_64',
              'manylinux1_x86_64')
_INSTALL = ('python3 -m pip install -q --no-index --no-deps --no-compile '
            '--no-cache-dir --upgrade --target /tmp/site .whl/*.whl')
# The image's Python, the wheels it lacks, and the command to run there. On
# the TPU image pip must ignore the machine's config (its index is local) and
# the wheels go after the image's own folder on PYTHONPATH, so that its JAX
# stays first.
IMAGES = {
    'gpu': dict(python='3.12', wheels=DEVICE_WHEELS,
                command=f'{_INSTALL} && export PYTHONPATH=/tmp/site || exit; '
                'bash benchmarks/gpu.sh'),
    'tpu': dict(python='3.11', wheels=DEVICE_WHEELS + TPU_EXTRA_WHEELS,
                command='PIP_CONFIG_FILE=/dev/null ' + _INSTALL.replace(
                    'install -q', 'install --isolated -q') + ' && '
                'export PYTHONPATH=$PYTHONPATH:/tmp/site || exit; '
                'bash benchmarks/gpu.sh'),
    'tpu-dmc': dict(python='3.11',
                    wheels=NATIVE_WHEELS + TPU_EXTRA_WHEELS + CHECKPOINT_WHEELS,
                    command='WHEELS=.whl bash benchmarks/device_dmc.sh SECONDS '
                    'AGENT BUDGETS VARIANT SETS TASK...'),
}
DEVICE_COMMAND = IMAGES['gpu']['command']


def download_command(folder: str, image: str, pins: Sequence[str]
                     ) -> List[str]:
  """The `pip download` of `pins` as binary wheels for `image`'s Python."""
  cmd = [sys.executable, '-m', 'pip', 'download', '-q', '--no-deps',
         '--only-binary=:all:', '--python-version', IMAGES[image]['python'],
         '--implementation', 'cp', '-d', folder]
  for plat in _PLATFORMS:
    cmd += ['--platform', plat]
  return cmd + list(pins)


def trim_wheel(path: str, keep: Sequence[str], drop: Sequence[str] = ()
               ) -> int:
  """Rewrites a wheel with only the members under `keep`, minus `drop`.

  The .dist-info folder always stays, and its RECORD lists the kept files
  alone, so pip installs the smaller wheel as it would the whole one.

  Args:
    path: the .whl file, rewritten in place.
    keep: path prefixes inside the wheel to keep.
    drop: path prefixes to leave out even under `keep`.

  Returns:
    How many members were left out.
  """
  import csv  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  import zipfile  # pylint: disable=g-import-not-at-top

  def kept(name: str) -> bool:
    if name.split('/')[0].endswith('.dist-info'):
      return True
    return (any(name.startswith(k) for k in keep)
            and not any(name.startswith(d) for d in drop))

  left_out = 0
  with zipfile.ZipFile(path) as src, zipfile.ZipFile(
      path + '.tmp', 'w', zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
      if not kept(info.filename):
        left_out += 1
        continue
      data = src.read(info)
      if info.filename.endswith('.dist-info/RECORD'):
        rows = [r for r in csv.reader(io.StringIO(data.decode()))
                if r and kept(r[0])]
        out = io.StringIO()
        csv.writer(out, lineterminator='\n').writerows(rows)
        data = out.getvalue().encode()
      dst.writestr(info, data)
  os.replace(path + '.tmp', path)
  return left_out


def tree_bytes(root: str, skip: str = '') -> int:
  """The bytes of the working tree a device call carries from `root`.

  That is the files git tracks and the untracked ones it does not ignore
  (the device tool copies both), less those under `skip` (the wheel folder,
  counted on its own); 0 outside a checkout. They travel with the wheels,
  within the same 64 MiB.
  """
  try:
    out = subprocess.run(
        ['git', '-C', root, 'ls-files', '-z', '--cached', '--others',
         '--exclude-standard'], capture_output=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    return 0
  skip = os.path.realpath(skip) + os.sep if skip else None
  total = 0
  for rel in set(out.decode().split('\0')) - {''}:
    path = os.path.join(root, rel)
    if skip and os.path.realpath(path).startswith(skip):
      continue
    if os.path.isfile(path):
      total += os.path.getsize(path)
  return total


def prepare_wheels(folder: str, image: str = 'gpu') -> int:
  """Downloads (here, with network) the wheels a device image lacks.

  manylinux wheels of `IMAGES[image]`'s list, for its Python, at this
  environment's versions, go to `folder`; dm_control's is trimmed to the
  suite. Prints their sizes against the 64 MiB a device call carries, and the
  command to run there.

  Returns:
    The exit status: 0, or 1 if pip failed or the wheels are too large.
  """
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  pins = [f'{n}=={metadata.version(n)}' for n in IMAGES[image]['wheels']]
  cmd = download_command(folder, image, pins)
  if subprocess.run(cmd).returncode != 0:
    print(f'gpu.py: pip download failed: {" ".join(cmd)}', file=sys.stderr)
    return 1
  names = sorted(os.listdir(folder))
  for name in names:
    trim = wheel_trim(name)
    if trim:
      trim_wheel(os.path.join(folder, name), *trim)
  total = 0
  for name in names:
    size = os.path.getsize(os.path.join(folder, name))
    total += size
    print(f'{size / 2**20:7.1f} MiB  {name}')
  tree = tree_bytes(ROOT, skip=folder)
  total += tree
  print(f'{tree / 2**20:7.1f} MiB  the working tree (what git does not '
        'ignore)')
  print(f'{total / 2**20:7.1f} MiB in all (a device call carries at most '
        f'{CARRY_LIMIT / 2**20:.0f} MiB)')
  print('On the device (carry the folder; `echo /.whl/ >> .git/info/exclude` '
        f'if it is .whl):\n  {IMAGES[image]["command"]}')
  return 0 if total < CARRY_LIMIT else 1


# ---------------------------------------------------------------- the child


def use_this_tree() -> None:
  """Makes `import roxie` (and `roxie.agents`) resolve to this checkout.

  Installed, roxie maps the top-level agents/ folder to `roxie.agents`; on a
  machine where it is not installed (the GPU machine, offline), this does the
  same mapping by hand, so nothing needs installing.
  """
  if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
  try:
    importlib.import_module('roxie.agents')
  except ModuleNotFoundError as e:
    if e.name != 'roxie.agents':
      raise
    folder = os.path.join(ROOT, 'agents')
    spec = importlib.util.spec_from_file_location(
        'roxie.agents', os.path.join(folder, '__init__.py'),
        submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules['roxie.agents'] = module
    spec.loader.exec_module(module)
    import roxie  # pylint: disable=g-import-not-at-top
    roxie.agents = module


def _versions() -> Dict[str, str]:
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  out = {'python': platform.python_version()}
  for name in VERSION_PACKAGES:
    try:
      out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      out[name] = None
  return out


def device_record() -> Dict[str, Any]:
  """JAX's view of the accelerator (from inside a child, which imports JAX)."""
  import jax  # pylint: disable=g-import-not-at-top
  devices = jax.devices()
  return dict(backend=jax.default_backend(), count=len(devices),
              kinds=sorted({d.device_kind for d in devices}),
              jax=jax.__version__)


def _best(fn, repeats: int) -> float:
  best = float('inf')
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


def _physics(p: Dict[str, Any]) -> Dict[str, Any]:
  import env_throughput  # pylint: disable=g-import-not-at-top
  from roxie import envs  # pylint: disable=g-import-not-at-top
  env = envs.make(p['task'], backend='mjx', num_envs=p['envs'], impl=p['impl'])
  once, compile_s = env_throughput._scan(env, p['steps'])  # pylint: disable=protected-access
  seconds = _best(once, p['repeats'])
  return dict(value=p['envs'] * p['steps'] / seconds, unit='env steps/s',
              compile_s=compile_s,
              detail=f"{p['task']}, {p['envs']:,} envs, {p['steps']} steps "
              f"per scan, best of {p['repeats']}")


def _train(p: Dict[str, Any]) -> Dict[str, Any]:
  import train_sps  # pylint: disable=g-import-not-at-top
  args = argparse.Namespace(task=p['task'], large=p['large'], obs='state',
                            resolution=64, steps=p['steps'], calls=p['calls'],
                            large_iterations=p['large_iterations'])
  r = train_sps.measure(p['agent'], p['backend'], args)
  settings = 'published large settings' if p['large'] else 'default config'
  backend = {'mjx': 'MJX', 'cpu': 'native'}[p['backend']]
  return dict(value=r['sps'], unit='env steps/s', compile_s=r['compile_s'],
              init_s=r['init_s'], grad_steps_per_s=r['ups'],
              learned=r['learned'],
              detail=f"{p['task']}, {backend}, {settings}: {r['envs']:,} envs, "
              f"batch {r['batch']}, {r['per_call']:,} env steps per call")


def _render(p: Dict[str, Any]) -> Dict[str, Any]:
  import render_throughput  # pylint: disable=g-import-not-at-top
  from roxie import envs  # pylint: disable=g-import-not-at-top
  spec = envs.PixelSpec(height=p['size'], width=p['size'], rgb=True,
                        depth=False, renderer='warp')
  env = envs.make(p['task'], backend='mjx', num_envs=p['envs'], pixels=spec)
  fn = render_throughput._runner(env, p['steps'])  # pylint: disable=protected-access
  t0 = time.perf_counter()
  fn()  # Traces, compiles (and builds Warp's kernels) and runs once.
  first_s = time.perf_counter() - t0
  seconds = _best(fn, p['repeats'])
  return dict(value=p['envs'] * p['steps'] / seconds, unit='frames/s',
              compile_s=first_s,
              detail=f"{p['task']}, {p['envs']:,} envs, {p['size']}x"
              f"{p['size']} RGB, frame stack 3, physics included")


RUNNERS = {'physics': _physics, 'train': _train, 'render': _render}


def _emit(path: str, record: Dict[str, Any]) -> None:
  with open(path, 'a') as f:
    f.write(json.dumps(record) + '\n')
    f.flush()
    os.fsync(f.fileno())


def child_main(names: Sequence[str], smoke: bool, only: Optional[str],
               max_item_s: Optional[float], until: float, lines: str) -> int:
  """Runs the named items in turn, reporting each to the `lines` file.

  Args:
    names: item names, in plan order.
    smoke: the plan's sizes.
    only: the run's --only (the later items' reserve counts those alone).
    max_item_s: the run's --max-item-s.
    until: the run's end (time.time() seconds).
    lines: a JSON-lines file: {'device': ...} first, then per item a 'start'
      record (with the limit the parent enforces) and a result record.
  """
  items = selected(smoke, only, max_item_s)
  index = {it.name: i for i, it in enumerate(items)}
  sys.path.insert(0, HERE)
  try:
    use_this_tree()
    _emit(lines, {'device': device_record()})
  except Exception as e:  # pylint: disable=broad-except
    _emit(lines, {'device_error': f'{type(e).__name__}: {e}'})
  for name in names:
    i = index[name]
    limit = item_limit(items, i, until - time.time())
    if limit is None:
      _emit(lines, dict(name=name, status='skipped', error=(
          f'{max(0, until - time.time()):.0f} s were left of the '
          f'budget, too few for its {items[i].min_s:.0f} s and the later '
          "items' minimums")))
      continue
    _emit(lines, dict(name=name, start=time.time(), limit_s=limit))
    t0 = time.perf_counter()
    fault = dict(x.split('=', 1) for x in os.environ.get(FAULT_ENV, '').split(
        ',') if '=' in x).get(name)
    if fault == 'hang':
      time.sleep(3600)
    elif fault == 'crash':
      os._exit(3)  # pylint: disable=protected-access
    try:
      result = RUNNERS[items[i].kind](items[i].params)
      record = dict(name=name, status='ok', **result)
    except Exception as e:  # pylint: disable=broad-except
      record = dict(name=name, status='error',
                    error=f'{type(e).__name__}: {e}'.strip()[:2000],
                    traceback=traceback.format_exc()[-3000:])
    record['seconds'] = time.perf_counter() - t0
    _emit(lines, record)
  return 0


# --------------------------------------------------------------- the parent


def _nvidia_smi() -> Optional[str]:
  try:
    out = subprocess.run(
        ['nvidia-smi', '--query-gpu=name,driver_version,memory.total',
         '--format=csv,noheader'], capture_output=True, text=True, timeout=20)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip() or None


def _read_lines(path: str) -> List[Dict[str, Any]]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    text = f.read()
  return [json.loads(x) for x in text[:text.rfind('\n') + 1].splitlines()
          if x.strip()]


def _kill(proc: subprocess.Popen) -> None:
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass
  proc.wait()


def _run_group(group: List[Item], args, until: float, doc: Dict[str, Any],
               write) -> None:
  """Runs one group's items in child processes, a fresh child per fault.

  A child reports each item as it starts (with its limit) and ends; one
  that overruns its limit is killed and recorded as a timeout, one that dies
  is recorded with the child's last output, and the group's later items go
  on in a new child.
  """
  pending = [it.name for it in group]
  results = doc['items']
  attempt = 0
  while pending and time.time() < until:
    attempt += 1
    lines = os.path.join(args.work, f'{group[0].group}.{attempt}.jsonl')
    cmd = [sys.executable, os.path.abspath(__file__), '--child',
           ','.join(pending), '--until', repr(until), '--lines', lines]
    if args.smoke:
      cmd.append('--smoke')
    if args.only:
      cmd += ['--only', args.only]
    if args.max_item_s is not None:
      cmd += ['--max-item-s', repr(args.max_item_s)]
    with open(lines + '.log', 'w') as log:
      proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True, cwd=ROOT)
      seen, current, limit, deadline = 0, None, None, until + 30
      timed_out = False
      while True:
        done = proc.poll() is not None
        records = _read_lines(lines)
        for r in records[seen:]:
          if 'device' in r:
            doc['device'].update(r['device'])
          elif 'device_error' in r:
            doc['device'].setdefault('error', r['device_error'])
          elif 'start' in r:
            current, limit = r['name'], r['limit_s']
            deadline = time.time() + limit + 3  # + the child's own overhead
            print(f'[gpu] {current}: started (limit {limit:.0f} s)',
                  flush=True)
          else:
            results[r['name']] = r
            pending.remove(r['name'])
            current, deadline = None, until + 30
            _say(r)
            write()
        seen = len(records)
        if done:
          break
        if time.time() > deadline:
          timed_out = True
          _kill(proc)
          break
        time.sleep(0.25)
    if not pending:
      break
    with open(lines + '.log') as f:
      tail = f.read()[-1500:]
    if current is None:
      # Died before an item started (an import failed, say): the rest
      # fail with its output, since a new child would fail the same way.
      for name in pending:
        results[name] = dict(
            name=name, status='error',
            error=f'the child process exited (status {proc.returncode}) '
            f'before this item started; its last output:\n{tail}')
        _say(results[name])
      pending.clear()
    elif timed_out:
      results[current] = dict(
          name=current, status='timeout', limit_s=limit,
          error=f'still running at its limit of {limit:.0f} s (killed)')
    else:
      results[current] = dict(
          name=current, status='error',
          error=f'the child process died (status {proc.returncode}) during '
          f'this item; its last output:\n{tail}')
    if current is not None:
      pending.remove(current)
      _say(results[current])
    write()
  for name in pending:
    results[name] = dict(name=name, status='skipped',
                         error='the budget was spent')


def _say(r: Dict[str, Any]) -> None:
  if r.get('status') == 'ok':
    print(f'[gpu] {r["name"]}: {r["value"]:,.0f} {r["unit"]} (compile '
          f'{r.get("compile_s", float("nan")):.1f} s, {r["seconds"]:.0f} s)',
          flush=True)
  else:
    first = str(r.get('error', '')).splitlines()[0][:200]
    print(f'[gpu] {r["name"]}: {r.get("status")}: {first}', flush=True)


def _fmt(x: Optional[float], digits: int = 0) -> str:
  if x is None:
    return '-'
  return f'{x:,.{digits}f}'


def markdown(doc: Dict[str, Any]) -> str:
  """The run as markdown: a header of device and versions, then one table.

  Args:
    doc: the JSON document `main` writes.

  Returns:
    Text to paste into benchmarks/RESULTS-gpu.md.
  """
  dev = doc['device']
  v = doc['versions']
  kinds = ', '.join(dev.get('kinds') or []) or '?'
  lines = [
      f'### {doc["mode"]} run, {doc["started"]}',
      '',
      f'device: {dev.get("backend", "?")} x{dev.get("count", "?")} ({kinds}); '
      f'nvidia-smi: {dev.get("nvidia_smi") or "-"}; {dev.get("cpu", "?")}, '
      f'{dev.get("cores", "?")} cores',
      'versions: ' + ', '.join(f'{k} {x}' for k, x in v.items() if x),
      f'budget {doc["budget_s"]:.0f} s, took {doc.get("wall_s", 0):.0f} s; '
      f'roxie commit {doc.get("commit", "?")}',
      '',
      '| item | setting | value | unit | compile s | target | status |',
      '|---|---|---:|---|---:|---|---|',
  ]
  for name, r in doc['items'].items():
    target = r.get('target')
    if target is None:
      met = '-'
    elif r.get('status') != 'ok' or doc['mode'] == 'smoke':
      met = f'>= {target:,.0f}'
    else:
      met = f'>= {target:,.0f}: {"yes" if r["value"] >= target else "NO"}'
    status = r.get('status', '?')
    if status != 'ok':
      err = ' '.join(str(r.get('error', '')).split())
      status = f'{status}: {err[:160]}'.replace('|', '/')
    lines.append(
        f'| {name} | {r.get("detail", "-")} | {_fmt(r.get("value"))} | '
        f'{r.get("unit", "-")} | {_fmt(r.get("compile_s"), 1)} | {met} | '
        f'{status} |')
  return '\n'.join(lines) + '\n'


def _commit() -> str:
  try:
    return subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], cwd=ROOT,
                          capture_output=True, text=True, timeout=10
                          ).stdout.strip() or 'unknown'
  except (OSError, subprocess.SubprocessError):
    return 'unknown'


def _write_json(path: str, doc: Dict[str, Any]) -> None:
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(doc, f, indent=1, default=str)
  os.replace(tmp, path)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--smoke', action='store_true',
                 help='toy sizes on the CPU (CI), about a minute on 2 cores')
  p.add_argument('--budget-s', type=float, default=None,
                 help='the whole run, seconds (default 420; --smoke 900)')
  p.add_argument('--out', default=None,
                 help='the JSON (default $OUT/gpu.json); gpu.md beside it')
  p.add_argument('--only', default=None,
                 help='comma-separated item names or prefixes')
  p.add_argument('--max-item-s', type=float, default=None,
                 help="cap every item's time limit at this many seconds")
  p.add_argument('--prepare-wheels', default=None, metavar='DIR',
                 help='here, with network: download the wheels the GPU '
                 'machine lacks into DIR, and print the command for it')
  p.add_argument('--image', default='gpu', choices=sorted(IMAGES),
                 help="with --prepare-wheels: the device image the wheels are "
                 "for ('tpu': Python 3.11, which lacks chex and optax too)")
  p.add_argument('--child', default=None, help=argparse.SUPPRESS)
  p.add_argument('--until', type=float, default=None, help=argparse.SUPPRESS)
  p.add_argument('--lines', default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child is not None or args.prepare_wheels:
    return args
  if args.budget_s is None:
    args.budget_s = 900. if args.smoke else 420.
  if args.budget_s <= 0 or (args.max_item_s is not None
                            and args.max_item_s <= 0):
    raise UsageError('--budget-s and --max-item-s must be positive')
  if args.out is None:
    if not os.environ.get('OUT'):
      raise UsageError('give --out PATH, or set $OUT (the JSON goes to '
                       '$OUT/gpu.json)')
    args.out = os.path.join(os.environ['OUT'], 'gpu.json')
  selected(args.smoke, args.only)  # Refuses an --only that matches nothing.
  return args


def main(argv=None) -> int:
  try:
    args = parse_args(argv)
  except UsageError as e:
    print(f'gpu.py: error: {e}', file=sys.stderr)
    return 2
  if args.prepare_wheels:
    os.makedirs(args.prepare_wheels, exist_ok=True)
    return prepare_wheels(args.prepare_wheels, args.image)
  if args.child is not None:
    return child_main(args.child.split(','), args.smoke, args.only,
                      args.max_item_s, args.until, args.lines)
  t_start = time.time()
  until = t_start + args.budget_s
  items = selected(args.smoke, args.only, args.max_item_s)
  out_dir = os.path.dirname(os.path.abspath(args.out))
  os.makedirs(out_dir, exist_ok=True)
  import tempfile  # pylint: disable=g-import-not-at-top
  args.work = tempfile.mkdtemp(prefix='roxie-gpu-')
  sys.path.insert(0, HERE)
  import _harness  # pylint: disable=g-import-not-at-top
  doc = dict(
      schema=SCHEMA, mode='smoke' if args.smoke else 'gpu',
      started=datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec='seconds'),
      budget_s=args.budget_s, commit=_commit(), versions=_versions(),
      device=dict(nvidia_smi=_nvidia_smi(), cpu=_harness.cpu_model(),
                  cores=os.cpu_count()),
      items={it.name: dict(name=it.name, status='pending', error='not run yet',
                           target=it.target) for it in items})
  md_path = os.path.splitext(args.out)[0] + '.md'

  def write():
    for it in items:  # Target and settings travel with each item's record.
      doc['items'][it.name].setdefault('target', it.target)
      doc['items'][it.name].setdefault('detail', describe(it))
    doc['wall_s'] = time.time() - t_start
    _write_json(args.out, doc)

  write()
  print(f'[gpu] {doc["mode"]} run of {len(items)} items, budget '
        f'{args.budget_s:.0f} s; JSON: {args.out}', flush=True)
  groups: Dict[str, List[Item]] = {}
  for it in items:
    groups.setdefault(it.group, []).append(it)
  for group in groups.values():
    if time.time() >= until:
      for it in group:
        doc['items'][it.name] = dict(name=it.name, status='skipped',
                                     error='the budget was spent')
      continue
    _run_group(group, args, until, doc, write)
  write()
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(args.work, ignore_errors=True)  # The JSON holds what matters.
  with open(md_path, 'w') as f:
    f.write(markdown(doc))
  print()
  print(markdown(doc))
  print(f'[gpu] JSON: {args.out}; table: {md_path}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
