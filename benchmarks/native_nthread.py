"""Native backend: one simulation thread against all cores, per batch size.

For each task and batch size, the env stepped inside a jitted `lax.scan`
(random actions, as the compiled loop steps it) with `mujoco.batch`'s pool
at nthread=1 and at nthread=os.cpu_count(), the two runs interleaved
(A B, B A, ...), best of `--repeats` each; it prints wall-clock and process
CPU us per batched step and the ratios (all cores) / (one thread): a ratio
above 1 means one thread is faster. The last two columns are the batch's
step cost as `roxie.envs.native.physics_step_us` estimates it and the
thread count `default_nthread` picks from it when `nthread` is not given.
Compare figures from one run only: the machine may be shared (the load
average is printed).

  python benchmarks/native_nthread.py
  python benchmarks/native_nthread.py --tasks CheetahRun --envs 16,256
  python benchmarks/native_nthread.py --tasks WalkerWalk,HopperStand,HumanoidStand --envs 8,16,64
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as H  # pylint: disable=g-import-not-at-top
from env_throughput import _interleaved, _scan  # pylint: disable=g-import-not-at-top
from roxie import envs  # pylint: disable=g-import-not-at-top
from roxie.envs import native  # pylint: disable=g-import-not-at-top


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--tasks', default='CartpoleSwingup,CheetahRun,'
                      'WalkerWalk,HopperStand,HumanoidStand')
  parser.add_argument('--envs', default='8,16,64,128')
  parser.add_argument('--steps', type=int, default=200,
                      help='env steps per timed scan')
  parser.add_argument('--repeats', type=int, default=7)
  args = parser.parse_args()
  cores = os.cpu_count()
  print(H.machine_header(
      'native_nthread: mujoco.batch at nthread 1 vs all cores, in a jitted '
      'scan', [f'{args.steps} env steps per scan, best of {args.repeats} '
               'interleaved runs']), flush=True)
  rows = []
  for task in args.tasks.split(','):
    for num_envs in (int(x) for x in args.envs.split(',')):
      runs = []
      for nthread in (1, cores):
        env = envs.make(task, backend='cpu', num_envs=num_envs,
                        nthread=nthread)
        runs.append(_scan(env, args.steps)[0])
      wall, cpu = _interleaved(runs, args.repeats, cpu=True)
      step_us = native.physics_step_us(env.physics.model,
                                       env.physics.n_substeps)
      per = lambda s: 1e6 * s / args.steps
      rows.append([task, str(num_envs), f'{per(wall[0]):.0f}',
                   f'{per(wall[1]):.0f}', f'{wall[1] / wall[0]:.2f}',
                   f'{per(cpu[0]):.0f}', f'{per(cpu[1]):.0f}',
                   f'{cpu[1] / cpu[0]:.2f}',
                   f'{num_envs * step_us:.0f}',
                   str(native.default_nthread(num_envs, step_us))])
      H.flush_print(f'  {task} {num_envs} envs done [load {H.load_now()}]')
  print()
  print(H.fmt_table(
      ['task', 'envs', 'wall us 1', f'wall us {cores}', 'wall ratio',
       'cpu us 1', f'cpu us {cores}', 'cpu ratio', 'est us', 'default'],
      rows))
  print(f'\nratio = time at nthread {cores} / time at nthread 1 (> 1: one '
        'thread is faster); est us: the batch\'s physics step on one thread '
        'as `native.physics_step_us` measures it at construction (one env, '
        'scratch state, times the batch size); default: the threads '
        f'`default_nthread` picks from it (all cores at >= '
        f'{native.PARALLEL_MIN_STEP_US:.0f} us)')
  print(f'load average at end: {H.load_now()}')


if __name__ == '__main__':
  main()
