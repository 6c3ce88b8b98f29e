"""roxie.networks.conv: hk.Conv2D's numbers, with a backward pass in the
layouts XLA:CPU convolves fast inside loops."""

import re

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie.networks import conv

_DN = ('NHWC', 'HWIO', 'NHWC')


def _reference(x, w, stride):
  return jax.lax.conv_general_dilated(x, w, (stride, stride), 'VALID',
                                      dimension_numbers=_DN)


@pytest.mark.parametrize('size, kernel, stride', [
    (16, 3, 2),  # (16 - 3) % 2 = 1: the last row is never reached.
    (15, 3, 2),
    (9, 3, 1),
    (14, 4, 3),  # (14 - 4) % 3 = 1.
    (12, 5, 3),  # (12 - 5) % 3 = 1, kernel larger than the stride.
])
def test_values_and_gradients_equal_autodiff(size, kernel, stride):
  k = jax.random.split(jax.random.PRNGKey(size + kernel + stride), 3)
  x = jax.random.normal(k[0], (3, size, size + 1, 4))
  w = jax.random.normal(k[1], (kernel, kernel, 4, 5))
  y, vjp = jax.vjp(lambda a, b: _reference(a, b, stride), x, w)
  y2, vjp2 = jax.vjp(lambda a, b: conv.conv2d_valid(a, b, stride), x, w)
  np.testing.assert_allclose(y2, y, rtol=1e-6, atol=1e-6)
  dy = jax.random.normal(k[2], y.shape)
  for got, want in zip(vjp2(dy), vjp(dy)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_module_matches_haiku_conv2d_parameters_and_outputs():
  x = jax.random.uniform(jax.random.PRNGKey(0), (2, 11, 11, 3))
  ours = hk.transform(lambda x: conv.Conv2D(6, 3, 2, name='c')(x))
  theirs = hk.transform(lambda x: hk.Conv2D(6, kernel_shape=3, stride=2,
                                            padding='VALID', name='c')(x))
  p1, p2 = ours.init(jax.random.PRNGKey(1), x), theirs.init(
      jax.random.PRNGKey(1), x)
  assert jax.tree.structure(p1) == jax.tree.structure(p2)
  for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
    np.testing.assert_array_equal(a, b)  # Same initialisation, bit for bit.
  np.testing.assert_allclose(ours.apply(p1, None, x),
                             theirs.apply(p2, None, x), rtol=1e-6, atol=1e-6)


def _conv_labels(fn, *args):
  text = jax.jit(fn).lower(*args).compile().as_text()
  return re.findall(r'convolution\([^)]*\),.*?dim_labels=([a-z0-9_>-]+)',
                    text)


def test_gradients_inside_a_loop_are_canonical_convolutions():
  # The reason for the module: inside a while loop XLA:CPU leaves autodiff's
  # kernel/input-gradient convolutions in swapped layouts (slow generic
  # convolution); ours are all NHWC/HWIO there.
  # Distinct sizes: with equal batch and channel sizes XLA may pick either
  # labelling of the same layout.
  x = jnp.ones((5, 16, 16, 3))
  w = (jnp.ones((3, 3, 3, 8)) * .1, jnp.ones((3, 3, 8, 6)) * .1)

  def step_with(conv_fn):
    def loss(w):
      return jnp.sum(conv_fn(conv_fn(x, w[0], 2), w[1], 2) ** 2)

    def loop(w):
      return jax.lax.fori_loop(0, 2, lambda i, w: jax.tree.map(
          lambda a, g: a - 1e-3 * g, w, jax.grad(loss)(w)), w)
    return loop

  ours = _conv_labels(step_with(conv.conv2d_valid), w)
  assert len(ours) == 5  # 2 forward, 2 kernel gradients, 1 input gradient.
  assert set(ours) == {'b01f_01io->b01f'}, ours
  if jax.default_backend() == 'cpu':
    # What autodiff leaves there (if XLA ever canonicalises these, this
    # module can go: the test says so).
    theirs = _conv_labels(step_with(_reference), w)
    assert set(theirs) != {'b01f_01io->b01f'}, theirs
