"""BatchRenorm against NumPy by hand, and batch-renormed critic ensembles."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import networks

EPS = 1e-3


def _layer(**kwargs):
  return hk.without_apply_rng(hk.transform_with_state(
      lambda x, is_training: networks.BatchRenorm(eps=EPS, **kwargs)(
          x, is_training)))


def _set_stats(state, mean, var, steps):
  (name,) = state
  return {name: {'mean': jnp.asarray(mean, jnp.float32),
                 'var': jnp.asarray(var, jnp.float32),
                 'steps': jnp.asarray(steps, jnp.int32)}}


X = np.array([[1., -2.], [3., 0.], [-1., 4.], [5., 2.]], np.float32)


def test_initial_state_and_init_does_not_move_it():
  layer = _layer()
  params, state = layer.init(jax.random.PRNGKey(0), X, True)
  (stats,) = state.values()
  np.testing.assert_array_equal(stats['mean'], [0., 0.])
  np.testing.assert_array_equal(stats['var'], [1., 1.])
  assert int(stats['steps']) == 0
  (p,) = params.values()
  np.testing.assert_array_equal(p['scale'], [1., 1.])
  np.testing.assert_array_equal(p['offset'], [0., 0.])


def test_batch_norm_training_and_running_statistics_by_hand():
  layer = _layer(momentum=0.9, r_max=1., d_max=0.)
  params, state = layer.init(jax.random.PRNGKey(0), X, True)
  y, new = jax.jit(layer.apply, static_argnums=3)(params, state, X, True)
  mu, var = X.mean(0), X.var(0)  # Biased variance: [2, 2], [5, 5].
  np.testing.assert_allclose(y, (X - mu) / np.sqrt(var + EPS), rtol=1e-5)
  (stats,) = new.values()
  np.testing.assert_allclose(stats['mean'], 0.9 * 0. + 0.1 * mu, rtol=1e-6)
  np.testing.assert_allclose(stats['var'], 0.9 * 1. + 0.1 * var, rtol=1e-6)
  assert int(stats['steps']) == 1
  # A second step moves them again, from where the first left them.
  _, new2 = layer.apply(params, new, 2. * X, True)
  np.testing.assert_allclose(new2[next(iter(new2))]['mean'],
                             0.9 * 0.1 * mu + 0.1 * 2. * mu, rtol=1e-6)


def test_evaluation_uses_running_statistics_and_keeps_them():
  layer = _layer()
  params, state = layer.init(jax.random.PRNGKey(0), X, True)
  state = _set_stats(state, [1., -1.], [4., 0.25], 7)
  params = jax.tree.map(lambda p: p + jnp.array([2., 3.]), params)
  y, same = layer.apply(params, state, X, False)
  # scale [3, 4], offset [2, 3].
  expected = (X - [1., -1.]) / np.sqrt(np.array([4., 0.25]) + EPS) * [3., 4.]
  np.testing.assert_allclose(y, expected + [2., 3.], rtol=1e-5)
  jax.tree.map(np.testing.assert_array_equal, same, state)


@pytest.mark.parametrize('steps, renorm', [(0, False), (5, True)],
                         ids=['warm-up', 'renorm'])
def test_renorm_corrections_by_hand(steps, renorm):
  # Running mean 0 and var 1, batch mean [2, 1] and var [5, 5]:
  # sigma_B / sigma = sqrt(5.001 / 1.001) > r_max = 2 clips r to 2, and
  # (mu_B - mu) / sigma = [2, 1] / sqrt(1.001) > d_max = 0.5 clips d to 0.5.
  # During the warm-up (5 steps) r = 1, d = 0.
  layer = _layer(momentum=0.5, r_max=2., d_max=0.5, warmup_steps=5)
  params, state = layer.init(jax.random.PRNGKey(0), X, True)
  state = _set_stats(state, [0., 0.], [1., 1.], steps)
  y, new = layer.apply(params, state, X, True)
  mu, var = X.mean(0), X.var(0)
  r, d = (2., 0.5) if renorm else (1., 0.)
  np.testing.assert_allclose(y, (X - mu) / np.sqrt(var + EPS) * r + d,
                             rtol=1e-5)
  # The statistics move the same way in both phases.
  (stats,) = new.values()
  np.testing.assert_allclose(stats['mean'], 0.5 * mu, rtol=1e-6)
  np.testing.assert_allclose(stats['var'], 0.5 + 0.5 * var, rtol=1e-6)
  assert int(stats['steps']) == steps + 1


def test_renorm_within_bounds_is_the_running_statistics_normalisation():
  # With r and d unclipped, (x - mu_B) / sigma_B * r + d = (x - mu) / sigma:
  # training output equals evaluation output, and r, d carry no gradient,
  # so the gradient is batch norm's scaled by r.
  layer = _layer(r_max=10., d_max=10.)
  params, state = layer.init(jax.random.PRNGKey(0), X, True)
  state = _set_stats(state, [1.5, 0.5], [3., 6.], 1)
  train, _ = layer.apply(params, state, X, True)
  evaluate, _ = layer.apply(params, state, X, False)
  np.testing.assert_allclose(train, evaluate, rtol=1e-5, atol=1e-6)
  grad = jax.grad(lambda x: jnp.sum(layer.apply(params, state, x, True)[0]
                                    * X))(X)
  mu, sigma_b = X.mean(0), np.sqrt(X.var(0) + EPS)
  r = sigma_b / np.sqrt(np.array([3., 6.]) + EPS)
  x_hat = (X - mu) / sigma_b
  # Batch norm's backward pass for upstream gradient g = X, times r.
  g = X
  bn = (g - g.mean(0) - x_hat * (g * x_hat).mean(0)) / sigma_b
  np.testing.assert_allclose(grad, r * bn, rtol=1e-4, atol=1e-5)


def test_torso_order_and_state_names():
  torso = hk.without_apply_rng(hk.transform_with_state(
      lambda x, t: networks.BatchRenormMLP((3, 5), r_max=1., d_max=0.)(x, t)))
  params, state = torso.init(jax.random.PRNGKey(0), X, True)
  assert sorted(state) == [
      'batch_renorm_mlp/batch_renorm_0', 'batch_renorm_mlp/batch_renorm_1',
      'batch_renorm_mlp/batch_renorm_input']
  assert state['batch_renorm_mlp/batch_renorm_input']['mean'].shape == (2,)
  assert state['batch_renorm_mlp/batch_renorm_1']['mean'].shape == (5,)
  out, new = torso.apply(params, state, X, True)
  assert out.shape == (4, 5)
  # The last layer's output is batch-normalised (r_max 1 and d_max 0: batch
  # norm; scale 1, offset 0): zero mean over the batch, in training.
  np.testing.assert_allclose(np.mean(out, 0), 0., atol=1e-5)
  np.testing.assert_allclose(
      new['batch_renorm_mlp/batch_renorm_input']['mean'], 0.01 * X.mean(0),
      rtol=1e-5)


def test_ensemble_members_keep_their_own_statistics():
  critic = hk.without_apply_rng(hk.transform_with_state(
      lambda o, a, t: networks.TwinQCritic(
          num_critics=3, hidden_sizes=(4,), batch_renorm={})(o, a, t)))
  obs, action = X[:, :1], X[:, 1:]
  params, state = critic.init(jax.random.PRNGKey(0), obs, action, True)
  assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(state))
  q, new = critic.apply(params, state, obs, action, True)
  assert q.shape == (3, 4)
  hidden = [k for k in new if k.endswith('batch_renorm_0')][0]
  inputs = [k for k in new if k.endswith('batch_renorm_input')][0]
  # The input statistics are the same for every member (same inputs)...
  np.testing.assert_allclose(new[inputs]['mean'],
                             np.tile(0.01 * X.mean(0), (3, 1)), rtol=1e-5)
  # ...the hidden ones differ (each member has its own weights).
  means = np.asarray(new[hidden]['mean'])
  assert not np.allclose(means[0], means[1])
  # Evaluation mode leaves the state as it was.
  _, same = critic.apply(params, new, obs, action, False)
  jax.tree.map(np.testing.assert_array_equal, same, new)
  # Calling the ensemble twice in one apply shares its parameters.
  twice = hk.without_apply_rng(hk.transform_with_state(
      lambda o, a: (lambda c: (c(o, a, True), c(o, a, False)))(
          networks.TwinQCritic(num_critics=3, hidden_sizes=(4,),
                               batch_renorm={}))))
  p2, s2 = twice.init(jax.random.PRNGKey(0), obs, action)
  assert jax.tree.structure(p2) == jax.tree.structure(params)
  assert jax.tree.structure(s2) == jax.tree.structure(state)


def test_batch_renormed_critic_needs_the_flag():
  critic = hk.without_apply_rng(hk.transform_with_state(
      lambda o, a: networks.TwinQCritic(hidden_sizes=(4,),
                                        batch_renorm={})(o, a)))
  with pytest.raises(ValueError, match='needs is_training=True'):
    critic.init(jax.random.PRNGKey(0), X[:, :1], X[:, 1:])
  with pytest.raises(ValueError, match='layer_norm or batch_renorm'):
    hk.transform_with_state(lambda o, a: networks.QCritic(
        layer_norm=True, batch_renorm={})(o, a, True)).init(
            jax.random.PRNGKey(0), X[:, :1], X[:, 1:])
