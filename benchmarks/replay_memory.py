"""Bytes per stored transition of roxie's replay ring, against the ideal.

The ideal is what one transition must hold at least: its observation, action,
reward and two flag bytes (terminated, truncated). The next observation is not
counted: the ring gets it from the following row, plus a small side store for
time-limit truncations. The target is a ratio of at most 1.05.

Pixel observations (dict observations with S = 3 stacked uint8 frames) are
measured against one uint8 frame per stored step plus the vectors (state,
action, reward, flags): the ring stores each frame once and rebuilds stacks
at sampling. The target there is a ratio of at most 1.1.

  python benchmarks/replay_memory.py            # allocates the real arrays
  python benchmarks/replay_memory.py --shapes   # shapes only, no allocation
"""

import argparse

import jax
import numpy as np

from roxie import buffers

TASKS = (('CheetahRun-like', 17, 6), ('HumanoidWalk-like', 67, 21))
# (capacity, num_envs): a small ring shorter than an episode per env, and the
# usual 10^5..10^6 rings with 1 to 256 envs.
CONFIGS = ((10_000, 256), (100_000, 1), (100_000, 16), (1_000_000, 1),
           (1_000_000, 256))
EPISODE_LENGTH = 1000
# (name, H, W, rgb, depth, state size, action size), frames stacked 3 deep.
PIXEL_TASKS = (('Cartpole 64x64 rgb', 64, 64, True, False, 5, 1),
               ('Cartpole 84x84 rgb', 84, 84, True, False, 5, 1),
               ('Cheetah 64x64 rgb+d', 64, 64, True, True, 17, 6))
PIXEL_CONFIGS = ((100_000, 8), (100_000, 64))
FRAME_STACK = 3


def _nbytes(x) -> int:
  return int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--shapes', action='store_true',
                      help='count bytes from jax.eval_shape; allocate nothing')
  args = parser.parse_args()

  header = (f'{"task":18} {"capacity":>9} {"envs":>5} {"rows":>6} '
            f'{"slots":>5} {"B/transition":>12} {"ideal":>6} {"ratio":>7}')
  print(header)
  print('-' * len(header))
  worst = 0.
  for task, obs_size, action_size in TASKS:
    for capacity, num_envs in CONFIGS:
      make = lambda: buffers.replay_init(  # pylint: disable=cell-var-from-loop
          capacity=capacity, num_envs=num_envs, obs_size=obs_size,
          action_size=action_size, episode_length=EPISODE_LENGTH)
      state = jax.eval_shape(make) if args.shapes else make()
      total = sum(_nbytes(x) for x in jax.tree.leaves(state))
      if not args.shapes:
        assert total == sum(x.nbytes for x in jax.tree.leaves(state))
      rows = state.obs.shape[0]
      stored = rows * num_envs
      per_transition = total / stored
      ideal = 4 * obs_size + 4 * action_size + 4 + 2
      ratio = per_transition / ideal
      worst = max(worst, ratio)
      print(f'{task:18} {capacity:9d} {num_envs:5d} {rows:6d} '
            f'{state.final_obs.shape[0]:5d} {per_transition:12.2f} '
            f'{ideal:6d} {ratio:7.4f}')
      del state
  print(f'worst ratio {worst:.4f} (target <= 1.05)')
  print()
  _pixels(args.shapes)


def _pixels(shapes_only: bool) -> None:
  header = (f'{"pixel task":20} {"capacity":>9} {"envs":>5} '
            f'{"B/transition":>12} {"stacked":>8} {"ideal":>6} {"ratio":>7}')
  print(header)
  print('-' * len(header))
  worst = 0.
  for task, h, w, rgb, depth, state_size, action_size in PIXEL_TASKS:
    obs_shapes = []
    if depth:
      obs_shapes.append(('depth', (h, w, FRAME_STACK), 'uint8'))
    if rgb:
      obs_shapes.append(('pixels', (h, w, 3 * FRAME_STACK), 'uint8'))
    obs_shapes.append(('state', (state_size,), 'float32'))
    for capacity, num_envs in PIXEL_CONFIGS:
      make = lambda: buffers.replay_init(  # pylint: disable=cell-var-from-loop
          capacity=capacity, num_envs=num_envs, obs_size=state_size,
          action_size=action_size, episode_length=EPISODE_LENGTH,
          obs_shapes=tuple(obs_shapes), frame_stack=FRAME_STACK)
      # 64x64 rings of 10^5 steps are over a GB: allocate only if asked.
      state = jax.eval_shape(make) if shapes_only else make()
      total = sum(_nbytes(x) for x in jax.tree.leaves(state))
      stored = state.action.shape[0] * num_envs
      per_transition = total / stored
      frame = h * w * (3 * rgb + depth)
      ideal = frame + 4 * state_size + 4 * action_size + 4 + 2
      stacked = FRAME_STACK * frame + 4 * state_size + 4 * action_size + 6
      ratio = per_transition / ideal
      worst = max(worst, ratio)
      print(f'{task:20} {capacity:9d} {num_envs:5d} {per_transition:12.1f} '
            f'{stacked:8d} {ideal:6d} {ratio:7.4f}')
      del state
  print(f'worst pixel ratio {worst:.4f} (target <= 1.1; "stacked" is what '
        'storing every stack would cost)')


if __name__ == '__main__':
  main()
