"""networks.elu: jax.nn.elu's values and derivatives, computed without expm1."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import networks

# Both branches, the kink, values just either side of it, saturation, and
# magnitudes where a careless exp would overflow.
GRID = np.array([-1e4, -100., -20., -3., -1., -0.5, -1e-3, -1e-6, -1e-30,
                 0., 1e-30, 1e-6, 1e-3, 0.5, 1., 3., 20., 100., 1e4],
                np.float32)


def test_elu_matches_hand_computed_values():
  x = jnp.array([-1., 0., 2., -math.log(2.)], jnp.float32)
  np.testing.assert_allclose(networks.elu(x),
                             [math.exp(-1.) - 1., 0., 2., -0.5], atol=1e-7)


def test_elu_values_equal_jax_nn_elu_to_float32_rounding():
  ours, ref = networks.elu(GRID), jax.nn.elu(GRID)
  # exp(x) - 1 against expm1(x): at most one float32 ulp of 1 apart.
  np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1.2e-7)
  assert float(networks.elu(jnp.float32(-1e4))) == -1.


def test_elu_derivatives_equal_jax_nn_elu():
  grad = jax.vmap(jax.grad(networks.elu))
  ref = jax.vmap(jax.grad(jax.nn.elu))
  # jax.nn.elu's derivative is expm1(x) + 1: rounding apart from exp(x).
  np.testing.assert_allclose(grad(GRID), ref(GRID), rtol=1e-6, atol=1.2e-7)
  # 1 above the kink, exp(x) at and below it (jax.nn.elu's convention at 0).
  np.testing.assert_allclose(grad(GRID), np.where(GRID > 0, 1., np.exp(
      np.minimum(GRID, 0.))), rtol=1e-6, atol=1e-37)
  hess = jax.vmap(jax.grad(jax.grad(networks.elu)))
  hess_ref = jax.vmap(jax.grad(jax.grad(jax.nn.elu)))
  np.testing.assert_allclose(hess(GRID), hess_ref(GRID), rtol=1e-6,
                             atol=1.2e-7)
  assert np.all(np.isfinite(grad(GRID))) and np.all(np.isfinite(hess(GRID)))


def test_elu_under_reverse_and_forward_mode_agree_on_arrays():
  x = jax.random.normal(jax.random.PRNGKey(0), (7, 5)) * 3.
  w = jax.random.normal(jax.random.PRNGKey(1), (7, 5))
  f = lambda f_act: lambda x: jnp.sum(w * f_act(x))
  np.testing.assert_allclose(jax.grad(f(networks.elu))(x),
                             jax.grad(f(jax.nn.elu))(x), rtol=1e-6,
                             atol=1.2e-7 * 3.)
  _, tangent = jax.jvp(networks.elu, (x,), (w,))
  _, tangent_ref = jax.jvp(jax.nn.elu, (x,), (w,))
  np.testing.assert_allclose(tangent, tangent_ref, rtol=1e-6, atol=1.2e-7 * 3.)


@pytest.mark.parametrize('bad', [np.nan, -np.nan])
def test_elu_propagates_nan_in_value_and_gradient(bad):
  # A NaN pre-activation must not come out as a finite number (faults never
  # pass silently).
  x = jnp.float32(bad)
  assert np.isnan(float(networks.elu(x)))
  assert np.isnan(float(jax.grad(networks.elu)(x)))


def test_elu_keeps_dtype_and_shape():
  x = jnp.zeros((2, 3), jnp.bfloat16) - 1.
  y = networks.elu(x)
  assert y.dtype == jnp.bfloat16 and y.shape == (2, 3)
  assert jax.grad(lambda x: jnp.sum(networks.elu(x)))(x).dtype == jnp.bfloat16


def test_elu_lowers_without_expm1():
  # The reason it exists: XLA's CPU backend emits expm1 slowly
  # (benchmarks/activation_cost.py). Forward and backward use exp only.
  x = jnp.ones((4,))
  for fn in (networks.elu, jax.grad(lambda x: jnp.sum(networks.elu(x)))):
    text = str(jax.make_jaxpr(fn)(x))
    assert 'expm1' not in text and 'exp' in text
  assert 'expm1' in str(jax.make_jaxpr(jax.nn.elu)(x))
