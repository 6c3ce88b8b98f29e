"""The one encoder path of the off-policy recipes: identity or conv, chosen once.

`networks.observation_encoder` picks the identity for flat observations and
the conv encoder for dict ones; `networks.encoded_critic` puts either in
front of a critic, so SAC, MPO and the off-policy skeleton never ask which.
"""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from roxie import networks
from roxie.types import EnvSpec, Transition

FLAT = EnvSpec(task='Flat', obs_size=3, action_size=2,
               obs_names=(('x', 3),), control_timestep=0.1,
               episode_length=10)
SHAPES = (('pixels', (16, 16, 3), 'uint8'), ('state', (2,), 'float32'))
PIXELS = FLAT._replace(obs_shapes=SHAPES, obs_size=2, obs_names=(('x', 2),))
CFG = networks.PixelConfig(encoder_channels=(4,), encoder_strides=(2,),
                           encoder_feature_size=5)


def _critic():
  return hk.without_apply_rng(hk.transform(
      lambda o, a: networks.QCritic(hidden_sizes=(4,), action_size=2)(o, a)))


def _same(a, b):
  return jax.tree.all(jax.tree.map(np.array_equal, a, b)) and (
      jax.tree.structure(a) == jax.tree.structure(b))


def test_flat_spec_gets_the_identity_and_dict_spec_the_conv():
  flat = networks.observation_encoder(CFG, FLAT)
  assert not flat.trainable and flat.obs_size == 3
  obs = jnp.arange(6.).reshape(2, 3)
  assert flat.init(jax.random.PRNGKey(0), obs) == {}
  np.testing.assert_array_equal(flat.apply({}, obs), obs)
  np.testing.assert_array_equal(flat.augment(None, obs), obs)
  assert flat.dummy_obs(4).shape == (4, 3)

  conv = networks.observation_encoder(CFG, PIXELS)
  assert conv.trainable and conv.obs_size is None
  dummy = conv.dummy_obs(2)
  assert dummy['pixels'].shape == (2, 16, 16, 3)
  assert dummy['pixels'].dtype == jnp.uint8
  params = conv.init(jax.random.PRNGKey(0), dummy)
  # 5 projected pixel features, then the 2 state entries.
  assert conv.apply(params, dummy).shape == (2, 7)


def test_identity_critic_keeps_the_critics_own_parameters():
  critic = _critic()
  net = networks.encoded_critic(critic, networks.identity_encoder(3))
  key = jax.random.PRNGKey(1)
  obs, act = jnp.ones((2, 3)), jnp.ones((2, 2))
  params = net.init(key, obs, act, encoder_key=None)
  assert _same(params, critic.init(key, obs, act))
  np.testing.assert_array_equal(net.apply(params, obs, act),
                                critic.apply(params, obs, act))
  np.testing.assert_array_equal(net.features(params, obs), obs)
  np.testing.assert_array_equal(net.actor_input(params, obs), obs)
  batch = Transition(obs=obs, action=act, reward=jnp.zeros(2),
                     discount=jnp.ones(2), next_obs=obs + 1.)
  assert net.augment(None, batch) is batch
  old = jax.tree.map(jnp.zeros_like, params)
  assert _same(net.polyak(params, old, 0.25, 0.5),
               optax.incremental_update(params, old, 0.25))


def test_conv_critic_init_with_and_without_an_encoder_key():
  critic = _critic()
  encoder = networks.observation_encoder(CFG, PIXELS)
  net = networks.encoded_critic(critic, encoder)
  obs, act = encoder.dummy_obs(2), jnp.ones((2, 2))
  k_q, k_enc = jax.random.PRNGKey(2), jax.random.PRNGKey(3)
  params = net.init(k_q, obs, act, encoder_key=k_enc)
  enc_params = encoder.init(k_enc, obs)
  assert _same(params['encoder'], enc_params)
  assert _same(params['q'], critic.init(
      k_q, encoder.apply(enc_params, obs), act))
  # Without one, the key is split between them, the encoder's first.
  k_enc2, k_q2 = jax.random.split(k_q)
  assert _same(net.init(k_q, obs, act),
               net.init(k_q2, obs, act, encoder_key=k_enc2))
  feats = net.features(params, obs)
  np.testing.assert_array_equal(net.head(params, feats, act),
                                net.apply(params, obs, act))
  new = jax.tree.map(jnp.ones_like, params)
  old = jax.tree.map(jnp.zeros_like, params)
  out = net.polyak(new, old, 0.25, 0.5)
  assert all(np.all(x == 0.5) for x in jax.tree.leaves(out['encoder']))
  assert all(np.all(x == 0.25) for x in jax.tree.leaves(out['q']))


@pytest.mark.parametrize('n, m', [(0, 1), (1, 1), (2, 1), (2, 2)])
def test_split_keys_draws_encoder_keys_only_for_the_conv(n, m):
  key = jax.random.PRNGKey(4)
  flat = networks.encoded_critic(_critic(), networks.identity_encoder(3))
  mine, enc = flat.split_keys(key, n, m)
  assert enc == (None,) * m
  want = (() if n == 0 else (key,) if n == 1
          else tuple(jax.random.split(key, n)))
  assert _same(mine, want)

  conv = networks.encoded_critic(
      _critic(), networks.observation_encoder(CFG, PIXELS))
  mine, enc = conv.split_keys(key, n, m)
  both = ((key,) if n + m == 1 else tuple(jax.random.split(key, n + m)))
  assert _same(mine, both[:n]) and _same(enc, both[n:])
  assert len(enc) == m


def test_policy_input_through_either_encoder():
  obs = jnp.ones((2, 3))
  np.testing.assert_array_equal(
      networks.policy_input(networks.identity_encoder(3), {}, obs), obs)
  encoder = networks.observation_encoder(CFG, PIXELS)
  dummy = encoder.dummy_obs(2)
  params = {'encoder': encoder.init(jax.random.PRNGKey(0), dummy)}
  np.testing.assert_array_equal(
      networks.policy_input(encoder, params, dummy),
      encoder.apply(params['encoder'], dummy))
