"""benchmarks/_harness.py's FLOP counter, against hand-counted products."""

import os
import sys

import haiku as hk
import jax
import jax.numpy as jnp
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'benchmarks')
sys.path.insert(0, BENCH)

import _harness as H  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_one_product():
  a, b = jnp.ones((7, 5)), jnp.ones((5, 3))
  assert H.matmul_flops(jnp.dot, a, b) == 2 * 7 * 5 * 3


def test_batched_einsum_counts_the_batch():
  a, b = jnp.ones((2, 128, 64)), jnp.ones((2, 64, 32))
  f = lambda x, y: jnp.einsum('eij,ejk->eik', x, y)
  assert H.matmul_flops(f, a, b) == 2 * 2 * 128 * 64 * 32


def test_scan_counts_its_body_length_times():
  """The case XLA's cost analysis gets wrong: it counts a loop body once."""
  w = jnp.ones((16, 16))

  def f(x):
    return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=10)[0]

  x = jnp.ones((4, 16))
  assert H.matmul_flops(f, x) == 10 * 2 * 4 * 16 * 16
  compiled = jax.jit(f).lower(x).compile().cost_analysis()
  compiled = compiled[0] if isinstance(compiled, (list, tuple)) else compiled
  # XLA's figure is that of one iteration, not ten (the reason for the
  # counter); if XLA starts scaling by the trip count this documents it.
  assert compiled['flops'] < 0.5 * H.matmul_flops(f, x)


def test_gradient_of_a_linear_layer_is_three_products():
  """Forward x @ w, backward dL/dw = x^T g and dL/dx = g w^T: 3x forward."""
  x, w = jnp.ones((32, 8)), jnp.ones((8, 4))
  loss = lambda w, x: jnp.sum(jnp.tanh(x @ w))
  forward = 2 * 32 * 8 * 4
  assert H.matmul_flops(jax.grad(loss), w, x) == 2 * forward  # dL/dw only.
  assert H.matmul_flops(jax.grad(loss, argnums=(0, 1)), w, x) == 3 * forward


def test_haiku_mlp_inside_jit_and_cond():
  mlp = hk.without_apply_rng(hk.transform(lambda x: hk.nets.MLP([64, 2])(x)))
  params = mlp.init(jax.random.PRNGKey(0), jnp.ones((1, 5)))
  x = jnp.ones((10, 5))
  forward = 2 * 10 * (5 * 64 + 64 * 2)
  assert H.matmul_flops(jax.jit(mlp.apply), params, x) == forward
  # cond: the costlier branch.
  f = lambda p, x, c: jax.lax.cond(c, lambda: mlp.apply(p, x).sum(),
                                   lambda: x.sum())
  assert H.matmul_flops(f, params, x, True) == forward


def test_convolution():
  x = jnp.ones((2, 9, 9, 3))  # NHWC
  k = jnp.ones((3, 3, 3, 8))  # HWIO
  f = lambda x, k: jax.lax.conv_general_dilated(
      x, k, (1, 1), 'VALID', dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  assert H.matmul_flops(f, x, k) == 2 * (2 * 7 * 7 * 8) * (3 * 3 * 3)


def test_while_loop_is_refused():
  f = lambda x: jax.lax.while_loop(lambda c: c.sum() < 10., lambda c: c @ c, x)
  with pytest.raises(ValueError, match='scan'):
    H.matmul_flops(f, jnp.ones((2, 2)))


def test_residual_torso_products_hand_counted():
  """networks.ResidualMLP: an embedding D -> W, then 2 W x W per block."""
  from roxie import networks  # pylint: disable=g-import-not-at-top
  b, d, w, blocks = 32, 23, 64, 2
  net = hk.without_apply_rng(hk.transform(
      lambda x: networks.ResidualMLP(w, blocks)(x)))
  x = jnp.ones((b, d))
  params = net.init(jax.random.PRNGKey(0), x)
  assert H.matmul_flops(net.apply, params, x) == 2 * b * (d * w +
                                                          2 * blocks * w * w)


def test_update_cost_variant_parsing():
  import update_cost  # pylint: disable=g-import-not-at-top
  assert update_cost.parse_variant('r:critic_blocks=1;critic_width=256') == (
      'r', {'critic_blocks': '1', 'critic_width': '256'})
  for bad in ('critic_blocks=1', 'r:', 'r:critic_blocks'):
    with pytest.raises(SystemExit, match='update_cost.py: --variant'):
      update_cost.parse_variant(bad)


def test_update_cost_variant_refused_before_timing():
  """Unknown agents, bad overrides and on-policy recipes: refused up front."""
  import argparse  # pylint: disable=g-import-not-at-top
  import update_cost  # pylint: disable=g-import-not-at-top
  ok = [update_cost.parse_variant('r:critic_blocks=1;critic_width=64')]
  cases = [(['nosuch'], ok, '--variant-agents'),
           (['sac'], [update_cost.parse_variant('r:critic_blocks=-1')],
            '--variant r for sac'),
           (['sac', 'ppo'], [update_cost.parse_variant('r:discount=0.98')],
            'ppo is on-policy')]
  for agents_, variants, message in cases:
    args = argparse.Namespace(variant_agents=agents_, variant=variants)
    with pytest.raises(SystemExit, match=message):
      update_cost.variant_configs(args)
  configs = update_cost.variant_configs(
      argparse.Namespace(variant_agents=['sac'], variant=ok))
  assert [(a, [v for v, _, _ in c]) for a, c in configs] == [
      ('sac', ['default', 'r'])]


def test_update_cost_bad_variant_exits_2():
  import subprocess  # pylint: disable=g-import-not-at-top
  script = os.path.join(BENCH, 'update_cost.py')
  proc = subprocess.run([sys.executable, script, '--variant', 'r:nosuch=1'],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr
  assert 'update_cost.py: --variant' in proc.stderr
  assert 'Traceback' not in proc.stderr
