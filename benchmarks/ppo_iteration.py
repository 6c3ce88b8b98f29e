"""PPO's iteration on each backend, with its evaluation, in isolation.

vs_brax.py's PPO settings (16 envs x 64 steps, 10 epochs x 8 minibatches of
128, (64, 64) networks) on one task: for each roxie backend, the compiled
loop's iterations timed in one call (`--iterations` per call, best of
`--repeats`), one evaluation (10 episodes of 1000 steps, as vs_brax runs
after each chunk), and the update alone (the recipe's update on the
collected rollout, jitted on its own), in wall-clock and process CPU
milliseconds. What is left of an iteration beside its update is collection
(the env steps and the policy between them, GAE's inputs).

  python benchmarks/ppo_iteration.py
  python benchmarks/ppo_iteration.py --physics dm_control --backends cpu
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as H  # pylint: disable=g-import-not-at-top
import vs_brax  # pylint: disable=g-import-not-at-top


def best_of(fn, repeats):
  """(wall s, CPU s) of the fastest of `repeats` calls (after one warm-up)."""
  fn()
  best = (float('inf'), float('inf'))
  for _ in range(repeats):
    with H.Stopwatch() as t:
      fn()
    best = min(best, (t.wall, t.cpu))
  return best


def measure(task, backend, physics, iterations, repeats):
  import jax  # pylint: disable=g-import-not-at-top
  from roxie import loops  # pylint: disable=g-import-not-at-top
  settings = dict(vs_brax.PPO)
  recipe, env, eval_env, per_iter = vs_brax.roxie_setup(
      'ppo', backend, task, settings, physics)
  init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
  evaluate = loops.make_evaluator(recipe, eval_env)
  box = [init(jax.random.PRNGKey(0))]

  def chunk():
    box[0], _ = run(box[0])
    jax.block_until_ready(box[0])

  loop_w, loop_c = best_of(chunk, repeats)
  eval_w, eval_c = best_of(lambda: jax.block_until_ready(
      evaluate(box[0].agent, jax.random.PRNGKey(1)).mean), repeats)
  # The update alone, on a rollout of the right shape (the one it is fed
  # in the loop holds the same shapes; the values do not change the cost).
  rollout = vs_brax_rollout(recipe, box[0].agent, env.spec,
                            settings['num_envs'])
  update = jax.jit(recipe.update)
  key = jax.random.PRNGKey(2)
  upd_w, upd_c = best_of(lambda: jax.block_until_ready(
      update(box[0].agent, rollout, key)), repeats)
  ms = lambda s: 1e3 * s
  return [task, backend, physics,
          f'{ms(loop_w) / iterations:.1f}', f'{ms(loop_c) / iterations:.1f}',
          f'{per_iter * iterations / loop_w:,.0f}',
          f'{ms(upd_w):.1f}', f'{ms(upd_c):.1f}',
          f'{100 * upd_w / (loop_w / iterations):.0f}%',
          f'{ms(eval_w):.0f}', f'{ms(eval_c):.0f}']


def vs_brax_rollout(recipe, agent_state, spec, num_envs):
  """A rollout of the loop's shapes, from update_cost's synthetic maker."""
  import update_cost  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  rollouts = update_cost.synthetic_rollouts(
      recipe, agent_state, jax.random.PRNGKey(3), 1, num_envs, spec)
  return jax.tree.map(lambda x: x[0], rollouts)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--task', default='CartpoleSwingup')
  parser.add_argument('--backends', default='cpu,mjx')
  parser.add_argument('--physics', default='playground,dm_control')
  parser.add_argument('--iterations', type=int, default=39,
                      help="iterations per timed call (vs_brax's chunk)")
  parser.add_argument('--repeats', type=int, default=4)
  args = parser.parse_args()
  print(H.machine_header(
      "ppo_iteration: PPO's iteration, its update and an evaluation",
      [f'task {args.task}; vs_brax PPO settings; {args.iterations} '
       f'iterations per call; best of {args.repeats}']), flush=True)
  rows = []
  for physics in args.physics.split(','):
    for backend in args.backends.split(','):
      rows.append(measure(args.task, backend, physics, args.iterations,
                          args.repeats))
      H.flush_print(f'  {backend} {physics} done [load {H.load_now()}]')
  print()
  print(H.fmt_table(
      ['task', 'backend', 'physics', 'iter ms', 'iter cpu ms', 'env steps/s',
       'update ms', 'update cpu ms', 'update share', 'eval ms',
       'eval cpu ms'], rows))
  print('\niter: one iteration of the compiled loop (collection + update); '
        'update: the recipe\'s update alone, jitted on its own; update '
        'share: its wall time over the iteration\'s; eval: one evaluation '
        f'of {vs_brax.EVAL_EPISODES} episodes')
  print(f'load average at end: {H.load_now()}')


if __name__ == '__main__':
  main()
