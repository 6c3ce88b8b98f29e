"""PPO recipe: acting, advantages, minibatching, normalisation.

The tests run the recipe's pure functions on synthetic data with tiny
networks; learning is in test_learning.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import buffers
from roxie.agents import ppo
from roxie.types import EnvSpec, Rollout

SPEC = EnvSpec(task='Synthetic', obs_size=3, action_size=2,
               obs_names=(('x', 3),), control_timestep=0.01,
               episode_length=5)
SMALL = dict(hidden_sizes=(16, 16), num_epochs=2, num_minibatches=4)


def _recipe(**kw):
  return ppo.make(ppo.Config(**{**SMALL, **kw}), SPEC)


def _rollout(recipe, state, key, *, t=8, b=4, reward=None):
  """A [t, b] rollout acted by `recipe`, with episode ends at fixed places."""
  k_obs, k_final, k_act = jax.random.split(key, 3)
  obs = 2. * jax.random.normal(k_obs, (t, b, SPEC.obs_size)) + 1.
  terminated = np.zeros((t, b), bool)
  truncated = np.zeros((t, b), bool)
  terminated[2, 0] = True
  truncated[4, 1] = True
  truncated[t - 1, 2] = True
  ended = terminated | truncated
  # The true next observation: obs[t + 1] unless the episode ended there.
  final_obs = jnp.concatenate([obs[1:], obs[-1:] + 0.5], 0)
  other = 3. * jax.random.normal(k_final, obs.shape)
  final_obs = jnp.where(jnp.asarray(ended)[..., None], other, final_obs)
  actions, extras = jax.vmap(
      lambda o, k: recipe.act(state, o, k, explore=True))(
          obs, jax.random.split(k_act, t))
  if reward is None:
    reward = jnp.linspace(0., 1., t * b).reshape(t, b)
  return Rollout(obs=obs, action=actions, reward=reward,
                 terminated=jnp.asarray(terminated),
                 truncated=jnp.asarray(truncated), final_obs=final_obs,
                 extras=extras, last_obs=obs[-1] + 0.5)


def test_act_shapes_bounds_and_modes():
  # A wide initial std (e^0.4) sends many samples outside [-1, 1].
  recipe = _recipe(init_log_std=2., log_std_range=(-3., 0.4))
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  obs = jax.random.normal(jax.random.PRNGKey(1), (64, SPEC.obs_size))
  a1, ex1 = recipe.act(state, obs, jax.random.PRNGKey(2), explore=True)
  a2, _ = recipe.act(state, obs, jax.random.PRNGKey(3), explore=True)
  mean, ex_mean = recipe.act(state, obs, jax.random.PRNGKey(2), explore=False)
  mean_again, _ = recipe.act(state, obs, jax.random.PRNGKey(9), explore=False)
  assert a1.shape == (64, SPEC.action_size)
  assert set(ex1) == {'log_prob', 'value', 'raw_action'}
  assert ex1['log_prob'].shape == ex1['value'].shape == (64,)
  assert float(jnp.max(jnp.abs(a1))) <= 1.
  raw = np.asarray(ex1['raw_action'])
  assert np.mean(np.abs(raw) > 1.) > 0.2  # Clipping really happened...
  np.testing.assert_array_equal(a1, np.clip(raw, -1., 1.))
  assert not np.allclose(a1, a2)  # ...samples depend on the key...
  np.testing.assert_array_equal(mean, mean_again)  # ...the mode does not.
  assert float(jnp.max(jnp.abs(mean))) < 0.5  # Small initial mean.
  # The log-likelihood is of the pre-clip sample, with the clamped std.
  std = np.exp(0.4)
  want = np.sum(-0.5 * ((raw - np.asarray(mean)) / std) ** 2 - np.log(std)
                - 0.5 * np.log(2 * np.pi), -1)
  np.testing.assert_allclose(ex1['log_prob'], want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ex_mean['value'], ex1['value'])


def test_advantages_bootstrap_from_final_obs():
  """Compares `rollout_advantages` with a NumPy GAE over a known V."""
  recipe = _recipe()
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  rollout = _rollout(recipe, state, jax.random.PRNGKey(1))
  value_fn = lambda o: o @ jnp.array([0.5, -1., 2.])
  rollout = rollout._replace(extras={**rollout.extras,
                                     'value': value_fn(rollout.obs)})
  gamma, lam = 0.9, 0.8
  out = ppo.rollout_advantages(rollout, value_fn, discount=gamma,
                               lambda_=lam)

  v = np.asarray(value_fn(rollout.obs), np.float64)
  v_final = np.asarray(value_fn(rollout.final_obs), np.float64)
  r = np.asarray(rollout.reward, np.float64)
  term = np.asarray(rollout.terminated)
  ended = term | np.asarray(rollout.truncated)
  t_len, b = r.shape
  want = np.zeros((t_len, b))
  for j in range(b):
    adv = 0.
    for t in reversed(range(t_len)):
      d = 0. if term[t, j] else gamma
      adv = r[t, j] + d * v_final[t, j] - v[t, j] + (
          0. if ended[t, j] else d * lam * adv)
      want[t, j] = adv
  np.testing.assert_allclose(out.advantages, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out.returns, want + v, rtol=1e-5, atol=1e-5)
  # Where the episode was truncated the bootstrap is V(final_obs), which
  # differs from the V(obs[t + 1]) of the next episode's first step.
  assert abs(v_final[4, 1] - v[5, 1]) > 1e-3
  np.testing.assert_allclose(out.advantages[4, 1],
                             r[4, 1] + gamma * v_final[4, 1] - v[4, 1],
                             rtol=1e-5)
  np.testing.assert_allclose(out.advantages[2, 0], r[2, 0] - v[2, 0],
                             rtol=1e-5)


def test_minibatches_cover_every_sample_once():
  data = {'i': jnp.arange(24), 'x': jnp.arange(48.).reshape(24, 2)}
  mb = ppo.minibatches(jax.random.PRNGKey(0), data, 4)
  assert mb['i'].shape == (4, 6) and mb['x'].shape == (4, 6, 2)
  np.testing.assert_array_equal(np.sort(np.ravel(mb['i'])), np.arange(24))
  np.testing.assert_array_equal(mb['x'][..., 0], 2 * mb['i'])  # Same order.
  other = ppo.minibatches(jax.random.PRNGKey(1), data, 4)
  assert not np.array_equal(mb['i'], other['i'])  # Reshuffled per key.
  with pytest.raises(ValueError, match='must divide'):
    ppo.minibatches(jax.random.PRNGKey(0), data, 5)


def test_update_under_jit_is_finite_and_learns():
  recipe = _recipe()
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  rollout = _rollout(recipe, state, jax.random.PRNGKey(1))
  new, metrics = jax.jit(recipe.update)(state, rollout, jax.random.PRNGKey(2))
  assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
  assert int(new.steps) == 1
  for old_p, new_p in ((state.actor, new.actor), (state.critic, new.critic)):
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), old_p,
                         new_p)
    assert all(m > 0 for m in jax.tree.leaves(moved)), moved
  # Iterating on the same states and rewards (re-acted each time, as the
  # loop would) fits the value function to its (short-horizon) targets.
  recipe = _recipe(discount=0.5)
  update = jax.jit(recipe.update)
  s, losses = state, []
  for i in range(30):
    s, m = update(s, _rollout(recipe, s, jax.random.PRNGKey(1)),
                  jax.random.PRNGKey(i))
    losses.append(float(m['value_loss']))
  assert losses[-1] < 0.2 * losses[0], losses


# Statistics updated before the epochs would shift the critic's inputs away
# from those its exact values were computed on; keep them fixed.
QUIET = dict(normalize_advantages=False, entropy_coef=0.,
             normalize_observations=False)


def _zero_advantage_rollout(recipe, state, key):
  """A rollout whose rewards make every TD error zero under the critic."""
  rollout = _rollout(recipe, state, key)
  value_fn = lambda o: recipe.act(state, o, jax.random.PRNGKey(0))[1]['value']
  v_final = jax.vmap(value_fn)(rollout.final_obs)
  gamma = recipe.config.discount * (
      1. - rollout.terminated.astype(jnp.float32))
  rollout = rollout._replace(reward=rollout.extras['value'] - gamma * v_final)
  gae = ppo.rollout_advantages(rollout, value_fn,
                               discount=recipe.config.discount, lambda_=0.95)
  assert float(jnp.max(jnp.abs(gae.advantages))) < 1e-5
  return rollout


def test_zero_advantages_and_exact_values_leave_policy_unchanged():
  recipe = _recipe(target_kl=None, **QUIET)  # A fixed step size.
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  rollout = _zero_advantage_rollout(recipe, state, jax.random.PRNGKey(1))
  new, metrics = jax.jit(recipe.update)(state, rollout, jax.random.PRNGKey(2))
  # The value loss starts at rounding level; Adam turns rounding-level
  # gradients into small steps, so it stays tiny rather than exactly 0
  # (a real rollout here has a value loss of ~2).
  assert float(metrics['value_loss']) < 1e-3
  assert float(metrics['approx_kl']) < 1e-6
  assert abs(float(metrics['policy_loss'])) < 1e-6
  moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
      jax.tree.leaves(state.actor), jax.tree.leaves(new.actor)))
  assert moved < 1e-4  # An ordinary update moves them by ~1e-2.
  obs = rollout.obs[0]
  before, _ = recipe.act(state, obs, jax.random.PRNGKey(0), explore=False)
  after, _ = recipe.act(new, obs, jax.random.PRNGKey(0), explore=False)
  np.testing.assert_allclose(after, before, atol=1e-4)


def test_adaptive_learning_rate_follows_the_kl():
  """With target_kl, the step size grows while the policy barely moves and
  shrinks once it moves too far (per minibatch, within [1e-5, 1e-2])."""
  # Zero advantages: KL stays ~0, so the rate grows x1.5 in each of the
  # 2 x 4 minibatches, up to the ceiling.
  recipe = _recipe(target_kl=0.01, learning_rate=1e-3, **QUIET)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  rollout = _zero_advantage_rollout(recipe, state, jax.random.PRNGKey(1))
  new, _ = jax.jit(recipe.update)(state, rollout, jax.random.PRNGKey(2))
  assert float(new.learning_rate) == pytest.approx(1e-2)
  # A KL target no update can meet: every minibatch divides the rate by 1.5
  # (even the first, as the observation statistics have moved).
  recipe = _recipe(target_kl=1e-7, learning_rate=1e-2)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  rollout = _rollout(recipe, state, jax.random.PRNGKey(1))
  new, _ = jax.jit(recipe.update)(state, rollout, jax.random.PRNGKey(2))
  assert float(new.learning_rate) == pytest.approx(1e-2 / 1.5 ** 8, rel=1e-4)


def test_observation_statistics_match_numpy_and_drive_act():
  recipe = _recipe()
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  seen = []
  update = jax.jit(recipe.update)
  for i in range(3):
    rollout = _rollout(recipe, state, jax.random.PRNGKey(10 + i))
    seen.append(np.asarray(rollout.obs).reshape(-1, SPEC.obs_size))
    state, _ = update(state, rollout, jax.random.PRNGKey(i))
  seen = np.concatenate(seen).astype(np.float64)
  stats = state.obs_stats
  assert int(buffers.normalizer_count(stats)) == seen.shape[0]
  np.testing.assert_allclose(stats.mean + stats.mean_lo, seen.mean(0),
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(stats.var + stats.var_lo, seen.var(0),
                             rtol=1e-5)
  # act standardises with these statistics: acting on x with them equals
  # acting on the standardised x with identity statistics.
  x = jnp.asarray(seen[:5], jnp.float32)
  identity = state._replace(obs_stats=buffers.normalizer_init(SPEC.obs_size))
  a, ex = recipe.act(state, x, jax.random.PRNGKey(0), explore=False)
  a_id, ex_id = recipe.act(identity, buffers.normalize(stats, x, clip=10.),
                           jax.random.PRNGKey(0), explore=False)
  np.testing.assert_allclose(a, a_id, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ex['value'], ex_id['value'], rtol=1e-5,
                             atol=1e-6)


def test_wrong_spec_and_bad_minibatching_raise():
  recipe = _recipe()
  with pytest.raises(ValueError, match='built for'):
    recipe.init(jax.random.PRNGKey(0), SPEC._replace(obs_size=4))
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  rollout = _rollout(recipe, state, jax.random.PRNGKey(1), t=5, b=3)
  with pytest.raises(ValueError, match='must divide'):
    jax.jit(recipe.update)(state, rollout, jax.random.PRNGKey(2))
