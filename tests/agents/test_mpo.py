"""MPO recipe: acting, the update, the duals, targets.

The tests run the recipe's pure functions on synthetic batches with tiny
networks; learning is in test_learning.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie.agents import mpo
from roxie.types import EnvSpec, Transition

SPEC = EnvSpec(task='Synthetic', obs_size=3, action_size=2,
               obs_names=(('x', 3),), control_timestep=0.01,
               episode_length=5)
SMALL = dict(hidden_sizes=(16, 16), num_samples=8)


def _recipe(**kw):
  return mpo.make(mpo.Config(**{**SMALL, **kw}), SPEC)


def _batch(key, n=32, reward_fn=None, discount=0.9):
  k_obs, k_act, k_next = jax.random.split(key, 3)
  obs = jax.random.normal(k_obs, (n, SPEC.obs_size))
  action = jax.random.uniform(k_act, (n, SPEC.action_size), minval=-1.,
                              maxval=1.)
  reward = (reward_fn(action) if reward_fn is not None
            else jnp.sum(obs, -1) * 0.1)
  return Transition(obs=obs, action=action, reward=reward,
                    discount=jnp.full((n,), discount),
                    next_obs=jax.random.normal(k_next, obs.shape))


def _max_diff(a, b):
  return max(float(jnp.max(jnp.abs(x - y)))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_act_shapes_bounds_and_modes():
  # Std between e^0 and e^3 (initially e^1.5): most samples leave [-1, 1].
  recipe = _recipe(log_std_bounds=(0., 3.))
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  obs = jax.random.normal(jax.random.PRNGKey(1), (64, SPEC.obs_size))
  a1, extras = recipe.act(state, obs, jax.random.PRNGKey(2), explore=True)
  a2, _ = recipe.act(state, obs, jax.random.PRNGKey(3), explore=True)
  mode, _ = recipe.act(state, obs, jax.random.PRNGKey(2), explore=False)
  mode_again, _ = recipe.act(state, obs, jax.random.PRNGKey(7), explore=False)
  assert a1.shape == (64, SPEC.action_size) and extras == {}
  assert float(jnp.max(jnp.abs(a1))) <= 1.
  assert float(jnp.mean(jnp.abs(a1) == 1.)) > 0.3  # Clipped, not squashed.
  assert not np.allclose(a1, a2)
  np.testing.assert_array_equal(mode, mode_again)
  assert float(jnp.max(jnp.abs(mode))) < 0.5  # Small initial mean.


def test_update_under_jit_is_finite_and_moves_everything():
  recipe = _recipe()
  tau = recipe.config.tau
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  new, metrics = jax.jit(recipe.update)(state, _batch(jax.random.PRNGKey(1)),
                                        jax.random.PRNGKey(2))
  assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
  assert int(new.steps) == 1
  for old_p, new_p in ((state.policy, new.policy), (state.critic, new.critic),
                       (state.duals, new.duals)):
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), old_p,
                         new_p)
    assert all(m > 0 for m in jax.tree.leaves(moved)), moved
  # Polyak targets: target' = tau * online' + (1 - tau) * target.
  for online, target, old_target in (
      (new.policy, new.target_policy, state.target_policy),
      (new.critic, new.target_critic, state.target_critic)):
    want = jax.tree.map(lambda o, t: tau * o + (1. - tau) * t, online,
                        old_target)
    assert _max_diff(target, want) < 1e-6
    assert _max_diff(target, old_target) > 0.


def test_hard_target_copies_every_period():
  recipe = _recipe(target_update_period=2)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  update = jax.jit(recipe.update)
  one, _ = update(state, _batch(jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
  assert _max_diff(one.target_critic, state.critic) == 0.
  assert _max_diff(one.target_policy, state.policy) == 0.
  assert _max_diff(one.critic, state.critic) > 0.
  two, _ = update(one, _batch(jax.random.PRNGKey(3)), jax.random.PRNGKey(4))
  assert _max_diff(two.target_critic, two.critic) == 0.
  assert _max_diff(two.target_policy, two.policy) == 0.


@pytest.mark.parametrize('init_temperature, rises', [(1e-6, True),
                                                     (1e3, False)])
def test_temperature_follows_the_e_step_kl(init_temperature, rises):
  """The temperature rises exactly when KL(weights || samples) > epsilon.

  A tiny temperature makes the softmax weights nearly one-hot (KL near
  log N > epsilon); a huge one makes them uniform (KL near 0).
  """
  recipe = _recipe()
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  inverse = mpo._DUAL_TRANSFORMS[recipe.config.dual_transform][1]  # pylint: disable=protected-access
  state = state._replace(duals=state.duals._replace(
      log_temperature=jnp.float32(inverse(init_temperature))))
  new, metrics = jax.jit(recipe.update)(state, _batch(jax.random.PRNGKey(1)),
                                        jax.random.PRNGKey(2))
  kl, eps = float(metrics['kl_e_step']), recipe.config.epsilon
  assert (kl > eps) == rises, kl
  grew = float(new.duals.log_temperature) > float(state.duals.log_temperature)
  assert grew == rises


def test_alphas_follow_the_m_step_kls():
  """Each multiplier rises where its KL exceeds its bound, falls otherwise."""
  recipe = _recipe()
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  update = jax.jit(recipe.update)
  batch = _batch(jax.random.PRNGKey(1))
  # Online == target: both KLs are 0, below their bounds.
  new, metrics = update(state, batch, jax.random.PRNGKey(2))
  assert float(metrics['kl_mean']) == 0. and float(metrics['kl_std']) == 0.
  assert np.all(new.duals.log_alpha_mean < state.duals.log_alpha_mean)
  assert np.all(new.duals.log_alpha_std < state.duals.log_alpha_std)
  # An online policy far from the target (shifted mean and std outputs).
  head = 'gaussian_actor/~/head'
  policy = {**state.policy,
            head: {**state.policy[head], 'b': state.policy[head]['b'] + 0.5}}
  far = state._replace(policy=policy)
  new, metrics = update(far, batch, jax.random.PRNGKey(2))
  a = SPEC.action_size
  assert float(metrics['kl_mean']) > a * recipe.config.epsilon_mean
  assert float(metrics['kl_std']) > a * recipe.config.epsilon_std
  assert np.all(new.duals.log_alpha_mean > far.duals.log_alpha_mean)
  assert np.all(new.duals.log_alpha_std > far.duals.log_alpha_std)


def test_multipliers_stop_at_their_ceiling_and_the_update_stays_finite():
  """A bound the policy cannot meet: the multipliers rise to a ceiling, no NaN.

  Reproduces MPO's divergence on HumanoidStand (benchmarks/RESULTS.md): the
  std's KL stayed above its bound, its multiplier grew without limit (4e10
  at 10k env steps, 1.2e21 at 18k) and the float32 update overflowed. Here
  the bounds are ~0, the target never moves (tau 0), and dual_lr 1 lets
  Adam raise each log multiplier by ~1 per update: 80 updates would reach
  e^80 without the ceiling.
  """
  recipe = _recipe(epsilon_mean=1e-30, epsilon_std=1e-30, dual_lr=1.,
                   tau=0., action_penalty_epsilon=0., dual_transform='exp')
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  head = 'gaussian_actor/~/head'
  policy = {**state.policy,
            head: {**state.policy[head], 'b': state.policy[head]['b'] + 0.5}}
  state = state._replace(policy=policy)
  batch = _batch(jax.random.PRNGKey(1))

  def body(s, key):
    s, metrics = recipe.update(s, batch, key)
    return s, (metrics['alpha_std'], metrics['policy_loss'])

  final, (alpha_std, policy_loss) = jax.jit(lambda s: jax.lax.scan(
      body, s, jax.random.split(jax.random.PRNGKey(2), 80)))(state)
  ceiling = mpo._MAX_LOG_DUAL  # pylint: disable=protected-access
  np.testing.assert_allclose(ceiling, np.log(1e6), rtol=1e-6)
  # Without the ceiling: log multipliers ~45 (alpha ~2e19, where Adam's
  # float32 moments overflow and the duals freeze) and a policy loss ~-4e11.
  for log_alpha in (final.duals.log_alpha_mean, final.duals.log_alpha_std):
    np.testing.assert_allclose(log_alpha, ceiling, rtol=1e-6)
  assert float(np.max(alpha_std)) <= 1e6 * (1 + 1e-5)
  assert np.all(np.abs(np.asarray(policy_loss)) < 1e8)
  assert all(np.all(np.isfinite(np.asarray(x)))
             for x in jax.tree.leaves((final.policy, final.critic)))


def test_softplus_duals_start_at_their_values_and_grow_by_steps():
  """`dual_transform='softplus'`: Adam's steps add to a multiplier.

  The same unmeetable bounds as above with dual_lr 1: under 'exp' 20
  updates multiply alpha_std by ~e^20 (to the 1e6 ceiling); under softplus
  each adds ~1, so it ends between 10 + 5 and 10 + 40. A value set above
  the ceiling is brought down to it.
  """
  kw = dict(epsilon_mean=1e-30, epsilon_std=1e-30, dual_lr=1., tau=0.,
            action_penalty_epsilon=0., init_temperature=2.,
            init_alpha_mean=3.)
  batch = _batch(jax.random.PRNGKey(1))
  keys = jax.random.split(jax.random.PRNGKey(2), 20)
  head = 'gaussian_actor/~/head'

  def run(**extra):
    recipe = _recipe(**kw, **extra)
    state = recipe.init(jax.random.PRNGKey(0), SPEC)
    policy = {**state.policy, head: {**state.policy[head],
                                     'b': state.policy[head]['b'] + 0.5}}
    state = state._replace(policy=policy)
    body = lambda s, k: (recipe.update(s, batch, k)[0], None)
    return state, jax.jit(lambda s: jax.lax.scan(body, s, keys)[0])(state)

  start, final = run(dual_transform='softplus')
  softplus = lambda x: np.asarray(jax.nn.softplus(x))
  np.testing.assert_allclose(softplus(start.duals.log_temperature), 2.,
                             rtol=1e-5)
  np.testing.assert_allclose(softplus(start.duals.log_alpha_mean), 3.,
                             rtol=1e-5)
  np.testing.assert_allclose(softplus(start.duals.log_alpha_std), 10.,
                             rtol=1e-5)
  alpha_std = softplus(final.duals.log_alpha_std)
  assert np.all((alpha_std > 15.) & (alpha_std < 50.)), alpha_std
  _, final_exp = run(dual_transform='exp')
  np.testing.assert_allclose(np.exp(final_exp.duals.log_alpha_std), 1e6,
                             rtol=1e-4)
  _, capped = run(dual_transform='softplus', init_alpha_std=1e7)
  np.testing.assert_allclose(softplus(capped.duals.log_alpha_std), 1e6,
                             rtol=1e-6)
  with pytest.raises(ValueError, match='dual_transform'):
    _recipe(dual_transform='sigmoid')


def test_a_config_written_before_dual_transform_reads_exp():
  """A run or bundle saved before the field keeps the duals it trained with.

  Its config.json has no `dual_transform`; read with the new default
  (softplus) its saved log-duals would be taken for softplus parameters
  (a log alpha_std of 9.2, alpha_std 1e4, would read as 9.2).
  """
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  old = config_lib.to_dict(mpo.Config(**SMALL))
  del old['dual_transform']
  assert config_lib.from_dict(mpo.Config, old).dual_transform == 'exp'
  new = config_lib.to_dict(mpo.Config(**SMALL))
  assert config_lib.from_dict(mpo.Config, new).dual_transform == 'softplus'
  recipe = mpo.make(config_lib.from_dict(mpo.Config, old), SPEC)
  duals = recipe.init(jax.random.PRNGKey(0), SPEC).duals
  np.testing.assert_allclose(duals.log_alpha_std, np.log(10.), rtol=1e-6)


@pytest.mark.parametrize('penalty', [1e-3, 0.])
def test_action_penalty_pulls_an_out_of_bounds_mean_back(penalty):
  """With Q flat in the action, only the penalty objective moves the mean.

  A critic that ignores actions gives uniform E-step weights, and the M-step
  then refits the mean where it is. The penalty's weights favour samples
  nearer [-1, 1], so with it on the mean moves back towards the bounds (a
  small step per update: the penalty's KL bound is small, and the target
  policy it is measured from moves slowly).
  """
  recipe = _recipe(action_penalty_epsilon=penalty, policy_lr=1e-2,
                   epsilon_mean=1., max_grad_norm=None)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  a = SPEC.action_size
  head = 'gaussian_actor/~/head'
  shift = jnp.concatenate([jnp.full((a,), 3.), jnp.zeros((a,))])
  policy = {**state.policy,
            head: {**state.policy[head], 'b': state.policy[head]['b'] + shift}}
  critic = jax.tree.map(jnp.zeros_like, state.critic)  # Q == 0 everywhere.
  state = state._replace(policy=policy, target_policy=policy, critic=critic,
                         target_critic=critic)
  obs = jax.random.normal(jax.random.PRNGKey(1), (32, SPEC.obs_size))
  mean0, _ = recipe.act(state, obs, None, explore=False)
  update = jax.jit(recipe.update)
  # Rewards 0 keep the critic at 0.
  batch = _batch(jax.random.PRNGKey(1),
                 reward_fn=lambda x: jnp.zeros(x.shape[0]))
  for i in range(10):
    state, metrics = update(state, batch, jax.random.PRNGKey(10 + i))
  dist = mpo._policy_network(recipe.config, SPEC).apply(state.policy, obs)
  moved = float(jnp.mean(dist.mean)) - 3.
  assert float(jnp.min(mean0)) == 1.  # Clipped: all means were out of bounds.
  assert float(metrics['out_of_bounds']) == 1.
  if penalty:
    assert moved < -0.02, moved
  else:
    assert abs(moved) < 0.01, moved


def test_policy_moves_towards_higher_q():
  """With reward = first action component (and no bootstrap), the critic
  learns Q(s, a) ~ a_0 and the policy mean's a_0 climbs; a_1, which the
  reward ignores, stays put."""
  recipe = _recipe(target_update_period=1, epsilon_mean=1e-2)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  reward_fn = lambda a: a[:, 0]

  def step(s, k):
    k_batch, k_update = jax.random.split(k)
    return recipe.update(s, _batch(k_batch, reward_fn=reward_fn, discount=0.),
                         k_update)

  final, metrics = jax.jit(lambda s, k: jax.lax.scan(
      step, s, jax.random.split(k, 400)))(state, jax.random.PRNGKey(1))
  assert float(metrics['critic_loss'][-20:].mean()) < 0.1 * float(
      metrics['critic_loss'][:20].mean())
  obs = jax.random.normal(jax.random.PRNGKey(2), (64, SPEC.obs_size))
  before, _ = recipe.act(state, obs, jax.random.PRNGKey(0), explore=False)
  after, _ = recipe.act(final, obs, jax.random.PRNGKey(0), explore=False)
  shift = np.mean(np.asarray(after - before), 0)
  assert shift[0] > 0.3, shift
  assert abs(shift[1]) < 0.5 * shift[0], shift


def test_wrong_spec_raises():
  recipe = _recipe()
  with pytest.raises(ValueError, match='built for'):
    recipe.init(jax.random.PRNGKey(0), SPEC._replace(action_size=3))
