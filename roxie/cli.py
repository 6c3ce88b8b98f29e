"""The `roxie` command: train, eval, tasks, plot, play, export.

`roxie train` with no arguments trains the default agent (SAC) on the default
task (CartpoleSwingup) on the native CPU backend.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

EXIT_USAGE = 2  # Bad input: a message, and nothing was written.
EXIT_FAULT = 1  # A fault (non-finite training, a failed write): never success.


def _parser() -> argparse.ArgumentParser:
  """The `roxie` command's argument parser, every subcommand and flag.

  It stays one long function: a flat list of the CLI's flags, kept in one
  place so that `--help` order is the code's order.
  """
  from roxie.agents import AGENTS, DEFAULT_AGENT  # pylint: disable=g-import-not-at-top
  from roxie.run import DEFAULT_TASK  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog='roxie', description=__doc__.split('\n')[0])
  sub = p.add_subparsers(dest='command', required=True)

  t = sub.add_parser('train', help='train an agent on a task, or resume a run')
  # Run-defining options default to None so that --resume can tell which
  # were given (a resumed run refuses any that would change it).
  t.add_argument('--agent', default=None, metavar='AGENT',
                 help=f'{", ".join(AGENTS)} (default: {DEFAULT_AGENT}), or '
                 'your own recipe as path/to/file.py:make or '
                 'package.module:make (see roxie.agents)')
  t.add_argument('--task', default=None, help=f'default: {DEFAULT_TASK}')
  t.add_argument('--backend', default=None, choices=('cpu', 'mjx'),
                 help='default: cpu')
  t.add_argument('--num-envs', type=int, default=None,
                 help='parallel training environments (default: the config)')
  t.add_argument('--steps', type=int, default=None,
                 help='total environment steps (default: the config); with '
                 '--resume, a new total')
  t.add_argument('--seed', type=int, default=None, help='default: 0')
  t.add_argument('--seeds', default=None, metavar='SEEDS',
                 help='train a population in one program: these seeds '
                 '(0,1,2), or N for 0..N-1; one run directory per member, '
                 'runs/<agent>-<task>-seed<k>[-<field>=<value>...] (see '
                 'roxie.run.population)')
  t.add_argument('--sweep', action='append', default=[],
                 metavar='FIELD=V1,V2',
                 help='with or without --seeds: a float config field taking '
                 'each of these values (repeatable; the population is the '
                 'cross product with the seeds)')
  t.add_argument('--out', default=None,
                 help='run directory (default: runs/<agent>-<task>-seed<seed>); '
                 "with --seeds/--sweep, the directory the members' go in "
                 '(default: runs)')
  t.add_argument('--set', dest='overrides', action='append', default=[],
                 metavar='FIELD=VALUE', help='override a config field (repeatable)')
  t.add_argument('--eval-every', type=int, default=None,
                 help='environment steps between evaluations')
  t.add_argument('--eval-episodes', type=int, default=None,
                 help='default: 10')
  t.add_argument('--episode-length', type=int, default=None,
                 help="shorten episodes (default: the task's, 1000 steps)")
  t.add_argument('--physics', default=None, choices=('dm_control',
                                                     'playground'),
                 help="solver settings: dm_control's (default) or "
                 "mujoco_playground's per-domain preset (fewer solver "
                 "iterations, Euler; faster, esp. on MJX; a deviation from "
                 "the suite, see docs/PERFORMANCE.md)")
  t.add_argument('--impl', default=None, choices=('jax', 'warp'),
                 help="--backend mjx only: MJX's physics, 'jax' (default) or "
                 "'warp' (MuJoCo Warp: CUDA, or Warp's CPU device; needs "
                 "pip install 'roxie[warp]')")
  t.add_argument('--obs', default=None,
                 choices=('state', 'pixels', 'pixels+state'),
                 help="what the agent observes: the state vector (default), "
                 "rendered camera frames, or both; from pixels the agent's "
                 "PIXEL_DEFAULTS apply (the off-policy recipes; --set still "
                 "wins)")
  t.add_argument('--resolution', default=None, metavar='HxW',
                 help='--obs pixels: frame size, e.g. 64x64 or 84 (default 64)')
  t.add_argument('--resolution-schedule', default=None,
                 metavar='RES@STEPS,...',
                 help='--obs pixels: change the frame size as training goes, '
                 'e.g. 32@0,48@40000,64@80000 (RES is N or HxW, STEPS env '
                 'steps, the first at 0); the replay is resized at each '
                 'stage. Needs --set encoder_pooling=mean (or '
                 'spatial_softmax); replaces --resolution')
  t.add_argument('--camera', default=None,
                 help="--obs pixels: camera id or name (default 0, the "
                 "task's tracking camera where it has one)")
  t.add_argument('--frame-stack', type=int, default=None, metavar='S',
                 help='--obs pixels: frames stacked per observation '
                 '(default 3)')
  t.add_argument('--render-every', type=int, default=None, metavar='N',
                 help='--obs pixels: render every N agent steps, holding the '
                 'last frame in between (default 1)')
  t.add_argument('--depth', action='store_true', default=None,
                 help='--obs pixels: add a depth image')
  t.add_argument('--renderer', default=None, choices=('host', 'warp', 'auto'),
                 help="--obs pixels: 'host' (default; MuJoCo's OpenGL "
                 "renderer), 'warp' (MJX's batch renderer, --backend mjx, "
                 "needs roxie[warp]) or 'auto' (warp where it runs)")
  t.add_argument('--resume', default=None, metavar='DIR',
                 help="continue the run in DIR from its latest checkpoint, "
                 "with its saved settings")
  t.add_argument('--checkpoint-every', type=int, default=None, metavar='STEPS',
                 help='environment steps between checkpoints (default: at '
                 'each evaluation; always one at the end)')
  t.add_argument('--keep-checkpoints', type=int, default=2, metavar='N',
                 help='keep the newest N checkpoints (default: 2)')
  t.add_argument('--no-save-replay', dest='save_replay', action='store_false',
                 help='leave the replay buffer out of checkpoints (a resume '
                 'then starts with an empty replay and is not exact)')
  t.add_argument('--tensorboard', action='store_true',
                 help="also write TensorBoard event files to DIR/tensorboard "
                 "(needs roxie[tensorboard])")
  t.add_argument('--num-devices', type=int, default=None, metavar='N',
                 help='train data-parallel over N devices (envs and replay '
                 'split per device, gradients averaged; on CPU the host is '
                 'split into N devices). Default: 1, or all devices of a '
                 'multi-process job')
  t.add_argument('--coordinator', default=None, metavar='HOST:PORT',
                 help='multi-process (multi-host) training: the address of '
                 'process 0, the same in every process')
  t.add_argument('--num-processes', type=int, default=None,
                 help='processes in the multi-process job')
  t.add_argument('--process-id', type=int, default=None,
                 help="this process's index in the job (0 .. N - 1)")
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


def _fault(message: str) -> int:
  print(f'roxie: error: {message}', file=sys.stderr, flush=True)
  return EXIT_FAULT


def _os_error(e: OSError, out: Optional[str]) -> str:
  """One line for a failed read or write of a run directory."""
  what = os.strerror(e.errno) if e.errno else str(e)
  where = f' ({e.filename})' if getattr(e, 'filename', None) else ''
  text = f'{what}{where}' if e.errno else str(e)
  kept = ''
  if out:
    from roxie import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
    try:
      latest = ckpt_lib.latest(out)
    except OSError:
      latest = None
    kept = (f'; the last complete checkpoint, {latest}, is intact'
            if latest else '; no checkpoint had been written')
  return f'cannot write the run {out}: {text}{kept}.'


class _EarlySignal:
  """SIGINT/SIGTERM before training takes the signals over.

  Python's default handler raises KeyboardInterrupt wherever the main
  thread is, and one raised inside a garbage-collector callback (XLA has
  one) is printed as "Exception ignored" and lost: the run then trains to
  the end. This handler only records the first signal; the training loop
  stops at once when it takes the signals over (see
  `roxie.run.set_early_signals`). A second signal raises KeyboardInterrupt.
  """

  def __init__(self):
    self.signum: Optional[int] = None
    self._previous = {}

  def install(self) -> None:
    import signal  # pylint: disable=g-import-not-at-top
    import threading  # pylint: disable=g-import-not-at-top
    if threading.current_thread() is not threading.main_thread():
      return
    for s in (signal.SIGINT, signal.SIGTERM):
      self._previous[s] = signal.signal(s, self._handle)

  def _handle(self, signum, frame):
    del frame
    if self.signum is not None:  # A second one: stop at once.
      raise KeyboardInterrupt
    self.signum = signum

  def restore(self) -> None:
    import signal  # pylint: disable=g-import-not-at-top
    for s, h in self._previous.items():
      signal.signal(s, h)
    self._previous = {}


def _default_out(agent: str, task: str, seed: int) -> str:
  base = os.path.join('runs', f'{agent}-{task}-seed{seed}')
  if not os.path.exists(base):
    return base
  return f'{base}-{time.strftime("%Y%m%d-%H%M%S")}'


def main(argv: Optional[List[str]] = None) -> int:
  words = sys.argv[1:] if argv is None else list(argv)
  early = None
  if words[:1] == ['train']:
    early = _EarlySignal()
    early.install()  # Before the slow imports: see _EarlySignal.
  try:
    args = _parser().parse_args(argv)
    if getattr(args, 'cli_main', None):  # plot, play, export
      return args.cli_main(args)
    return _main(args, early)
  except KeyboardInterrupt:  # A second signal before training started.
    if early is None:
      raise
    print('roxie: interrupted before training started.', file=sys.stderr,
          flush=True)
    return 130
  finally:
    if early is not None:
      early.restore()


def _main(args: argparse.Namespace, early: Optional[_EarlySignal]) -> int:
  """main() after parsing."""
  # Imports after parsing, so `--help` and usage errors are instant.
  from roxie import envs  # pylint: disable=g-import-not-at-top
  from roxie import gl  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  if args.command == 'tasks':
    for name in envs.list_tasks():
      print(name)
    return 0

  if args.command == 'eval' and args.episodes < 1:
    return _fail(f'--episodes must be >= 1, got {args.episodes}.')
  if args.command == 'eval' and args.policy:
    from roxie import export  # pylint: disable=g-import-not-at-top
    return export.eval_cli(args.policy, episodes=args.episodes,
                           backend=args.backend, seed=args.seed)
  if args.command == 'eval':
    try:
      result = run_lib.evaluate_run(args.run, episodes=args.episodes,
                                    backend=args.backend, seed=args.seed)
    except (FileNotFoundError, ValueError, KeyError,
            gl.RenderingUnavailable) as e:
      return _fail(str(e))
    except run_lib.TrainingFault as e:  # A host-callback failure.
      return _fault(str(e))
    print(f'eval_return={float(result.mean):.1f} '
          f'std={float(result.std):.1f} episodes={args.episodes}')
    return 0

  run_lib.set_early_signals(early)
  try:
    if early is not None and early.signum is not None:
      return _interrupted(KeyboardInterrupt(), args.out or args.resume)
    return _train_command(args)
  finally:
    run_lib.set_early_signals(None)


def _env_options(args: argparse.Namespace) -> Optional[Dict[str, Any]]:
  """env_options from --episode-length, --physics and --impl (None: none).

  The default physics and impl are not written, so a default run's
  config.json is what it was before the flags existed.
  """
  options = {}
  if args.episode_length:
    options['episode_length'] = args.episode_length
  if args.physics not in (None, 'dm_control'):
    options['physics'] = args.physics
  if getattr(args, 'impl', None) not in (None, 'jax'):
    options['impl'] = args.impl
  return options or None


class _TrainInputs(NamedTuple):
  """`roxie train`'s flags, checked and turned into what the run takes."""
  multi: bool  # A multi-process job (--coordinator and friends).
  overrides: Dict[str, Any]  # --set, parsed.
  env_options: Optional[Dict[str, Any]]  # Pixels included; None: none.
  pixels: Optional[Dict[str, Any]]  # env_options['pixels']; None: state.
  schedule: Optional[List[Any]]  # The parsed --resolution-schedule.


def _train_command(args: argparse.Namespace) -> int:
  """`roxie train`: validates everything before anything is written."""
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  inputs, error = _train_inputs(args)
  if error is not None:
    return error
  refused = _refused_errors()
  common = dict(checkpoint_every=args.checkpoint_every,
                keep_checkpoints=args.keep_checkpoints,
                save_replay=args.save_replay, tensorboard=args.tensorboard,
                verbose=not args.quiet)
  if args.agent is not None:
    from roxie import agents as agents_lib  # pylint: disable=g-import-not-at-top
    try:
      args.agent = agents_lib.canonical_name(args.agent)
    except KeyError as e:
      return _fail(e.args[0])
  if args.seeds is not None or args.sweep:
    return _population_command(args, inputs, common, refused)
  if args.resume and os.path.exists(
      os.path.join(args.resume, run_lib.POPULATION_FILE)):
    return _population_command(args, inputs, common, refused)
  if args.resume:
    out = args.resume
    error = _prepare_resume(args, inputs)
    if error is not None:
      return error
    result, error = _run_training(
        lambda: run_lib.resume(out, steps=args.steps, **common), out, refused)
  else:
    new, error = _prepare_new_run(args, inputs)
    if error is not None:
      return error
    out = new.out
    if inputs.multi and args.process_id:  # Only process 0 reports.
      common['verbose'] = False
    result, error = _run_training(
        lambda: run_lib.train(
            new.agent, new.task, backend=args.backend or 'cpu',
            num_envs=args.num_envs, steps=args.steps, seed=new.seed, out=out,
            overrides=new.overrides, eval_every=args.eval_every,
            eval_episodes=args.eval_episodes or 10,
            env_options=inputs.env_options, num_devices=args.num_devices,
            resolution_schedule=inputs.schedule, **common),
        out, refused)
  if error is not None:
    return error
  if args.quiet and not (inputs.multi and args.process_id):
    print(run_lib.final_line(result), flush=True)
  if out and not (inputs.multi and args.process_id):
    print(f'run saved to {out}')
  return 0


def _population_refusals(args: argparse.Namespace,
                         inputs: _TrainInputs) -> Optional[str]:
  """Why --seeds/--sweep cannot go with the other flags (None: they can)."""
  if args.resume and (args.seeds is not None or args.sweep):
    return ('--seeds/--sweep cannot be combined with --resume: a resumed '
            'population keeps its members.')
  if args.seed is not None and args.seeds is not None:
    return '--seed and --seeds are exclusive: list the seeds in --seeds.'
  given = [flag for flag, on in (
      ('--obs/--resolution (pixels)', inputs.pixels is not None),
      ('--resolution-schedule', args.resolution_schedule is not None),
      ('--num-devices', bool(args.num_devices and args.num_devices > 1)),
      ('--coordinator/--num-processes', inputs.multi),
      ('--tensorboard', args.tensorboard)) if on]
  if given:
    return (f'a population (--seeds/--sweep, or --resume of one) cannot use '
            f'{", ".join(given)}: train those runs one at a time.')
  if args.keep_checkpoints < 2:
    return ('a population keeps at least 2 checkpoints per member (a resume '
            'needs one that every member has): --keep-checkpoints 2 or more.')
  return None


def _population_command(args: argparse.Namespace, inputs: _TrainInputs,
                        common: Dict[str, Any],
                        refused: Tuple[type, ...]) -> int:
  """`roxie train --seeds/--sweep`, or `--resume` of a population member."""
  from roxie import agents as agents_lib  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  from roxie.agents import DEFAULT_AGENT  # pylint: disable=g-import-not-at-top

  refusal = _population_refusals(args, inputs)
  if refusal:
    return _fail(refusal)
  common = dict(common)
  common.pop('tensorboard')
  if args.resume:
    out = args.resume
    error = _prepare_resume(args, inputs)
    if error is not None:
      return error
    start = lambda: run_lib.resume_population(out, steps=args.steps, **common)
  else:
    try:
      seeds = run_lib.parse_seeds('0,' if args.seeds is None else args.seeds)
      sweep = run_lib.parse_sweep(args.sweep)
    except ValueError as e:
      return _fail(str(e))
    agent = args.agent or DEFAULT_AGENT
    task = args.task or run_lib.DEFAULT_TASK
    root = args.out or 'runs'
    try:
      names = run_lib.member_names(agents_lib.short_name(agent), task,
                                   *_grid(seeds, sweep))
    except ValueError as e:
      return _fail(str(e))
    if args.out is None and any(os.path.exists(os.path.join(root, n))
                                for n in names):
      stamp = time.strftime('%Y%m%d-%H%M%S')
      names = [f'{n}-{stamp}' for n in names]
    out = os.path.join(root, names[0])
    start = lambda: run_lib.train_population(
        agent, task, seeds=seeds, sweep=sweep, root=root,
        backend=args.backend or 'cpu', num_envs=args.num_envs,
        steps=args.steps, overrides=inputs.overrides,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes or 10,
        env_options=inputs.env_options, names=names, **common)
  result, error = _run_training(start, out, refused)
  if error is not None:
    return error
  for member in result.members:
    if args.quiet:
      print(f'{member.out}: {run_lib.final_line(member)}', flush=True)
    print(f'run saved to {member.out}')
  return 0


def _grid(seeds, sweep):
  """(member seeds, {field: member values}), as the population orders them."""
  from roxie import loops  # pylint: disable=g-import-not-at-top
  return loops.population_grid(seeds, sweep)


def _train_inputs(
    args: argparse.Namespace) -> Tuple[Optional[_TrainInputs], Optional[int]]:
  """Checks `roxie train`'s flags; (the inputs, an exit code if one is bad).

  The checks run in a fixed order, so a command line with several bad flags
  always reports the same one.
  """
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  for name in ('num_envs', 'steps', 'eval_every', 'eval_episodes',
               'episode_length', 'checkpoint_every', 'keep_checkpoints',
               'num_devices', 'num_processes'):
    value = getattr(args, name)
    if value is not None and value < 1:
      return None, _fail(
          f'--{name.replace("_", "-")} must be >= 1, got {value}.')
  multi, error = _multi_process(args)
  if error is not None:
    return None, error
  try:
    overrides = config_lib.parse_overrides(args.overrides)
  except config_lib.ConfigError as e:
    return None, _fail(str(e))
  if args.tensorboard:
    try:
      run_lib.check_tensorboard()
    except ImportError as e:
      return None, _fail(str(e))
  env_options = _env_options(args)
  if args.impl == 'warp':
    if (args.backend or 'cpu') != 'mjx':
      return None, _fail("--impl warp is MJX's physics (MuJoCo Warp): add "
                         '--backend mjx.')
    if (args.seeds is not None or args.sweep
        or (args.num_devices or 1) > 1):
      return None, _fail(
          "--impl warp trains one run on one device: MuJoCo Warp's contact "
          'pool is shared by the whole batch, so it is not split into '
          'population members (--seeds, --sweep) or device shards '
          "(--num-devices). Use --impl jax for those.")
  try:
    pixels = _pixel_options(args)
  except ValueError as e:
    return None, _fail(str(e))
  if pixels is not None:
    env_options = dict(env_options or {}, pixels=pixels)
  schedule = None
  if args.resolution_schedule is not None and not args.resume:
    try:
      schedule = run_lib.parse_resolution_schedule(args.resolution_schedule)
    except ValueError as e:
      return None, _fail(str(e))
    _, height, width = schedule[0]
    env_options['pixels'].update(height=height, width=width)
  return _TrainInputs(multi, overrides, env_options, pixels, schedule), None


def _refused_errors() -> Tuple[type, ...]:
  """What a run refuses to start or resume with: errors of the run, not roxie's.

  They end the command with a usage message (exit 2), not a fault.
  """
  from roxie import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie import gl  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  from roxie.envs import warp_render  # pylint: disable=g-import-not-at-top
  return (FileNotFoundError, FileExistsError, run_lib.RunError,
          ckpt_lib.CheckpointError, config_lib.ConfigError,
          gl.RenderingUnavailable, warp_render.WarpUnavailable)


def _prepare_resume(args: argparse.Namespace,
                    inputs: _TrainInputs) -> Optional[int]:
  """Checks that --resume's run can continue as asked (None: it can).

  Any flag that would change the saved run is refused, all of them listed in
  one message; a multi-device run sets its devices up before JAX starts.
  """
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top

  out = args.resume
  if args.out and os.path.abspath(args.out) != os.path.abspath(out):
    return _fail('--out cannot be combined with --resume: a resumed run '
                 'stays in its own directory.')
  try:
    run, _, _ = run_lib.load_run_config(out)
    diffs = run_lib.run_differences(run, {
        'agent': args.agent, 'task': args.task, 'backend': args.backend,
        'num_envs': args.num_envs, 'seed': args.seed,
        'eval_every': args.eval_every, 'eval_episodes': args.eval_episodes,
        'env_options': inputs.env_options,
        'overrides': inputs.overrides or None})
  except (FileNotFoundError, KeyError, ValueError) as e:
    return _fail(e.args[0] if isinstance(e, KeyError) else str(e))
  try:
    run_lib.check_resumable(run, out)
  except run_lib.RunError as e:
    return _fail(str(e))
  saved_devices = run.devices
  if args.num_devices and args.num_devices != saved_devices:
    diffs.append(f'num_devices: the run has {saved_devices}, asked for '
                 f'{args.num_devices}')
  if diffs:
    return _fail(
        f'--resume continues {out} with its saved settings, and these '
        'options would change the run:\n  ' + '\n  '.join(diffs) +
        '\nDrop them (only --steps may change, to extend the total) or '
        'start a new run with --out.')
  if saved_devices > 1:
    from roxie import distributed  # pylint: disable=g-import-not-at-top
    distributed.setup(saved_devices)
  return None


class _NewRun(NamedTuple):
  """A new run's settings after the defaults and the pixel defaults."""
  agent: str  # The canonical agent name.
  task: str
  seed: int
  out: str  # The run directory.
  overrides: Dict[str, Any]  # --set over the agent's pixel defaults.


def _prepare_new_run(
    args: argparse.Namespace,
    inputs: _TrainInputs) -> Tuple[Optional[_NewRun], Optional[int]]:
  """Resolves and checks a new run; (its settings, an exit code if refused).

  Everything that can be checked without building the run is checked here
  (config, task, camera, renderer, envs per device), then the devices or the
  multi-process job are set up, before anything starts JAX.
  """
  from roxie import agents as agents_lib  # pylint: disable=g-import-not-at-top
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie import distributed  # pylint: disable=g-import-not-at-top
  from roxie import envs  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  from roxie.agents import DEFAULT_AGENT  # pylint: disable=g-import-not-at-top

  agent = args.agent or DEFAULT_AGENT
  task = args.task or run_lib.DEFAULT_TASK
  seed = 0 if args.seed is None else args.seed
  overrides, pixels = inputs.overrides, inputs.pixels
  try:
    if pixels is not None:  # The agent's pixel defaults, under --set.
      defaults = run_lib.pixel_defaults(agent)
      if task in envs.tasks.ACTION_REPEAT:  # The task table's wins.
        defaults.pop('action_repeat', None)
      overrides = dict(defaults, **overrides)
    module, cfg = run_lib.resolve_config(agent, overrides)
    num_envs = args.num_envs or run_lib.resolve_run_defaults(
        module, overrides).num_envs
    if inputs.schedule is not None:
      run_lib.check_schedule_pooling(agent, cfg)
    task_def = envs.get_task(task)
    if pixels is not None:  # A camera the task's model has, by id or name.
      from roxie.envs import pixels as pixels_lib  # pylint: disable=g-import-not-at-top
      pixels_lib.camera_id(task_def.load_model(), pixels['camera'])
      if (pixels.get('renderer') == 'warp'
          and (args.backend or 'cpu') != 'mjx'):
        raise ValueError("--renderer warp is MJX's batch renderer: use it "
                         "with --backend mjx (or --renderer auto).")
  except (config_lib.ConfigError, KeyError, ValueError,
          run_lib.RunError) as e:
    return None, _fail(e.args[0] if isinstance(e, KeyError) else str(e))
  if args.num_devices and num_envs % args.num_devices:
    return None, _fail(f'the number of envs ({num_envs}) must be a multiple '
                       f'of --num-devices ({args.num_devices}).')
  # In a multi-process job only process 0 writes the run directory (with
  # agent-only checkpoints, see roxie.run); give every process the same
  # --out.
  out = args.out or _default_out(agents_lib.short_name(agent), task, seed)
  try:  # Before anything starts JAX: CPU devices, the multi-process job.
    distributed.setup(args.num_devices, coordinator_address=args.coordinator,
                      num_processes=args.num_processes,
                      process_id=args.process_id)
  except ValueError as e:
    return None, _fail(str(e))
  return _NewRun(agent, task, seed, out, overrides), None


def _run_training(start: Callable[[], Any], out: str,
                  refused: Tuple[type, ...]) -> Tuple[Any, Optional[int]]:
  """Runs `start()`; (its result, the exit code of a refusal or a fault).

  Args:
    start: trains or resumes the run and returns its result.
    out: the run directory, named in the interruption and write-error
      messages.
    refused: the errors that are the run's (exit 2), see `_refused_errors`.
  """
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  try:
    return start(), None
  except refused as e:
    return None, _fail(str(e))
  except KeyboardInterrupt as e:
    return None, _interrupted(e, out)
  except run_lib.TrainingFault as e:
    return None, _fault(str(e))
  except OSError as e:
    return None, _fault(_os_error(e, out))


def _interrupted(e: KeyboardInterrupt, out: Optional[str]) -> int:
  """Reports a run stopped by SIGINT/SIGTERM; the exit status to return."""
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  if isinstance(e, run_lib.Interrupted):
    print(f'roxie: {e}', file=sys.stderr, flush=True)
    return e.exit_code
  # Ctrl-C where the training loop does not handle signals: before it took
  # them over (while building or compiling), or in a multi-process job.
  hint = ''
  try:
    run_lib.check_resumable(run_lib.load_run_config(out)[0], out)
    hint = f' Resume with: roxie train --resume {out}'
  except (FileNotFoundError, KeyError, TypeError, ValueError):
    pass  # Not a run (yet), or one that cannot be resumed.
  print('roxie: interrupted; no checkpoint was written at this point (earlier '
        f'ones are kept).{hint}', file=sys.stderr, flush=True)
  return 130


def _pixel_options(args: argparse.Namespace):
  """env_options['pixels'] from --obs and its options (None: the state)."""
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  given = [f'--{n.replace("_", "-")}' for n in ('resolution',
                                                  'resolution_schedule',
                                                  'camera', 'frame_stack',
                                                  'render_every', 'depth',
                                                  'renderer')
           if getattr(args, n) is not None]
  if args.resolution is not None and args.resolution_schedule is not None:
    raise ValueError('--resolution and --resolution-schedule cannot be '
                     'combined: the schedule\'s first stage is the starting '
                     'resolution.')
  obs = args.obs
  if obs is None and args.resume:
    if given:
      raise ValueError(f'{", ".join(given)} cannot change a resumed run.')
    return None
  obs = obs or 'state'
  if obs == 'state':
    if given:
      raise ValueError(f'{", ".join(given)} only apply with --obs pixels or '
                       '--obs pixels+state.')
    return None
  resolution = (64, 64)
  if args.resolution:
    parts = args.resolution.lower().split('x')
    try:
      resolution = tuple(int(p) for p in parts) * (2 if len(parts) == 1 else 1)
    except ValueError:
      resolution = ()
    if len(resolution) != 2:
      raise ValueError(f'--resolution must be HxW or N, got '
                       f'{args.resolution!r}.')
  return run_lib.pixel_options(
      obs, resolution=resolution,
      camera=0 if args.camera is None else args.camera,
      frame_stack=3 if args.frame_stack is None else args.frame_stack,
      render_every=1 if args.render_every is None else args.render_every,
      depth=bool(args.depth), renderer=args.renderer or 'host')


def _multi_process(args: argparse.Namespace):
  """(whether this is a multi-process job, an exit code if the flags are bad)."""
  given = [args.coordinator is not None, args.num_processes is not None,
           args.process_id is not None]
  if not any(given):
    return False, None
  if not all(given):
    return True, _fail('multi-process training needs --coordinator, '
                       '--num-processes and --process-id together.')
  if not 0 <= args.process_id < args.num_processes:
    return True, _fail(f'--process-id must be in 0 .. '
                       f'{args.num_processes - 1}, got {args.process_id}.')
  if args.resume:
    return True, _fail('a multi-process run cannot be resumed: its '
                       'checkpoints hold the agent state only (the '
                       'environment and replay state are sharded across the '
                       'processes and not gathered). Start a new run.')
  return True, None


if __name__ == '__main__':
  sys.exit(main())
