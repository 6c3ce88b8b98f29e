"""What a training configuration costs per env step, against a baseline run beside it.

Runs `roxie train` itself (the CLI a user runs: the compiled loop, a
population when --seeds > 1, evaluation and checkpoints) for each variant
at two lengths and takes the difference, so that what both lengths share
(imports, compiling, the replay's allocation, the final evaluation) drops
out. What is left is steady training:

  CPU s / 10k    user + system CPU seconds of the child, all its threads,
                 per 10,000 env steps, per member of the population;
  wall s / 10k   wall-clock seconds per 10,000 env steps (of the whole
                 population: its members step together);
  cores          CPU over wall: how many cores the run kept busy;
  x base         each against the first variant, measured in the same run.

Variants run in turns (A B, B A, ...), `--rounds` times each; the median
is reported. Only the ratios carry from one machine to another: CPU
seconds are not a stable unit on the shared machines these figures come
from (two sessions' VMs that report the same CPU model have measured the
same code at CPU seconds a factor of two apart; benchmarks/RESULTS.md,
"CPU minutes are the machine's"). Compare a variant's cost with the
default's measured by this script in one run, not with a figure in
dmc.csv from another session.

  python benchmarks/run_cost.py --agent mpo --task WalkerWalk --seeds 3 \\
      --variant default --variant 'lr1e-3:critic_lr=1e-3;policy_lr=1e-3'
  python benchmarks/run_cost.py --agent sac --task CheetahRun \\
      --variant default --variant 'utd1:updates_per_iteration=8' --cpus 0

Bad input (a malformed --variant or --steps, a field the recipe's Config
does not have, cores this process may not use) exits 2 with one line and
leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as H  # pylint: disable=g-import-not-at-top,wrong-import-position

TAG = 'run_cost'


class BadInput(Exception):
  """Reported as one line, exit status 2, nothing written."""


class ChildFailed(Exception):
  """A `roxie train` run ended in a fault (not bad input): no figure."""


class TooShort(Exception):
  """The longer run did not cost more: start-up's noise swamps the span."""


def parse_variant(text: str) -> Tuple[str, List[str]]:
  """'label' or 'label:field=value;field=value' -> (label, ['field=value'])."""
  label, _, rest = text.partition(':')
  label = label.strip()
  if not label:
    raise BadInput(f'--variant {text!r} has no label: give LABEL or '
                   'LABEL:FIELD=VALUE;FIELD=VALUE')
  sets = [s.strip() for s in rest.split(';') if s.strip()]
  for s in sets:
    field, eq, value = s.partition('=')
    if not eq or not field.strip() or not value.strip():
      raise BadInput(f'--variant {text!r}: {s!r} is not FIELD=VALUE')
  return label, sets


def parse_steps(text: str) -> Tuple[int, int]:
  """'SHORT,LONG' env steps, 0 < SHORT < LONG."""
  try:
    short, long_ = (int(x) for x in text.split(','))
  except ValueError:
    raise BadInput(f'--steps {text!r}: give two env-step counts, SHORT,LONG '
                   '(e.g. 3000,13000)') from None
  if not 0 < short < long_:
    raise BadInput(f'--steps {text!r}: need 0 < SHORT < LONG')
  return short, long_


def parse_cpus(text: Optional[str]) -> Optional[List[int]]:
  """'0,1' -> the cores the children are pinned to (each one usable here)."""
  if text is None:
    return None
  try:
    cpus = sorted({int(x) for x in text.split(',') if x.strip()})
  except ValueError:
    raise BadInput(f'--cpus {text!r}: give core numbers, e.g. 0 or 0,1') from None
  usable = sorted(os.sched_getaffinity(0))
  missing = [c for c in cpus if c not in usable]
  if not cpus or missing:
    raise BadInput(f'--cpus {text!r}: this process may use cores {usable}')
  return cpus


def steady_cost(short: Tuple[float, float], long_: Tuple[float, float],
                steps: Tuple[int, int], members: int
                ) -> Dict[str, float]:
  """Per 10k env steps of steady training, from two runs' (cpu, wall).

  The difference of the two lengths removes what both share; CPU is then
  split evenly between the population's members (they run as one program),
  wall-clock is not (they step together).
  """
  span = (steps[1] - steps[0]) / 1e4
  cpu = (long_[0] - short[0]) / span
  wall = (long_[1] - short[1]) / span
  if cpu <= 0 or wall <= 0:
    raise TooShort(
        f'{steps[1]} env steps cost no more than {steps[0]} ({long_[0]:.1f} '
        f'against {short[0]:.1f} CPU s, {long_[1]:.1f} against '
        f'{short[1]:.1f} s): the span is within start-up\'s variation; give '
        'a longer LONG in --steps (and a SHORT past the warm-up, where no '
        'updates are made)')
  return {'cpu': cpu / members, 'wall': wall, 'cores': cpu / wall}


def train_once(args, sets: Sequence[str], steps: int, out: str
               ) -> Tuple[float, float]:
  """(CPU s, wall s) of one `roxie train` child, start to exit."""
  cmd = [sys.executable, '-m', 'roxie.cli', 'train', '--agent', args.agent,
         '--task', args.task, '--steps', str(steps), '--out', out,
         # One evaluation, at the end, shared by both lengths.
         '--eval-every', str(10 * steps), '--eval-episodes', '1',
         '--no-save-replay', '--quiet']
  if args.seeds > 1:
    cmd += ['--seeds', str(args.seeds)]
  for s in sets:
    cmd += ['--set', s]
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, capture_output=True, text=True)
  wall = time.perf_counter() - t0
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if proc.returncode != 0:
    lines = (proc.stderr or proc.stdout).strip().splitlines() or ['(no output)']
    if proc.returncode == 2:  # The CLI's bad-input status: the user's to fix.
      raise BadInput(f'roxie train {" ".join(cmd[4:])}: {lines[-1]}')
    raise ChildFailed(f'roxie train exited {proc.returncode}: {lines[-1]}')
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return cpu, wall


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--agent', default='sac')
  parser.add_argument('--task', default='CartpoleSwingup')
  parser.add_argument('--seeds', type=int, default=1,
                      help='population size (one program), default 1')
  parser.add_argument('--variant', action='append', default=None,
                      help="LABEL or 'LABEL:FIELD=VALUE;FIELD=VALUE' "
                      '(repeatable; the first is the baseline; default: '
                      'the recipe\'s defaults alone)')
  parser.add_argument('--steps', default='3000,13000',
                      help='SHORT,LONG env steps of the two runs per variant')
  parser.add_argument('--rounds', type=int, default=1)
  parser.add_argument('--cpus', default=None,
                      help='pin the runs to these cores, e.g. 0 (default: '
                      'all this process may use)')
  args = parser.parse_args(argv)
  try:
    variants = [parse_variant(v) for v in (args.variant or ['default'])]
    labels = [v[0] for v in variants]
    if len(set(labels)) != len(labels):
      raise BadInput(f'--variant labels repeat: {labels}')
    steps = parse_steps(args.steps)
    args.cpu_list = parse_cpus(args.cpus)
    if args.seeds < 1 or args.rounds < 1:
      raise BadInput('--seeds and --rounds must be at least 1')
  except BadInput as e:
    print(f'{TAG}: error: {e}', file=sys.stderr)
    return 2

  extra = [f'{args.agent} on {args.task}, population of {args.seeds}, '
           f'{steps[0]} and {steps[1]} env steps a variant, '
           f'{args.rounds} round(s)',
           f'pinned to cores {args.cpu_list}' if args.cpu_list else
           'on every core this process may use']
  if args.cpu_list:
    # The children inherit this thread's cores (a preexec_fn would fork a
    # process that JAX's threads already run in).
    os.sched_setaffinity(0, args.cpu_list)
  H.flush_print(H.machine_header('run_cost.py', extra))
  scratch = tempfile.mkdtemp(prefix='roxie-run-cost-')
  results: Dict[str, List[Dict[str, float]]] = {label: [] for label in labels}
  try:
    for r in range(args.rounds):
      order = variants if r % 2 == 0 else variants[::-1]
      for label, sets in order:
        measured = []
        for n in steps:
          out = os.path.join(scratch, f'{label}-{n}')
          measured.append(train_once(args, sets, n, out))
          shutil.rmtree(out, ignore_errors=True)
        cost = steady_cost(measured[0], measured[1], steps, args.seeds)
        results[label].append(cost)
        H.flush_print(f'  round {r + 1} {label}: {cost["cpu"]:.1f} CPU s, '
                      f'{cost["wall"]:.1f} wall s / 10k env steps '
                      f'[load {H.load_now()}]')
  except BadInput as e:
    print(f'{TAG}: error: {e}', file=sys.stderr)
    return 2
  except (TooShort, ChildFailed) as e:
    print(f'{TAG}: error: {e}.', file=sys.stderr)
    return 1
  finally:
    shutil.rmtree(scratch, ignore_errors=True)

  med = {label: {k: H.median([c[k] for c in cs]) for k in ('cpu', 'wall',
                                                          'cores')}
         for label, cs in results.items()}
  base = med[labels[0]]
  rows = [[label, f'{m["cpu"]:.1f}', f'{m["wall"]:.1f}', f'{m["cores"]:.2f}',
           f'{m["cpu"] / base["cpu"]:.2f}', f'{m["wall"] / base["wall"]:.2f}']
          for label, m in med.items()]
  print(H.fmt_table(['variant', 'CPU s / 10k (a member)', 'wall s / 10k',
                     'cores', 'CPU x base', 'wall x base'], rows))
  print(f'load average at the end: {H.load_now()}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
