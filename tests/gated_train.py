"""`roxie <argv>` in a child process that a test can hold at a known point.

The signal and kill tests must act on a process that is still training,
whatever the machine's speed. Run as `python gated_train.py <cli argv>`, this
is `roxie.cli.main(argv)`, except that before a training call of the
compiled loop, once the run's metrics.csv has at least
`ROXIE_TEST_GATE_ROWS` rows (and, with `ROXIE_TEST_GATE_CHECKPOINT=1`, a
committed checkpoint exists), it writes `<run>/gate.blocked` and waits, once,
until `<run>/gate.release` exists. The test then signals or kills a process
that cannot have moved on.
"""

import os
import sys
import time

BLOCKED = 'gate.blocked'
RELEASE = 'gate.release'


def _run_dir(argv):
  for flag in ('--out', '--resume'):
    if flag in argv:
      return argv[argv.index(flag) + 1]
  raise SystemExit('gated_train.py: needs --out or --resume')


def _metrics_rows(run_dir):
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    return max(sum(1 for line in f if line.strip()) - 1, 0)  # Less header.


def main(argv):
  from roxie import checkpoint, cli, loops  # pylint: disable=g-import-not-at-top
  run_dir = _run_dir(argv)
  rows = int(os.environ['ROXIE_TEST_GATE_ROWS'])
  need_checkpoint = os.environ.get('ROXIE_TEST_GATE_CHECKPOINT') == '1'
  make_compiled_loop = loops.make_compiled_loop
  state = {'done': False}

  def ready():
    return _metrics_rows(run_dir) >= rows and (
        not need_checkpoint or checkpoint.list_steps(run_dir))

  def gated_make_compiled_loop(*args, **kwargs):
    init, run = make_compiled_loop(*args, **kwargs)

    def gated_run(*run_args, **run_kwargs):
      if not state['done'] and ready():
        state['done'] = True
        with open(os.path.join(run_dir, BLOCKED), 'w') as f:
          f.write(str(os.getpid()))
        while not os.path.exists(os.path.join(run_dir, RELEASE)):
          time.sleep(0.01)
      return run(*run_args, **run_kwargs)

    return init, gated_run

  loops.make_compiled_loop = gated_make_compiled_loop
  return cli.main(argv)


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
