"""Resolution schedules: a run from pixels that changes its image size as it trains.

config.json's 'resolution_schedule' is [[env steps, height, width], ...];
see the package docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Tuple

import jax
import numpy as np

from roxie import checkpoint as ckpt_lib
from roxie import distributed
from roxie.run.config import RunConfig, as_run_config
from roxie.run.errors import RunError

if TYPE_CHECKING:
  from roxie.run.programs import Programs  # pylint: disable=g-bad-import-order


def _parse_size(text: str) -> Tuple[int, int]:
  parts = text.strip().lower().split('x')
  if len(parts) not in (1, 2):
    raise ValueError(text)
  size = tuple(int(p) for p in parts)
  return (size * 2) if len(size) == 1 else size


def parse_resolution_schedule(text: str) -> List[List[int]]:
  """'32@0,48@40000,64x48@80000' -> [[0, 32, 32], [40000, 48, 48], ...].

  Each stage is RESOLUTION@ENV_STEPS, RESOLUTION being N or HxW; stages are
  separated by commas. The result is checked by `check_resolution_schedule`.

  Raises:
    ValueError: a malformed schedule, with what is wrong and the format.
  """
  fmt = ('write it as RESOLUTION@ENV_STEPS,... with RESOLUTION N or HxW, '
         'e.g. 32@0,48@40000,64@80000')
  stages = []
  items = [i for i in str(text).split(',') if i.strip()]
  if not items:
    raise ValueError(f'--resolution-schedule is empty; {fmt}.')
  for item in items:
    if item.count('@') != 1:
      raise ValueError(f'--resolution-schedule stage {item.strip()!r} has no '
                       f'@ENV_STEPS; {fmt}.')
    size, steps = item.split('@')
    try:
      height, width = _parse_size(size)
      steps = int(steps.strip())
    except ValueError:
      raise ValueError(f'--resolution-schedule stage {item.strip()!r} is not '
                       f'RESOLUTION@ENV_STEPS; {fmt}.') from None
    stages.append([steps, height, width])
  return check_resolution_schedule(stages)


def check_resolution_schedule(schedule) -> List[List[int]]:
  """[[env steps, height, width], ...] checked, as a JSON-ready list.

  Raises:
    ValueError: not a list of triples, a first stage not at 0 env steps,
      thresholds not strictly increasing, or a size below 1.
  """
  try:
    stages = [[int(x) for x in stage] for stage in schedule]
  except (TypeError, ValueError):
    raise ValueError(f'A resolution schedule is a list of [env steps, '
                     f'height, width]; got {schedule!r}.') from None
  if not stages or any(len(st) != 3 for st in stages):
    raise ValueError(f'A resolution schedule is a list of [env steps, '
                     f'height, width]; got {schedule!r}.')
  if stages[0][0] != 0:
    raise ValueError(f'The resolution schedule must start at 0 env steps '
                     f'(its first stage is at {stages[0][0]}), e.g. '
                     '32@0,64@50000.')
  for a, b in zip(stages, stages[1:]):
    if b[0] <= a[0]:
      raise ValueError(f'The resolution schedule\'s env steps must strictly '
                       f'increase; got {a[0]} then {b[0]}.')
  for steps, height, width in stages:
    if height < 1 or width < 1:
      raise ValueError(f'The resolution schedule has a size {height}x{width} '
                       f'at {steps} env steps; sizes must be >= 1.')
  return stages


def stage_at(run: RunConfig, env_steps: int) -> int:
  """The stage of a run's resolution schedule at `env_steps` (0 without one)."""
  return _stage_of(run.resolution_schedule or (), env_steps)


def _stage_of(stages, env_steps: int) -> int:
  stage = 0
  for i, (start, _, _) in enumerate(stages):
    if int(env_steps) >= int(start):
      stage = i
  return stage


def at_stage(run: RunConfig, stage: int) -> RunConfig:
  """The run with the frame size of a schedule stage (itself without one)."""
  if not run.resolution_schedule:
    return run
  _, height, width = run.resolution_schedule[int(stage)]
  return run.with_pixel_size(height, width)


def schedule_stage(meta: Any, env_steps: int) -> int:
  """`stage_at` of a RunConfig or of config.json's object (a dict)."""
  if isinstance(meta, RunConfig):
    return stage_at(meta, env_steps)
  return _stage_of(meta.get('resolution_schedule') or (), env_steps)


def stage_meta(meta: Mapping[str, Any], stage: int) -> Dict[str, Any]:
  """config.json's object with env_options['pixels'] of a stage's size.

  The dict form of `at_stage`, for callers of the config.json object.
  """
  out = dict(meta)
  stages = meta.get('resolution_schedule')
  if not stages:
    return out
  _, height, width = stages[int(stage)]
  options = dict(out.get('env_options') or {})
  options['pixels'] = dict(options['pixels'], height=int(height),
                           width=int(width))
  out['env_options'] = options
  return out


def check_schedule_pooling(agent: str, cfg: Any) -> None:
  """Raises RunError unless `cfg`'s encoder fits every resolution."""
  from roxie.networks import pixels as pixel_nets  # pylint: disable=g-import-not-at-top
  pixels = getattr(cfg, 'pixels', None)
  pooling = None if pixels is None else pixels.encoder_pooling
  if pooling in pixel_nets.RESOLUTION_AGNOSTIC_POOLINGS:
    return
  if pooling is None:
    raise RunError(f'{agent} has no pixel encoder, so it cannot follow a '
                   'resolution schedule.')
  raise RunError(
      f'A resolution schedule needs an encoder whose parameters fit every '
      f'resolution, but encoder_pooling is {pooling!r} (its projection\'s '
      'weights depend on the image size). Add --set encoder_pooling=mean '
      '(or --set encoder_pooling=spatial_softmax).')


def _checkpoint_stage(path: str, run: RunConfig) -> int:
  """The schedule stage of the state a checkpoint holds."""
  try:
    runner = (ckpt_lib.read_meta(path).get('meta') or {}).get('runner') or {}
  except ckpt_lib.CheckpointError:
    return 0  # _load_checkpoint reports it.
  stages = run.resolution_schedule or ()
  stage = runner.get('stage')
  if stage is None:
    stage = stage_at(run, int(runner.get('env_steps') or 0))
  if not 0 <= int(stage) < max(1, len(stages)):
    raise ckpt_lib.CheckpointError(
        f'Checkpoint {path} is at stage {stage} of a resolution schedule of '
        f'{len(stages)} stage(s): it belongs to another run.')
  return int(stage)


def trained_env_options(run_dir: str, run: Any) -> Dict[str, Any]:
  """env_options of the resolution a run's latest checkpoint trained at.

  Without a resolution schedule, the run's env_options. With one, those of
  the stage recorded by the latest checkpoint (the final stage of a finished
  run), or the first stage if there is no checkpoint.
  """
  return dict(trained_run(run_dir, run).env_options or {})


def trained_run(run_dir: str, run: Any) -> RunConfig:
  """The run at the resolution its latest checkpoint trained at.

  See `trained_env_options`; `run` is a RunConfig or config.json's object.
  """
  run = as_run_config(run)
  if not run.resolution_schedule:
    return run
  path = ckpt_lib.latest(run_dir)
  return at_stage(run, _checkpoint_stage(path, run) if path else 0)


def _shape_differences(have: Any, want: Any, limit: int = 4) -> List[str]:
  """Leaves of `have` whose path, shape or dtype differ from `want`'s."""
  a = jax.tree_util.tree_flatten_with_path(have)
  b = jax.tree_util.tree_flatten_with_path(want)
  if a[1] != b[1]:
    return ['the structure differs']
  diffs = []
  for (path, x), (_, y) in zip(a[0], b[0]):
    if tuple(np.shape(x)) != tuple(y.shape) or np.dtype(x.dtype) != np.dtype(
        y.dtype):
      diffs.append(f'{jax.tree_util.keystr(path)}: {np.dtype(x.dtype)}'
                   f'{list(np.shape(x))} -> {np.dtype(y.dtype)}'
                   f'{list(y.shape)}')
  if len(diffs) > limit:
    diffs = diffs[:limit] + [f'and {len(diffs) - limit} more']
  return diffs


def _switch_stage(state, old: Programs, new: Programs, seed_key,
                  size: Tuple[int, int]):
  """The LoopState carried over to a new resolution's programs.

  The agent state is kept (its shapes must not change); the replay's
  frames and the frames of the envs' current stacks are resized; the envs'
  episodes continue (the native backend's host physics is handed over).
  """
  from roxie import buffers  # pylint: disable=g-import-not-at-top
  height, width = size
  shapes = jax.eval_shape(new.init, seed_key)
  diffs = _shape_differences(state.agent, shapes.agent)
  if diffs:
    raise RunError(
        f'The agent state changes shape at the {height}x{width} stage of the '
        f'resolution schedule ({"; ".join(diffs)}), so training cannot go on '
        'with the same parameters. Use an encoder that fits every '
        'resolution: --set encoder_pooling=mean (or spatial_softmax).')
  jax.block_until_ready(state)
  replay = state.replay
  if isinstance(replay, buffers.ReplayState) and isinstance(
      replay.obs, buffers.FrameStore):
    replay = buffers.replay_resize(replay, height, width)
  env = state.env._replace(obs=buffers.resize_observation(
      state.env.obs, height, width))
  carried = state._replace(env=env, replay=replay)
  diffs = _shape_differences(carried, shapes)
  if diffs:
    raise RunError(f'Cannot carry the training state over to the {height}x'
                   f'{width} stage of the resolution schedule: '
                   f'{"; ".join(diffs)}.')
  if old.host_physics:
    new.env.set_host_state(old.env.get_host_state())
  return distributed.put_like(carried, shapes)
