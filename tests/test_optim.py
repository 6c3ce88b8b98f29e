"""roxie.optim: the clipped-Adam constructor and the optimiser step."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

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
