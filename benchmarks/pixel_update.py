"""Cost of one SAC update from pixels, at the top level and inside a scan.

Every roxie training update runs inside `lax.scan` (`make_compiled_loop`
scans iterations). On XLA:CPU the gradient convolutions autodiff emits for a
conv encoder run there in swapped layouts through XLA's slow generic
convolution; `roxie.networks.conv.Conv2D` states its backward pass in the
canonical layouts instead (see that module). For each resolution this times
SAC's update (PIXEL_DEFAULTS: batch 128, frame stack 3, the default
16-32-32 encoder, DrQ shift) with the encoder's convolutions as
  roxie      `roxie.networks.conv.Conv2D` (what the encoder uses);
  autodiff   `hk.Conv2D` (plain autodiff), swapped in for this benchmark;
called as
  top        one jitted update;
  scan       `lax.scan` over 4 updates, as in the training loop;
and prints ms per update (median of interleaved repeats, wall and process
CPU) and the in-scan speed-up of roxie over autodiff, measured in the same
run.

  python benchmarks/pixel_update.py
  python benchmarks/pixel_update.py --resolutions 64 --batch 256
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import haiku as hk  # pylint: disable=g-import-not-at-top
import jax
import jax.numpy as jnp
import numpy as np

import _harness as H  # pylint: disable=g-import-not-at-top
from roxie import run as run_lib
from roxie.agents import sac
from roxie.networks import conv
from roxie.types import EnvSpec, Transition

_SCAN = 4  # Updates per scan call.


class _AutodiffConv2D(hk.Conv2D):
  """hk.Conv2D with roxie's Conv2D signature (VALID padding)."""

  def __init__(self, output_channels, kernel_shape, stride, name=None):
    super().__init__(output_channels, kernel_shape=kernel_shape,
                     stride=stride, padding='VALID', name=name)


def _spec(res: int, stack: int) -> EnvSpec:
  return EnvSpec(task='CartpoleSwingup', obs_size=0, action_size=1,
                 obs_names=(), control_timestep=0.01, episode_length=1000,
                 obs_shapes=(('pixels', (res, res, 3 * stack), 'uint8'),),
                 frame_stack=stack)


def _programs(res: int, batch: int, impl):
  """(top, scan) callables that block, for the encoder conv class `impl`."""
  conv.Conv2D, saved = impl, conv.Conv2D
  try:
    spec = _spec(res, 3)
    cfg = dataclasses.replace(sac.Config(), **dict(
        run_lib.split_overrides(run_lib.pixel_defaults('sac'))[1],
        batch_size=batch))
    recipe = sac.make(cfg, spec)
    state = recipe.init(jax.random.PRNGKey(0), spec)
    rng = np.random.default_rng(0)
    obs = {'pixels': jnp.asarray(rng.integers(0, 256, (batch, res, res, 9),
                                              dtype=np.uint8))}
    data = Transition(obs=obs, action=jnp.zeros((batch, 1)),
                      reward=jnp.zeros((batch,)),
                      discount=jnp.ones((batch,)), next_obs=obs)
    top = jax.jit(recipe.update)

    @jax.jit
    def scan(state, data, key):
      def body(s, k):
        s, m = recipe.update(s, data, k)
        return s, m['q']
      return jax.lax.scan(body, state, jax.random.split(key, _SCAN))

    top_c = top.lower(state, data, jax.random.PRNGKey(1)).compile()
    scan_c = scan.lower(state, data, jax.random.PRNGKey(1)).compile()
  finally:
    conv.Conv2D = saved
  key = jax.random.PRNGKey(2)
  return (lambda: jax.block_until_ready(top_c(state, data, key)),
          lambda: jax.block_until_ready(scan_c(state, data, key)))


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--resolutions', default='48,64')
  p.add_argument('--batch', type=int, default=128)
  p.add_argument('--repeats', type=int, default=5)
  args = p.parse_args(argv)
  print(H.machine_header(
      'pixel_update: SAC update from pixels, conv backward pass roxie vs '
      'autodiff, top level vs inside lax.scan',
      [f'batch {args.batch}, frame stack 3, encoder 16-32-32 stride 2, '
       f'median of {args.repeats} interleaved repeats; scan = {_SCAN} '
       'updates per call']), flush=True)
  rows, notes = [], []
  for res in (int(r) for r in args.resolutions.split(',')):
    fns, names = [], []
    for label, impl in (('roxie', conv.Conv2D), ('autodiff', _AutodiffConv2D)):
      top, scan = _programs(res, args.batch, impl)
      fns += [top, scan]
      names += [(label, 'top', 1), (label, 'scan', _SCAN)]
    cpu = []
    walls = H.interleaved(fns, args.repeats, cpu=cpu)
    per = {}
    for (label, where, n), w, c in zip(names, walls, cpu):
      per[(label, where)] = H.median(w) / n
      rows.append([f'{res}x{res}', label, where,
                   f'{1e3 * H.median(w) / n:,.1f}',
                   f'{1e3 * H.median(c) / n:,.1f}'])
    notes.append(f'{res}x{res}: in scan roxie is '
                 f'{per[("autodiff", "scan")] / per[("roxie", "scan")]:.2f}x '
                 'faster than autodiff; roxie scan / top = '
                 f'{per[("roxie", "scan")] / per[("roxie", "top")]:.2f}, '
                 'autodiff scan / top = '
                 f'{per[("autodiff", "scan")] / per[("autodiff", "top")]:.2f}')
  print(H.fmt_table(['frames', 'conv', 'called', 'ms/update',
                     'cpu ms/update'], rows))
  for n in notes:
    print(n)
  print(f'load average at end: {H.load_now()}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
