"""roxie.optim: the clipped-Adam constructor and the optimiser steps."""

import functools

import jax
from jax import flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from roxie import optim


def test_step_is_one_adam_step():
  # Adam's first step from a zero state moves each parameter by
  # -lr * g / (|g| + eps), i.e. by -lr * sign(g) (bias correction makes the
  # first moments g and g^2).
  params = {'w': jnp.array([1., -2., 3.]), 'b': jnp.array(0.5)}
  grads = {'w': jnp.array([2., -0.5, 0.]), 'b': jnp.array(-4.)}
  opt = optim.adam(0.1)
  new, opt_state = jax.jit(optim.step, static_argnums=0)(
      opt, params, opt.init(params), grads)
  np.testing.assert_allclose(new['w'], [0.9, -1.9, 3.], rtol=1e-5)
  np.testing.assert_allclose(new['b'], 0.6, rtol=1e-5)
  assert int(opt_state[0].count) == 1


def test_step_with_clipping_scales_the_gradients_first():
  # Plain SGD (no Adam normalisation) shows the clip: the global norm of
  # (3, 4) is 5, clipped to 1 the gradient is (0.6, 0.8).
  opt = optax.chain(optax.clip_by_global_norm(1.), optax.sgd(1.))
  params = jnp.zeros(2)
  new, _ = optim.step(opt, params, opt.init(params), jnp.array([3., 4.]))
  np.testing.assert_allclose(new, [-0.6, -0.8], rtol=1e-5)


def test_adam_without_clipping_is_plain_adam():
  params = jnp.array([1., 2.])
  grads = jnp.array([0.3, -0.7])
  ours, _ = optim.step(optim.adam(1e-2), params,
                       optim.adam(1e-2).init(params), grads)
  ref = optax.adam(1e-2)
  updates, _ = ref.update(grads, ref.init(params), params)
  np.testing.assert_array_equal(ours, optax.apply_updates(params, updates))


def test_clip_segments_equals_optax_per_tree():
  trees = ({'w': jnp.array([[3., 4.]]), 'b': jnp.array([0.1])},
           {'w': jnp.array([0.01, -0.02])})
  flat, unravel = flatten_util.ravel_pytree(trees)
  sizes = (3, 2)
  clip = optax.clip_by_global_norm(1.)
  got = unravel(optim.clip_segments_by_norm(flat, sizes, 1.))
  for g, t in zip(got, trees):
    want, _ = clip.update(t, clip.init(t))
    for x, y in zip(jax.tree.leaves(g), jax.tree.leaves(want)):
      np.testing.assert_allclose(x, y, rtol=1e-6)
  # The first segment's norm is ~5.001: scaled to 1; the second is not.
  np.testing.assert_allclose(got[0]['w'], [[3., 4.]] / np.sqrt(25.01),
                             rtol=1e-6)
  np.testing.assert_array_equal(got[1]['w'], trees[1]['w'])
  with pytest.raises(ValueError, match='add up'):
    optim.clip_segments_by_norm(flat, (3, 3), 1.)


def test_flat_adam_equals_optax_and_round_trips_its_state():
  params = ({'w': jnp.ones((2, 2))}, {'b': jnp.zeros(3)})
  opts = (optax.chain(optax.clip_by_global_norm(10.),
                      optax.scale_by_adam(eps=1e-5)),
          optax.scale_by_adam(eps=1e-5))
  states = tuple(o.init(p) for o, p in zip(opts, params))
  flat_state = optim.ravel_adam_states(states)
  assert flat_state.mu.shape == flat_state.nu.shape == (7,)
  _, unravel = flatten_util.ravel_pytree(params)
  for i in range(3):
    grads = jax.tree.map(
        lambda x, i=i: jnp.sin(jnp.arange(x.size) + 3. * i).reshape(x.shape),
        params)
    # Both under jit, as the recipes run them: eagerly, 0.999 ** count can
    # round differently by one ulp, which 1 - 0.999 ** count magnifies.
    outs = [jax.jit(o.update)(g, s) for o, g, s in zip(opts, grads, states)]
    states = tuple(s for _, s in outs)
    direction, flat_state = jax.jit(functools.partial(
        optim.adam_direction, eps=1e-5))(
            flatten_util.ravel_pytree(grads)[0], flat_state)
    for x, y in zip(jax.tree.leaves(unravel(direction)),
                    jax.tree.leaves(tuple(u for u, _ in outs))):
      np.testing.assert_allclose(x, y, rtol=1e-6)
  back = optim.unravel_adam_states(flat_state, states)
  assert jax.tree.structure(back) == jax.tree.structure(states)
  for x, y in zip(jax.tree.leaves(back), jax.tree.leaves(states)):
    assert x.dtype == y.dtype
    np.testing.assert_allclose(x, y, rtol=1e-6)
  assert int(back[0][1].count) == int(back[1].count) == 3
