"""The `roxie` command: train, eval, tasks, plot, play, export.

`roxie train` with no arguments trains the default agent (SAC) on the default
task (CartpoleSwingup) on the native CPU backend.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List, Optional

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
  from roxie.agents import AGENTS, DEFAULT_AGENT  # pylint: disable=g-import-not-at-top
  from roxie.run import DEFAULT_TASK  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog='roxie', description=__doc__.split('\n')[0])
  sub = p.add_subparsers(dest='command', required=True)

  t = sub.add_parser('train', help='train an agent on a task')
  t.add_argument('--agent', default=DEFAULT_AGENT, choices=AGENTS,
                 type=str.lower)
  t.add_argument('--task', default=DEFAULT_TASK)
  t.add_argument('--backend', default='cpu', choices=('cpu', 'mjx'))
  t.add_argument('--num-envs', type=int, default=None,
                 help='parallel training environments (default: the config)')
  t.add_argument('--steps', type=int, default=None,
                 help='total environment steps (default: the config)')
  t.add_argument('--seed', type=int, default=0)
  t.add_argument('--out', default=None,
                 help='run directory (default: runs/<agent>-<task>-seed<seed>)')
  t.add_argument('--set', dest='overrides', action='append', default=[],
                 metavar='FIELD=VALUE', help='override a config field (repeatable)')
  t.add_argument('--eval-every', type=int, default=None,
                 help='environment steps between evaluations')
  t.add_argument('--eval-episodes', type=int, default=10)
  t.add_argument('--episode-length', type=int, default=None,
                 help="shorten episodes (default: the task's, 1000 steps)")
  t.add_argument('--quiet', action='store_true')

  e = sub.add_parser('eval', help="re-evaluate a finished run's policy")
  source = e.add_mutually_exclusive_group(required=True)
  source.add_argument('--run', help='run directory')
  source.add_argument('--policy', metavar='FOLDER',
                      help='an exported policy bundle, or a shipped name')
  e.add_argument('--episodes', type=int, default=10)
  e.add_argument('--backend', default=None, choices=('cpu', 'mjx'),
                 help="default: the run's own backend")
  e.add_argument('--seed', type=int, default=0)

  sub.add_parser('tasks', help='list the available tasks')
  # plot, play, export: defined in their modules, which import nothing heavy.
  from roxie import export, play, plot  # pylint: disable=g-import-not-at-top
  for module in (plot, play, export):
    module.add_cli(sub)
  return p


def _fail(message: str) -> int:
  print(f'roxie: error: {message}', file=sys.stderr)
  return EXIT_USAGE


def _default_out(agent: str, task: str, seed: int) -> str:
  base = os.path.join('runs', f'{agent}-{task}-seed{seed}')
  if not os.path.exists(base):
    return base
  return f'{base}-{time.strftime("%Y%m%d-%H%M%S")}'


def main(argv: Optional[List[str]] = None) -> int:
  args = _parser().parse_args(argv)
  if getattr(args, 'cli_main', None):  # plot, play, export
    return args.cli_main(args)
  # Imports after parsing, so `--help` and usage errors are instant.
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie import envs  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  if args.command == 'tasks':
    for name in envs.list_tasks():
      print(name)
    return 0

  if args.command == 'eval' and args.policy:
    from roxie import export  # pylint: disable=g-import-not-at-top
    return export.eval_cli(args.policy, episodes=args.episodes,
                           backend=args.backend, seed=args.seed)
  if args.command == 'eval':
    try:
      result = run_lib.evaluate_run(args.run, episodes=args.episodes,
                                    backend=args.backend, seed=args.seed)
    except (FileNotFoundError, ValueError, KeyError) as e:
      return _fail(str(e))
    print(f'eval_return={float(result.mean):.1f} '
          f'std={float(result.std):.1f} episodes={args.episodes}')
    return 0

  # train: validate everything before anything is written.
  try:
    overrides = config_lib.parse_overrides(args.overrides)
    run_lib.resolve_config(args.agent, overrides)
    envs.get_task(args.task)
  except (config_lib.ConfigError, KeyError) as e:
    return _fail(e.args[0] if isinstance(e, KeyError) else str(e))
  for name in ('num_envs', 'steps', 'eval_every', 'eval_episodes',
               'episode_length'):
    value = getattr(args, name)
    if value is not None and value < 1:
      return _fail(f'--{name.replace("_", "-")} must be >= 1, got {value}.')
  out = args.out or _default_out(args.agent, args.task, args.seed)
  result = run_lib.train(args.agent, args.task, backend=args.backend,
                num_envs=args.num_envs, steps=args.steps, seed=args.seed,
                out=out, overrides=overrides, eval_every=args.eval_every,
                eval_episodes=args.eval_episodes, verbose=not args.quiet,
                env_options=({'episode_length': args.episode_length}
                             if args.episode_length else None))
  if args.quiet:  # train() prints the final line itself when not quiet.
    print(run_lib.final_line(result), flush=True)
  print(f'run saved to {out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
