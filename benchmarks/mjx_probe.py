"""MJX physics on an accelerator at small sizes: compile, first call, rate.

gpu.py's physics items run HumanoidWalk at 1,024+ envs under limits set for a
GPU; where they overrun (one TPU v5e, 2026-12-06), this says where the time
goes, one (task, envs, steps) at a time, each line written as it ends:

  python benchmarks/mjx_probe.py --cases CartpoleSwingup:1024:10,HumanoidWalk:128:10

Per case: `make_s` (envs.make), `compile_s` (lowering and compiling the
jitted `lax.scan` of `steps` env steps, benchmarks/env_throughput.py's
`_scan`), `first_call_s` (its first run), `best_s` (best of `--repeats`
runs) and `sps` = envs x steps / best_s. Output: JSON lines on stdout and the
list at `--out` (default $OUT/mjx_probe.json, else /tmp/mjx_probe.json).
Runs from a checkout with nothing installed, as gpu.py does.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu  # pylint: disable=g-import-not-at-top,wrong-import-position


def parse_cases(text):
  cases = []
  for part in text.split(','):
    bits = part.split(':')
    if len(bits) != 3 or not bits[1].isdigit() or not bits[2].isdigit():
      raise ValueError(f'--cases: {part!r} is not TASK:ENVS:STEPS '
                       '(e.g. HumanoidWalk:128:10)')
    cases.append((bits[0], int(bits[1]), int(bits[2])))
  return cases


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--cases', default='CartpoleSwingup:1024:10,'
                 'CartpoleSwingup:4096:100,HumanoidWalk:128:10,'
                 'HumanoidWalk:1024:10')
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--impl', default='jax')
  p.add_argument('--out', default=None)
  args = p.parse_args(argv)
  try:
    cases = parse_cases(args.cases)
  except ValueError as e:
    print(f'mjx_probe.py: error: {e}', file=sys.stderr)
    return 2
  out = args.out or os.path.join(os.environ.get('OUT') or '/tmp',
                                 'mjx_probe.json')
  gpu.use_this_tree()
  import jax  # pylint: disable=g-import-not-at-top
  import env_throughput  # pylint: disable=g-import-not-at-top
  from roxie import envs  # pylint: disable=g-import-not-at-top
  rows = []
  for task, num_envs, steps in cases:
    t0 = time.perf_counter()
    env = envs.make(task, backend='mjx', num_envs=num_envs, impl=args.impl)
    t1 = time.perf_counter()
    once, compile_s = env_throughput._scan(env, steps)  # pylint: disable=protected-access
    first_s = time.perf_counter() - t1 - compile_s
    best_s = gpu._best(once, args.repeats)  # pylint: disable=protected-access
    rows.append(dict(task=task, envs=num_envs, steps=steps, make_s=t1 - t0,
                     compile_s=compile_s, first_call_s=first_s, best_s=best_s,
                     sps=num_envs * steps / best_s,
                     backend=jax.default_backend(), impl=args.impl))
    print(json.dumps(rows[-1]), flush=True)
    with open(out + '.tmp', 'w') as f:
      json.dump(rows, f, indent=1)
    os.replace(out + '.tmp', out)
  return 0


if __name__ == '__main__':
  sys.exit(main())
