"""A population of P runs in one program vs the same P runs one after another.

For each recipe (SAC, PPO by default) and each P, on the native backend:

  population   `roxie.loops.make_population_loop(recipe, env, population=P)`:
               one jitted program, the members vmapped, all P x B envs
               stepped by one `mujoco.batch` call per env step;
  sequential   the single-run program (`make_compiled_loop`) driving P runs
               one after another, each for the same number of calls (one
               env and one compiled program shared; between members the
               host physics is swapped with get/set_host_state, a copy of B
               state rows).

Both arms do the same work (P runs x calls x iterations x env steps, every
iteration collecting and learning: warm-up is set to 0) and are timed in the
same process, interleaved (A B, B A, ...) so that the shared machine's load
falls on both alike. Reported per arm: env steps/s (wall clock), process CPU
microseconds per env step (all threads; what other processes' load does not
inflate), and the ratios sequential / population of wall-clock and of CPU
seconds per round (> 1: the population is faster). "first s" is the wait
before timing: the population's compile and first call / the sequential
arm's first call of every member (its one program compiles at the first P
only).

  python benchmarks/population.py
  python benchmarks/population.py --agents sac --populations 1,3,8 --rounds 5
  python benchmarks/population.py --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # pylint: disable=g-import-not-at-top

import _harness as H  # pylint: disable=g-import-not-at-top
from roxie import envs, loops  # pylint: disable=g-import-not-at-top


def _recipe(name: str, task: str, args):
  """(recipe, env of B envs, action repeat) at the recipe's default Config."""
  from roxie import agents  # pylint: disable=g-import-not-at-top
  module = agents.get_agent(name)
  cfg = module.Config()
  if hasattr(cfg, 'warmup_steps'):  # Every timed iteration learns.
    cfg = dataclasses.replace(cfg, warmup_steps=0)
  run_defaults = module.RUN_DEFAULTS
  repeat = run_defaults.action_repeat
  env = envs.make(task, backend='cpu', num_envs=run_defaults.num_envs,
                  action_repeat=repeat, nthread=args.nthread)
  return module.make(cfg, env.spec), env, repeat


_SINGLE = {}


def _single_program(name: str, args):
  """(recipe, env, program, steps per iteration, iterations), one per agent.

  The sequential arm runs every P on the same single-run program and env.
  """
  if name not in _SINGLE:
    recipe, env, repeat = _recipe(name, args.task, args)
    per_iter = loops.env_steps_per_iteration(recipe, env.num_envs) * repeat
    iterations = max(1, args.steps // (per_iter * args.calls))
    init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
    _SINGLE[name] = (recipe, env, (init, run), per_iter, iterations)
  return _SINGLE[name]


def _arms(name: str, p: int, args):
  """The two arms' timed rounds and the env steps each round makes."""
  recipe, seq_env, (init, run), per_iter, iterations = _single_program(
      name, args)
  # The population's own env (its physics is built for P x B envs).
  _, env, _ = _recipe(name, args.task, args)
  seeds = list(range(p))

  with H.Stopwatch() as t_pop:
    pop_init, pop_run = loops.make_population_loop(
        recipe, env, population=p, iterations=iterations)
    pop = [pop_init(loops.population_keys(seeds))]
    pop[0], _ = pop_run(pop[0])
    jax.block_until_ready(pop[0])

  with H.Stopwatch() as t_seq:
    states, rows = [], []
    for s in seeds:
      state, _ = run(init(jax.random.PRNGKey(s)))
      jax.block_until_ready(state)
      states.append(state)
      rows.append(seq_env.get_host_state())

  def population_round():
    for _ in range(args.calls):
      pop[0], out = pop_run(pop[0])
      int(out.updates[0])  # One small host read per call, as training does.
    jax.block_until_ready(pop[0])

  def sequential_round():
    for k in range(p):
      seq_env.set_host_state(rows[k])
      for _ in range(args.calls):
        states[k], out = run(states[k])
        int(out.updates)
      jax.block_until_ready(states[k])
      rows[k] = seq_env.get_host_state()

  steps = p * args.calls * iterations * per_iter
  return population_round, sequential_round, steps, (t_pop, t_seq)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--task', default='CartpoleSwingup')
  parser.add_argument('--agents', default='sac,ppo')
  parser.add_argument('--populations', default='1,3,8')
  parser.add_argument('--steps', type=int, default=4096,
                      help='env steps per member per timed round')
  parser.add_argument('--calls', type=int, default=2,
                      help='calls of run per member per timed round')
  parser.add_argument('--rounds', type=int, default=3,
                      help='timed rounds of each arm (after one warm-up)')
  parser.add_argument('--nthread', type=int, default=None,
                      help='mujoco.batch threads (default: all cores)')
  parser.add_argument('--quick', action='store_true',
                      help='small budgets (a smoke run, not a measurement)')
  args = parser.parse_args(argv)
  if args.quick:
    args.steps, args.calls, args.rounds = 512, 1, 1
  print(H.machine_header(
      f'population: P runs in one program vs one after another, task '
      f'{args.task}, native backend, default Configs (warm-up 0)',
      [f'timed: {args.rounds} interleaved rounds per arm after 1 warm-up; a '
       f'round is {args.calls} call(s) per member, ~{args.steps} env steps '
       'per member']), flush=True)
  rows = []
  for name in args.agents.split(','):
    for p in (int(x) for x in args.populations.split(',')):
      pop_round, seq_round, steps, (t_pop, t_seq) = _arms(name, p, args)
      cpu = []
      wall = H.interleaved([pop_round, seq_round], args.rounds, cpu=cpu)
      wp, ws = H.median(wall[0]), H.median(wall[1])
      cp, cs = H.median(cpu[0]), H.median(cpu[1])
      rows.append([
          name, str(p), f'{t_pop.wall:.0f}/{t_seq.wall:.0f}',
          f'{steps / wp:,.0f}', f'{steps / ws:,.0f}',
          f'{1e6 * cp / steps:.1f}', f'{1e6 * cs / steps:.1f}',
          f'{ws / wp:.2f}', f'{cs / cp:.2f}'])
      H.flush_print(H.fmt_table(HEADER, rows[-1:]), f'  (load {H.load_now()})')
  print()
  print(H.fmt_table(HEADER, rows))
  print('ratios: sequential / population (> 1: one program for P runs is '
        'faster); wall and process CPU seconds, medians over rounds')


HEADER = ['agent', 'P', 'first s pop/seq', 'pop sps', 'seq sps',
          'pop cpu us/step', 'seq cpu us/step', 'wall ratio', 'cpu ratio']


if __name__ == '__main__':
  main()
