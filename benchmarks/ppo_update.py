"""PPO's update before and after the flat optimiser: kernels and time.

"before" is the per-leaf update PPO had (two optax optimisers over the
actor's and the critic's parameter trees, each data leaf gathered on its
own), kept as `reference_update` in tests/agents/test_ppo_flat_update.py,
which checks that both compute the same numbers; "after" is the recipe's
`update`. Both run the same config on the same state, rollout and key.

Kernels per SGD step: read from the optimized HLO of the jitted update (what
XLA's CPU runtime executes). The minibatch step is the body of the while
loop that holds the networks' matrix products (the innermost scan); every
instruction in it that XLA runs as a kernel (a thunk) is counted: fusions,
dots, copies, concatenates, sorts, custom calls, ..., and NOT parameter,
constant, get-tuple-element, tuple and bitcast, which move no data.

Time per update (one PPO iteration: GAE, statistics, epochs x minibatches):
jitted, compiled first, one warm-up call, then `--repeats` calls of each in
alternating order, each ended by `block_until_ready`; medians of wall-clock
and process-CPU seconds (all threads). The ratio before / after is the
speed-up; compare figures from the same run only (the machine may be
shared; the load average is printed).

  python benchmarks/ppo_update.py            # vs_brax's PPO settings
  python benchmarks/ppo_update.py --envs 256 --rollout 16 --minibatches 32
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from typing import Dict, Tuple

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, '..', 'tests', 'agents'))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp

import _harness as H  # pylint: disable=g-import-not-at-top
from roxie.agents import ppo  # pylint: disable=g-import-not-at-top
from roxie.types import EnvSpec, Rollout  # pylint: disable=g-import-not-at-top
from test_ppo_flat_update import reference_update  # pylint: disable=g-import-not-at-top

# CartpoleSwingup's sizes.
SPEC = EnvSpec(task='CartpoleSwingup-like', obs_size=5, action_size=1,
               obs_names=(('obs', 5),), control_timestep=0.01,
               episode_length=1000)
_FREE = {'parameter', 'constant', 'get-tuple-element', 'tuple', 'bitcast'}


def _computations(hlo: str) -> Dict[str, list]:
  """Computation name -> its instruction lines, from HLO text."""
  comps, cur = {}, None
  for line in hlo.splitlines():
    if not line.startswith(' ') and line.rstrip().endswith('{'):
      m = re.match(r'^(?:ENTRY )?%?([\w.\-]+) ', line)
      if m:
        cur = m.group(1)
        comps[cur] = []
        continue
    if line.startswith('}'):
      cur = None
    elif cur is not None and ' = ' in line:
      comps[cur].append(line.strip())
  return comps


def _opcode(line: str) -> str:
  # `%name = <shape> opcode(operands), ...`; shapes may hold spaces, so take
  # the first `word(` after the shape's last `]`, `}` or `)`.
  rhs = line.split(' = ', 1)[1]
  m = re.search(r'(?:^|[\]})\s])([a-z][\w\-]*)\(', rhs)
  return m.group(1) if m else '?'


def step_kernels(hlo: str) -> Tuple[int, Dict[str, int]]:
  """Kernels in one minibatch step: (count, count per opcode)."""
  comps = _computations(hlo)
  bodies = set()
  for lines in comps.values():
    for line in lines:
      m = re.search(r'body=%?([\w.\-]+)', line)
      if m:
        bodies.add(m.group(1))
  # The minibatch step: the while body with the most matrix products.
  dots = lambda name: sum(1 for l in comps[name]
                          if 'dot(' in l or 'dot_general' in l)
  body = max(bodies, key=dots)
  ops = collections.Counter(_opcode(l) for l in comps[body])
  kernels = {k: v for k, v in ops.items() if k not in _FREE}
  return sum(kernels.values()), dict(sorted(kernels.items()))


def _rollout(recipe, state, t, b, key) -> Rollout:
  k_obs, k_act, k_fin = jax.random.split(key, 3)
  obs = jax.random.normal(k_obs, (t, b, SPEC.obs_size))
  action, extras = jax.vmap(lambda o, k: recipe.act(state, o, k))(
      obs, jax.random.split(k_act, t))
  ended = jnp.zeros((t, b), bool).at[t // 2, ::3].set(True)
  return Rollout(obs=obs, action=action, reward=jnp.sin(obs[..., 0]),
                 terminated=jnp.zeros((t, b), bool), truncated=ended,
                 final_obs=jax.random.normal(k_fin, obs.shape), extras=extras,
                 last_obs=obs[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--envs', type=int, default=16)
  parser.add_argument('--rollout', type=int, default=64)
  parser.add_argument('--epochs', type=int, default=10)
  parser.add_argument('--minibatches', type=int, default=8)
  parser.add_argument('--hidden', default='64,64')
  parser.add_argument('--repeats', type=int, default=21)
  args = parser.parse_args()
  hidden = tuple(int(x) for x in args.hidden.split(','))
  config = ppo.Config(rollout_length=args.rollout,
                      num_epochs=args.epochs,
                      num_minibatches=args.minibatches, hidden_sizes=hidden)
  steps = args.epochs * args.minibatches
  print(H.machine_header(
      'ppo_update: PPO update, per-leaf optax (before) vs flat (after)',
      [f'obs {SPEC.obs_size}, action {SPEC.action_size}, rollout '
       f'{args.rollout} x {args.envs} envs, {args.epochs} epochs x '
       f'{args.minibatches} minibatches of '
       f'{args.rollout * args.envs // args.minibatches}, hidden {hidden}',
       f'{args.repeats} interleaved repeats, medians']), flush=True)

  recipe = ppo.make(config, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  rollout = _rollout(recipe, state, args.rollout, args.envs,
                     jax.random.PRNGKey(1))
  key = jax.random.PRNGKey(2)
  fns = {'before': reference_update(config, SPEC), 'after': recipe.update}
  compiled, kernels = {}, {}
  for name, fn in fns.items():
    with H.Stopwatch() as t:
      compiled[name] = jax.jit(fn).lower(state, rollout, key).compile()
    kernels[name] = step_kernels(compiled[name].as_text())
    print(f'  {name}: compile {t.wall:.1f} s; kernels per SGD step '
          f'{kernels[name][0]}: {kernels[name][1]}', flush=True)

  # Same numbers (the test checks this over several updates and configs).
  outs = {n: compiled[n](state, rollout, key)[0] for n in fns}
  diff = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(
      jax.tree.leaves(outs['before']), jax.tree.leaves(outs['after'])))

  calls = [lambda n=n: jax.block_until_ready(compiled[n](state, rollout,
                                                         key))
           for n in fns]
  cpu = []
  load0 = H.load_now()
  wall = H.interleaved(calls, args.repeats, cpu=cpu)
  load1 = H.load_now()
  rows = []
  med = {}
  for (name, _), w, c in zip(fns.items(), wall, cpu):
    med[name] = (H.median(w), H.median(c))
    rows.append([name, f'{kernels[name][0]}',
                 f'{1e3 * med[name][0]:.2f}', f'{1e3 * med[name][1]:.2f}',
                 f'{1e6 * med[name][0] / steps:.0f}',
                 f'{1e6 * med[name][1] / steps:.0f}'])
  print()
  print(H.fmt_table(['update', 'kernels/step', 'wall ms', 'cpu ms',
                     'wall us/step', 'cpu us/step'], rows))
  b, a = med['before'], med['after']
  print(f'\nkernels per SGD step: {kernels["before"][0]} -> '
        f'{kernels["after"][0]} ({kernels["before"][0] / kernels["after"][0]:.2f}x fewer)')
  print(f'before / after per update: wall {b[0] / a[0]:.2f}x, process CPU '
        f'{b[1] / a[1]:.2f}x; max |parameter difference| after one update '
        f'{diff:.1e}')
  print(f'load average: {load0} at start, {load1} at end')


if __name__ == '__main__':
  main()
