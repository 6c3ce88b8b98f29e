"""Tests for the pixel encoder, observation fusion and random-shift augmentation."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import networks

H, W, S = 16, 16, 3
SHAPES = (('pixels', (H, W, 3 * S), 'uint8'), ('state', (5,), 'float32'))


def _images(key, shape):
  return jax.random.randint(key, shape, 0, 256).astype(jnp.uint8)


def _obs(key, lead=(4,)):
  k1, k2 = jax.random.split(key)
  return {'pixels': _images(k1, lead + (H, W, 3 * S)),
          'state': jax.random.normal(k2, lead + (5,))}


def _net(fn):
  return hk.without_apply_rng(hk.transform(fn))


def test_pixel_encoder_shapes_range_and_batch_axes():
  net = _net(lambda x: networks.PixelEncoder(
      channels=(8, 8), kernel_sizes=(3, 3), strides=(2, 2),
      feature_size=12)(x))
  images = _images(jax.random.PRNGKey(0), (2, 3, H, W, 6))
  params = net.init(jax.random.PRNGKey(1), images)
  out = net.apply(params, images)
  assert out.shape == (2, 3, 12) and out.dtype == jnp.float32
  assert np.all(np.abs(out) <= 1.)  # LayerNorm + tanh head.
  # Leading axes are only batch axes: unbatched and batched agree.
  single = net.apply(params, images[1, 2])
  np.testing.assert_allclose(single, out[1, 2], rtol=1e-5, atol=1e-6)


def test_pixel_encoder_scales_uint8_to_unit_interval():
  # uint8 x and float x / 255 give the same features.
  net = _net(lambda x: networks.PixelEncoder(channels=(4,), kernel_sizes=(3,),
                                             strides=(2,), feature_size=6)(x))
  images = _images(jax.random.PRNGKey(0), (2, H, W, 3))
  params = net.init(jax.random.PRNGKey(1), images)
  np.testing.assert_allclose(
      net.apply(params, images),
      net.apply(params, images.astype(jnp.float32) / 255.), rtol=1e-5,
      atol=1e-6)
  # ... and not the same as the unscaled floats.
  assert not np.allclose(net.apply(params, images),
                         net.apply(params, images.astype(jnp.float32)))


def test_pixel_encoder_without_projection_is_the_flat_conv_output():
  net = _net(lambda x: networks.PixelEncoder(
      channels=(4, 5), kernel_sizes=(3, 3), strides=(2, 2), feature_size=None,
      layer_norm=False)(x))
  images = _images(jax.random.PRNGKey(0), (2, H, W, 3))
  out = net.apply(net.init(jax.random.PRNGKey(1), images), images)
  # 16 -> 7 -> 3 pixels per side, 5 channels.
  assert out.shape == (2, 3 * 3 * 5)


def test_pixel_encoder_shape_errors():
  small = _net(lambda x: networks.PixelEncoder()(x))
  with pytest.raises(ValueError, match=r'4x4 images are too small'):
    small.init(jax.random.PRNGKey(0), jnp.zeros((1, 4, 4, 3), jnp.uint8))
  with pytest.raises(ValueError, match=r'images must be \[..., H, W, C\]'):
    small.init(jax.random.PRNGKey(0), jnp.zeros((16, 3), jnp.uint8))
  fixed = _net(lambda x: networks.PixelEncoder(image_shape=(H, W, 3))(x))
  with pytest.raises(ValueError, match=r'expected images of shape'):
    fixed.init(jax.random.PRNGKey(0), jnp.zeros((1, H, W, 6), jnp.uint8))
  bad = _net(lambda x: networks.PixelEncoder(channels=(8, 8), strides=(2,),
                                             kernel_sizes=(3,))(x))
  with pytest.raises(ValueError, match='one entry per layer'):
    bad.init(jax.random.PRNGKey(0), jnp.zeros((1, H, W, 3), jnp.uint8))


def test_observation_encoder_fuses_images_and_vectors():
  net = _net(lambda o: networks.ObservationEncoder(
      obs_shapes=SHAPES, channels=(4, 4), kernel_sizes=(3, 3),
      strides=(2, 2), feature_size=10)(o))
  obs = _obs(jax.random.PRNGKey(0))
  params = net.init(jax.random.PRNGKey(1), obs)
  out = net.apply(params, obs)
  assert out.shape == (4, 10 + 5)
  # The state vector is appended as it is, after the image features.
  np.testing.assert_array_equal(out[:, 10:], obs['state'])
  # The image features depend on the pixels.
  other = dict(obs, pixels=255 - obs['pixels'])
  assert not np.allclose(net.apply(params, other)[:, :10], out[:, :10])


def test_observation_encoder_depth_joins_pixels_and_flat_obs_pass_through():
  shapes = (('depth', (H, W, S), 'uint8'), ('pixels', (H, W, 3 * S), 'uint8'))
  net = _net(lambda o: networks.ObservationEncoder(
      obs_shapes=shapes, channels=(4,), kernel_sizes=(3,), strides=(2,),
      feature_size=7)(o))
  obs = {'depth': _images(jax.random.PRNGKey(2), (3, H, W, S)),
         'pixels': _images(jax.random.PRNGKey(3), (3, H, W, 3 * S))}
  params = net.init(jax.random.PRNGKey(1), obs)
  # One conv torso over the channels of both.
  [conv] = [v for k, v in params.items() if k.endswith('conv_0')]
  kernel = conv['w']
  assert kernel.shape[2] == 4 * S
  assert net.apply(params, obs).shape == (3, 7)
  flat = _net(lambda o: networks.ObservationEncoder()(o))
  x = jnp.arange(6.).reshape(2, 3)
  np.testing.assert_array_equal(flat.apply(flat.init(None, x), x), x)


def test_observation_encoder_names_the_bad_entry():
  net = _net(lambda o: networks.ObservationEncoder(obs_shapes=SHAPES)(o))
  obs = _obs(jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=r"keys \['pixels', 'state'\]"):
    net.init(jax.random.PRNGKey(1), {'pixels': obs['pixels']})
  with pytest.raises(ValueError, match=r"'state' must be \[..., 5\]"):
    net.init(jax.random.PRNGKey(1), dict(obs, state=jnp.zeros((4, 6))))
  with pytest.raises(ValueError, match=r"'pixels' must be uint8"):
    net.init(jax.random.PRNGKey(1),
             dict(obs, pixels=obs['pixels'].astype(jnp.float32)))
  with pytest.raises(ValueError, match='share their batch axes'):
    net.init(jax.random.PRNGKey(1), dict(obs, state=jnp.zeros((3, 5))))


# -- random shift ---------------------------------------------------------------


def test_random_shift_shape_dtype_and_jit():
  images = _images(jax.random.PRNGKey(0), (2, 5, H, W, 3))
  out = jax.jit(lambda k, x: networks.random_shift(k, x, pad=4))(
      jax.random.PRNGKey(1), images)
  assert out.shape == images.shape and out.dtype == jnp.uint8
  floats = images.astype(jnp.float32)
  assert networks.random_shift(jax.random.PRNGKey(1), floats).dtype == (
      jnp.float32)


def test_random_shift_zero_is_identity():
  images = _images(jax.random.PRNGKey(0), (4, H, W, 3))
  np.testing.assert_array_equal(
      networks.random_shift(jax.random.PRNGKey(1), images, pad=0), images)


def _crops(image, pad):
  """Every crop of the edge-padded image, keyed by (row, column) offset."""
  padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)), mode='edge')
  h, w = image.shape[:2]
  return {(i, j): padded[i:i + h, j:j + w]
          for i in range(2 * pad + 1) for j in range(2 * pad + 1)}


def test_random_shift_is_a_crop_of_the_padded_image_per_sample():
  pad = 3
  images = np.asarray(_images(jax.random.PRNGKey(0), (32, H, W, 2)))
  out = np.asarray(networks.random_shift(jax.random.PRNGKey(7), images,
                                         pad=pad))
  offsets = []
  for image, shifted in zip(images, out):
    found = [o for o, crop in _crops(image, pad).items()
             if np.array_equal(crop, shifted)]
    assert found, 'a sample is no crop of its padded image'
    offsets.append(found[0])
  # Samples get their own offsets, and they cover the range.
  assert len(set(offsets)) > 10
  rows = [o[0] for o in offsets]
  assert min(rows) <= 1 and max(rows) >= 2 * pad - 1


def test_random_shift_under_vmap_matches_batched_call_shapes():
  images = _images(jax.random.PRNGKey(0), (3, 4, H, W, 3))
  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  out = jax.vmap(lambda k, x: networks.random_shift(k, x, pad=2))(keys, images)
  assert out.shape == images.shape
  for k, x, y in zip(keys, images, out):
    np.testing.assert_array_equal(networks.random_shift(k, x, pad=2), y)


def test_random_shift_observation_aligns_images_and_keeps_vectors():
  obs = {'depth': _images(jax.random.PRNGKey(0), (8, H, W, 1)),
         'state': jnp.ones((8, 5))}
  obs['pixels'] = jnp.repeat(obs['depth'], 3, axis=-1)
  out = networks.random_shift_observation(jax.random.PRNGKey(1), obs, pad=4)
  np.testing.assert_array_equal(out['state'], obs['state'])
  # The same offset for both images of a sample.
  np.testing.assert_array_equal(out['pixels'][..., :1], out['depth'])
  assert not np.array_equal(out['depth'], obs['depth'])
  flat = jnp.ones((8, 5))
  assert networks.random_shift_observation(jax.random.PRNGKey(1), flat) is flat
