"""Tests for roxie.networks' critics and the ensemble helper."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import networks

OBS, ACT, BATCH = 4, 2, 3


def _inputs(batch_shape=(BATCH,)):
  obs = jax.random.normal(jax.random.PRNGKey(1), batch_shape + (OBS,))
  action = jax.random.uniform(jax.random.PRNGKey(2), batch_shape + (ACT,),
                              minval=-1., maxval=1.)
  return obs, action


def _critic(make):
  return hk.without_apply_rng(hk.transform(lambda o, a: make()(o, a)))


def test_q_critic_shapes():
  net = _critic(lambda: networks.QCritic(hidden_sizes=(8, 8), layer_norm=True))
  obs, action = _inputs()
  params = net.init(jax.random.PRNGKey(0), obs, action)
  assert net.apply(params, obs, action).shape == (BATCH,)
  assert net.apply(params, obs[0], action[0]).shape == ()
  obs2, action2 = _inputs((2, BATCH))
  assert net.apply(params, obs2, action2).shape == (2, BATCH)


def test_twin_q_critic_layout_and_independence():
  make_twin = lambda: networks.TwinQCritic(hidden_sizes=(8, 8), num_critics=2,
                                           output_init_scale=1.)
  twin = _critic(make_twin)
  obs, action = _inputs()
  params = twin.init(jax.random.PRNGKey(0), obs, action)
  q = twin.apply(params, obs, action)
  assert q.shape == (2, BATCH)
  assert twin.apply(params, obs[0], action[0]).shape == (2,)
  # Every parameter carries the ensemble axis first, and the members differ.
  for leaf in jax.tree.leaves(params):
    assert leaf.shape[0] == 2
  w0 = params['twin_q_critic/~/ensemble/q_critic/~/torso/linear_0']['w']
  assert not np.allclose(w0[0], w0[1])
  assert not np.allclose(q[0], q[1])

  # Row i of the output is a plain QCritic evaluated with slice i of the params.
  single = _critic(lambda: networks.QCritic(hidden_sizes=(8, 8)))
  prefix = 'twin_q_critic/~/ensemble/'
  for i in range(2):
    member = {k[len(prefix):]: jax.tree.map(lambda x: x[i], v)
              for k, v in params.items()}
    np.testing.assert_allclose(single.apply(member, obs, action), q[i],
                               rtol=1e-5, atol=1e-6)


def test_twin_q_critic_gradients_reach_both_members():
  twin = _critic(lambda: networks.TwinQCritic(hidden_sizes=(8,)))
  obs, action = _inputs()
  params = twin.init(jax.random.PRNGKey(0), obs, action)
  grads = jax.grad(lambda p: twin.apply(p, obs, action)[1].sum())(params)
  head = grads['twin_q_critic/~/ensemble/q_critic/~/head']['w']
  assert np.all(head[0] == 0.) and np.any(head[1] != 0.)


def test_repeated_calls_share_parameters():
  def f(obs, action):
    critic = networks.TwinQCritic(hidden_sizes=(8,), output_init_scale=1.)
    categorical = networks.TwinCategoricalCritic(
        v_min=0., v_max=1., num_atoms=3, hidden_sizes=(8,))
    return (critic(obs, action), critic(obs + 1., action),
            categorical(obs, action).logits, categorical(obs, action).logits)
  net = hk.without_apply_rng(hk.transform(f))
  obs, action = _inputs()
  params = net.init(jax.random.PRNGKey(0), obs, action)
  assert len(params) == 4  # One stacked set per critic, not one per call.
  q, q_next, logits, logits_again = net.apply(params, obs, action)
  np.testing.assert_array_equal(logits, logits_again)
  twin = _critic(lambda: networks.TwinQCritic(hidden_sizes=(8,),
                                              output_init_scale=1.))
  critic_params = {k: v for k, v in params.items()
                   if k.startswith('twin_q_critic/')}
  np.testing.assert_allclose(twin.apply(critic_params, obs + 1., action),
                             q_next, rtol=1e-6)
  assert not np.allclose(q, q_next)


def test_larger_ensemble():
  def f(x):
    members = networks.ensemble(lambda y: hk.Linear(3)(y), size=5)
    return members(x), members(2. * x)
  net = hk.without_apply_rng(hk.transform(f))
  x = jnp.ones((2, 4))
  params = net.init(jax.random.PRNGKey(0), x)
  assert params['ensemble/linear']['w'].shape == (5, 4, 3)
  out, out_doubled = net.apply(params, x)
  assert out.shape == (5, 2, 3)
  bias = params['ensemble/linear']['b'][:, None, :]
  np.testing.assert_allclose(out_doubled - bias, 2. * (out - bias), rtol=1e-5)


def test_categorical_critic():
  net = _critic(lambda: networks.CategoricalCritic(
      v_min=-10., v_max=10., num_atoms=11, hidden_sizes=(8,)))
  obs, action = _inputs()
  params = net.init(jax.random.PRNGKey(0), obs, action)
  out = net.apply(params, obs, action)
  assert isinstance(out, networks.CategoricalQ)
  assert out.logits.shape == (BATCH, 11)
  np.testing.assert_allclose(out.atoms, np.linspace(-10., 10., 11), atol=1e-6)
  # Near-zero output layer: a near-uniform distribution, mean near 0.
  np.testing.assert_allclose(out.probs(), 1. / 11, atol=1e-3)
  np.testing.assert_allclose(
      out.mean(),
      np.sum(np.asarray(jax.nn.softmax(out.logits)) * np.asarray(out.atoms),
             -1),
      rtol=1e-5, atol=1e-6)
  assert net.apply(params, obs[0], action[0]).logits.shape == (11,)


def test_categorical_logits_at_hand_computed():
  atoms = jnp.linspace(-10., 10., 11)  # Spacing 2.
  np.testing.assert_allclose(
      networks.categorical_logits_at(1., atoms),
      -0.5 * ((np.linspace(-10., 10., 11) - 1.) / 2.) ** 2, rtol=1e-6)


@pytest.mark.parametrize('make', [
    lambda v: networks.CategoricalCritic(
        v_min=-40., v_max=960., num_atoms=51, hidden_sizes=(8,),
        init_value=v),
    lambda v: networks.TwinCategoricalCritic(
        v_min=-40., v_max=960., num_atoms=51, hidden_sizes=(8,),
        init_value=v),
])
def test_categorical_critic_init_value(make):
  # Without an init value the mean starts at the support's midpoint (460);
  # with one, every Q starts at it: in the interior within a tenth of a
  # spacing (20), at an end pulled inwards (the bump is cut).
  obs, action = _inputs()
  for value, expected, tol in ((None, 460., 1.), (100., 100., 2.),
                               (0., 0., 2.), (-40., -29.6, 1.)):
    net = _critic(lambda v=value: make(v))
    params = net.init(jax.random.PRNGKey(0), obs, action)
    np.testing.assert_allclose(net.apply(params, obs, action).mean(),
                               expected, atol=tol)


def test_twin_categorical_critic():
  net = _critic(lambda: networks.TwinCategoricalCritic(
      v_min=0., v_max=1., num_atoms=5, hidden_sizes=(8,),
      output_init_scale=1.))
  obs, action = _inputs()
  params = net.init(jax.random.PRNGKey(0), obs, action)
  out = net.apply(params, obs, action)
  assert out.logits.shape == (2, BATCH, 5) and out.atoms.shape == (5,)
  assert out.mean().shape == (2, BATCH)
  assert not np.allclose(out.logits[0], out.logits[1])


def test_value_network_and_head():
  net = hk.without_apply_rng(hk.transform(
      lambda o: networks.ValueNetwork(hidden_sizes=(8,))(o)))
  obs, _ = _inputs()
  params = net.init(jax.random.PRNGKey(0), obs)
  assert net.apply(params, obs).shape == (BATCH,)
  head = hk.without_apply_rng(hk.transform(lambda f: networks.ValueHead()(f)))
  hp = head.init(jax.random.PRNGKey(0), obs)
  assert head.apply(hp, obs).shape == (BATCH,)


@pytest.mark.parametrize('make', [
    lambda: networks.QCritic(action_size=ACT, obs_size=OBS),
    lambda: networks.TwinQCritic(action_size=ACT, obs_size=OBS),
    lambda: networks.CategoricalCritic(v_min=0., v_max=1., action_size=ACT,
                                       obs_size=OBS),
    lambda: networks.TwinCategoricalCritic(v_min=0., v_max=1., action_size=ACT,
                                           obs_size=OBS),
], ids=['q', 'twin_q', 'categorical', 'twin_categorical'])
def test_critic_input_checks(make):
  net = _critic(make)
  obs, action = _inputs()
  key = jax.random.PRNGKey(0)
  with pytest.raises(ValueError, match=f'action of size {ACT}'):
    net.init(key, obs, jnp.zeros((BATCH, ACT + 1)))
  with pytest.raises(ValueError, match=f'obs of size {OBS}'):
    net.init(key, jnp.zeros((BATCH, OBS + 2)), action)
  with pytest.raises(ValueError, match='share their batch axes'):
    net.init(key, obs, action[:2])


def test_mlp_layer_norm_and_activation():
  def f(x):
    return networks.MLP((4, 3), activation=jax.nn.elu, layer_norm=True,
                        activate_final=False)(x)
  net = hk.without_apply_rng(hk.transform(f))
  x = jnp.ones((2, 5))
  params = net.init(jax.random.PRNGKey(0), x)
  assert set(params) == {'mlp/linear_0', 'mlp/layer_norm_0', 'mlp/linear_1'}
  out = net.apply(params, x)
  assert out.shape == (2, 3)
  # The final layer is linear: some outputs are below elu's floor of -1.
  w = params['mlp/linear_1']['w']
  params['mlp/linear_1'] = dict(params['mlp/linear_1'], w=10. * w)
  assert np.min(net.apply(params, x)) < -1.


def _residual_params(width=6, blocks=2):
  net = hk.without_apply_rng(hk.transform(
      lambda x: networks.ResidualMLP(width, blocks)(x)))
  x = jax.random.normal(jax.random.PRNGKey(3), (BATCH, 5))
  return net, net.init(jax.random.PRNGKey(0), x), x


def test_residual_mlp_matches_its_formula_in_numpy():
  """BroNet: x = relu(LN(W x)), then x += LN(W1 relu(LN(W0 x))) per block."""
  net, params, x = _residual_params()
  # Random LayerNorm scales and offsets, so that they are checked too.
  params = jax.tree.map(
      lambda p: p + 0.3 * jax.random.normal(jax.random.PRNGKey(p.size),
                                            p.shape), params)

  def dense_norm(h, prefix):
    lin, ln = params[f'{prefix}_linear'], params[f'{prefix}_layer_norm']
    h = h @ np.asarray(lin['w']) + np.asarray(lin['b'])
    mean = h.mean(-1, keepdims=True)
    var = h.var(-1, keepdims=True)
    return ((h - mean) / np.sqrt(var + 1e-5) * np.asarray(ln['scale'])
            + np.asarray(ln['offset']))

  relu = lambda h: np.maximum(h, 0.)
  h = relu(dense_norm(np.asarray(x, np.float64), 'residual_mlp/embed'))
  for i in range(2):
    y = relu(dense_norm(h, f'residual_mlp/block_{i}_0'))
    h = h + dense_norm(y, f'residual_mlp/block_{i}_1')
  np.testing.assert_allclose(net.apply(params, x), h, rtol=1e-4, atol=1e-4)
  assert len(params) == 2 + 2 * 2 * 2  # embed + 2 blocks of 2 (linear, LN).


def test_residual_mlp_block_is_a_skip_when_its_output_norm_is_zero():
  # With the block's last LayerNorm scaled and shifted to 0, each block adds
  # nothing: the output is the embedding alone, whatever the block weights.
  net, params, x = _residual_params(blocks=2)
  zero = dict(params)
  for i in range(2):
    name = f'residual_mlp/block_{i}_1_layer_norm'
    zero[name] = jax.tree.map(jnp.zeros_like, params[name])
  embed_only = hk.without_apply_rng(hk.transform(
      lambda x: networks.ResidualMLP(6, 0)(x)))
  np.testing.assert_allclose(
      net.apply(zero, x),
      embed_only.apply({k: v for k, v in params.items() if 'embed' in k}, x),
      rtol=1e-6)
  assert not np.allclose(net.apply(params, x), net.apply(zero, x))


@pytest.mark.parametrize('make', [
    lambda: networks.QCritic(hidden_sizes=(8,), layer_norm=True,
                             residual_blocks=2),
    lambda: networks.TwinQCritic(hidden_sizes=(8,), layer_norm=True,
                                 residual_blocks=2),
    lambda: networks.CategoricalCritic(v_min=0., v_max=1., hidden_sizes=(8,),
                                       layer_norm=True, residual_blocks=2),
    lambda: networks.TwinCategoricalCritic(v_min=0., v_max=1.,
                                           hidden_sizes=(8,), layer_norm=True,
                                           residual_blocks=2),
], ids=['q', 'twin_q', 'categorical', 'twin_categorical'])
def test_critics_with_a_residual_torso(make):
  net = _critic(make)
  obs, action = _inputs()
  params = net.init(jax.random.PRNGKey(0), obs, action)
  torso = {k for k in params if '/torso/' in k}
  assert len(torso) == 10, sorted(params)  # embed + 2 blocks, LN-ed.
  assert all(v['w'].shape[-1] == 8 for k, v in params.items()
             if k.endswith('linear'))
  # Gradients reach the embedding through the skips.
  def loss(p):
    out = net.apply(p, obs, action)
    return jnp.sum(out.logits if hasattr(out, 'logits') else out)
  grads = jax.grad(loss)(params)
  embed = [k for k in grads if k.endswith('embed_linear')]
  assert embed and np.any(np.abs(grads[embed[0]]["w"]) > 0.)


def test_residual_torso_bad_arguments():
  obs, action = _inputs()
  key = jax.random.PRNGKey(0)
  for kwargs, match in [
      (dict(hidden_sizes=(8, 8), layer_norm=True), 'one width'),
      (dict(hidden_sizes=(8,), layer_norm=False), 'layer_norm=True'),
      (dict(hidden_sizes=(8,), layer_norm=False, batch_renorm={}),
       'residual_blocks or batch_renorm')]:
    net = hk.transform_with_state(lambda o, a, kw=kwargs: networks.QCritic(
        residual_blocks=1, **kw)(o, a, is_training=True))
    with pytest.raises(ValueError, match=match):
      net.init(key, obs, action)
  with pytest.raises(ValueError, match='num_blocks >= 0'):
    hk.transform(lambda x: networks.ResidualMLP(4, -1)(x)).init(key, obs)
