"""Bytes per stored transition of roxie's replay ring, against the ideal.

The ideal is what one transition must hold at least: its observation, action,
reward and two flag bytes (terminated, truncated). The next observation is not
counted: the ring gets it from the following row, plus a small side store for
time-limit truncations. The target is a ratio of at most 1.05.

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


if __name__ == '__main__':
  main()
