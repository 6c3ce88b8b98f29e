"""What `networks.elu` saves against `jax.nn.elu`, measured in one run.

Two measurements, each as interleaved repeats (A B, A B, ...) whose median
per-repeat time ratio is printed, so that a shared machine's load changes
both sides alike:

  layer    LayerNorm then ELU on a [rows, 256] array, forward, and forward
           with the backward pass (the gradient of the sum), the shape of
           MPO's target critic scoring 20 actions at each of 256 states;
  update   MPO's whole update (default Config, WalkerWalk's observation 24
           and action 6, batch 256), `--updates` of them in one scanned
           program as the compiled loop runs them, built once with
           `jax.nn.elu` in place of `networks.elu` (the baseline) and once
           as the recipe is.

Values are compared too: the largest |difference| (over the largest |value|
of the same leaf) of the layer's outputs and gradients, and of the
parameters after the scanned updates from the same state, batches and key.

  python benchmarks/activation_cost.py            # ~1 minute on 2 cores
  python benchmarks/activation_cost.py --repeats 21 --updates 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import haiku as hk  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=wrong-import-position
import jax.numpy as jnp  # pylint: disable=wrong-import-position

import _harness as H  # pylint: disable=g-import-not-at-top,wrong-import-position
import update_cost as U  # pylint: disable=g-import-not-at-top,wrong-import-position
from roxie import networks  # pylint: disable=wrong-import-position

SPEC = U.SPEC._replace(task='WalkerWalk-like', obs_size=24,
                       obs_names=(('obs', 24),))


def _timed(fn, *args):
  """A no-argument call that runs the compiled fn and blocks."""
  compiled = jax.jit(fn).lower(*args).compile()
  return lambda: jax.block_until_ready(compiled(*args))


def _relative_diff(a, b) -> float:
  """max |a - b| over max |a|, leaf by leaf, the largest."""
  return max(float(jnp.max(jnp.abs(x - y)) / jnp.maximum(jnp.max(jnp.abs(x)),
                                                           1e-30))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def layer_rows(activations, rows: int, repeats: int):
  """[(name, ms per call per activation, ratio, relative diff)] of the layer."""
  x = jax.random.normal(jax.random.PRNGKey(0), (rows, 256))
  net = hk.without_apply_rng(hk.transform(
      lambda x, act: act(hk.LayerNorm(-1, True, True)(x))))
  params = net.init(None, x, jax.nn.elu)
  out = []
  for what, make in (
      ('forward', lambda act: lambda p, x: net.apply(p, x, act)),
      ('forward+backward', lambda act: jax.grad(
          lambda p, x: jnp.sum(net.apply(p, x, act)), argnums=(0, 1)))):
    fns = [make(act) for act in activations]
    calls = [_timed(f, params, x) for f in fns]
    times = H.interleaved(calls, repeats, warmup=1)
    diff = _relative_diff(fns[0](params, x), fns[1](params, x))
    out.append((what, [1e3 * H.median(t) for t in times],
                H.median([b / a for a, b in zip(*times)]), diff))
  return out


def update_row(activations, updates: int, repeats: int):
  """(ms per update per activation, ratio, relative diff) of MPO."""
  from roxie import agents  # pylint: disable=g-import-not-at-top
  module = agents.get_agent('mpo')
  batches = None
  calls, finals = [], []
  key = jax.random.PRNGKey(3)
  saved = networks.elu
  try:
    for act in activations:
      # The recipe reads `networks.elu` when it builds (and traces) its
      # networks: swap it for the baseline's build and compile.
      networks.elu = act
      recipe = module.make(module.Config(), SPEC)
      state = jax.jit(lambda k: recipe.init(k, SPEC))(jax.random.PRNGKey(0))
      if batches is None:
        batches = U.synthetic_transitions(jax.random.PRNGKey(1), updates,
                                          recipe.replay.batch_size, SPEC)
      fn = jax.jit(lambda s, b, k, r=recipe: U.many(r.update, s, b, k))
      finals.append(fn(state, batches, key)[0])
      _, call = U.compile_and_runner(U.scanned(recipe.update), state, batches,
                                     key)
      calls.append(call)
  finally:
    networks.elu = saved
  times = H.interleaved(calls, repeats, warmup=1)
  diff = _relative_diff((finals[0].critic, finals[0].policy),
                        (finals[1].critic, finals[1].policy))
  return ([1e3 * H.median(t) / updates for t in times],
          H.median([b / a for a, b in zip(*times)]), diff)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--repeats', type=int, default=9)
  p.add_argument('--updates', type=int, default=10,
                 help='MPO updates per scanned program')
  p.add_argument('--rows', type=int, default=5120,
                 help="the layer's rows (MPO: 20 samples x batch 256)")
  args = p.parse_args(argv)
  if min(args.repeats, args.updates, args.rows) < 1:
    print('activation_cost: --repeats, --updates and --rows must be >= 1',
          file=sys.stderr)
    return 2
  print(H.machine_header('activation_cost: networks.elu against jax.nn.elu'))
  activations = (jax.nn.elu, networks.elu)
  rows = []
  t0 = time.time()
  for what, ms, ratio, diff in layer_rows(activations, args.rows,
                                          args.repeats):
    rows.append([f'LayerNorm+ELU [{args.rows}, 256] {what}', f'{ms[0]:.3f}',
                 f'{ms[1]:.3f}', f'{ratio:.3f}', f'{diff:.1e}'])
  ms, ratio, diff = update_row(activations, args.updates, args.repeats)
  rows.append([f'MPO update ({SPEC.obs_size}/{SPEC.action_size}, '
               f'{args.updates} per program)', f'{ms[0]:.3f}', f'{ms[1]:.3f}',
               f'{ratio:.3f}', f'{diff:.1e}'])
  print(H.fmt_table(['what', 'jax.nn.elu ms', 'networks.elu ms',
                     'x baseline', 'rel. diff'], rows))
  print(f'\n{args.repeats} interleaved repeats, median; x baseline: median '
        'of per-repeat time ratios (networks.elu / jax.nn.elu); rel. diff: '
        'max |difference| over max |value| in any leaf, of the outputs and '
        'gradients (layer) or the parameters after the updates (update). '
        f'{time.time() - t0:.0f} s; load average at the end '
        f'{H.load_now()}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
