"""PixelEncoder pooling: resolution-agnostic parameters, spatial softmax."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import networks


def _shapes(pooling, height, width, feature_size=6):
  net = hk.without_apply_rng(hk.transform(lambda x: networks.PixelEncoder(
      channels=(4, 4), kernel_sizes=(3, 3), strides=(2, 2),
      feature_size=feature_size, layer_norm=feature_size is not None,
      pooling=pooling)(x)))
  images = jnp.zeros((2, height, width, 6), jnp.uint8)
  params = jax.eval_shape(net.init, jax.random.PRNGKey(0), images)
  out = jax.eval_shape(net.apply, params, images)
  return jax.tree.map(lambda s: s.shape, params), out.shape


@pytest.mark.parametrize('pooling', ['mean', 'spatial_softmax'])
def test_agnostic_pooling_params_fit_every_resolution(pooling):
  small, out_small = _shapes(pooling, 16, 16)
  large, out_large = _shapes(pooling, 24, 32)
  assert small == large
  assert out_small == out_large == (2, 6)
  # Without a projection the feature is C (mean) or 2C (spatial softmax).
  _, out = _shapes(pooling, 24, 24, feature_size=None)
  assert out == (2, 4 if pooling == 'mean' else 8)


def test_flatten_params_depend_on_the_resolution():
  small, _ = _shapes('flatten', 16, 16)
  large, _ = _shapes('flatten', 24, 24)
  assert small != large
  assert small['pixel_encoder/conv_0'] == large['pixel_encoder/conv_0']
  # 16x16 -> 7x7 -> 3x3 (x4 channels); 24x24 -> 11x11 -> 5x5.
  assert small['pixel_encoder/projection']['w'] == (36, 6)
  assert large['pixel_encoder/projection']['w'] == (100, 6)


def test_default_pooling_is_flatten_and_bit_identical():
  images = jax.random.randint(jax.random.PRNGKey(0), (3, 16, 16, 3), 0,
                              256).astype(jnp.uint8)
  make = lambda **kw: hk.without_apply_rng(hk.transform(
      lambda x: networks.PixelEncoder(channels=(4,), kernel_sizes=(3,),
                                      strides=(2,), **kw)(x)))
  default, flatten = make(), make(pooling='flatten')
  params = default.init(jax.random.PRNGKey(1), images)
  assert jax.tree.map(lambda x: x.shape, params) == jax.tree.map(
      lambda x: x.shape, flatten.init(jax.random.PRNGKey(1), images))
  np.testing.assert_array_equal(default.apply(params, images),
                                flatten.apply(params, images))
  assert networks.PixelConfig().encoder_pooling == 'flatten'


def test_spatial_softmax_by_hand():
  # One image, 2x3 map, 2 channels. Coordinates: x in {-1, 0, 1} across the
  # width, y in {-1, 1} down the height.
  c0 = np.array([[0., 0., 0.], [0., 0., np.log(4.)]])  # Weights 1 1 1 / 1 1 4.
  c1 = np.array([[5., 0., 0.], [0., 0., 0.]])
  features = np.stack([c0, c1], axis=-1)[None].astype(np.float32)
  out = np.asarray(networks.spatial_softmax(jnp.asarray(features)))
  xs = np.array([[-1., 0., 1.], [-1., 0., 1.]])
  ys = np.array([[-1., -1., -1.], [1., 1., 1.]])
  expected = []
  for coord in (xs, ys):
    for c in (c0, c1):
      p = np.exp(c) / np.exp(c).sum()
      expected.append((p * coord).sum())
  np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-6)
  # c0: weights 1,1,1,1,1,4 of 9: x = (-1 + 0 + 1 - 1 + 0 + 4) / 9 = 1/3.
  np.testing.assert_allclose(out[0, 0], 1. / 3., rtol=1e-5)
  np.testing.assert_allclose(out[0, 2], (-3 + 6) / 9., rtol=1e-5)
  # A uniform map's keypoint is the centre.
  flat = networks.spatial_softmax(jnp.zeros((1, 5, 4, 1)))
  np.testing.assert_allclose(flat, [[0., 0.]], atol=1e-6)


def test_encoder_config_pooling_reaches_the_shared_encoder():
  shapes = (('pixels', (16, 16, 3), 'uint8'),)
  config = networks.PixelConfig(encoder_channels=(4,), encoder_strides=(2,),
                                encoder_feature_size=5,
                                encoder_pooling='spatial_softmax')
  spec = type('Spec', (), {'obs_shapes': shapes})()
  enc = networks.encoder_from_config(config, spec)
  params = enc.init(jax.random.PRNGKey(0), enc.dummy_obs(2))
  # 4 channels -> 8 keypoint coordinates -> projection 8 x 5.
  w = params['observation_encoder/pixel_encoder/projection']['w']
  assert w.shape == (8, 5)


def test_unknown_pooling_is_refused():
  with pytest.raises(ValueError, match="Unknown encoder pooling 'max'"):
    networks.check_pooling('max')
  net = hk.transform(lambda x: networks.PixelEncoder(pooling='max')(x))
  with pytest.raises(ValueError, match='choose one of flatten, mean'):
    net.init(jax.random.PRNGKey(0), jnp.zeros((1, 16, 16, 3), jnp.uint8))
