"""DDPG, TD3, D4PG and TD4 (one skeleton, `agents/off_policy.py`) and its seams.

Shared behaviour is tested once over the four recipes (shapes, exploration
schedule, one update, targets, delay, smoothing, errors); then each
recipe's own pieces (DDPG's saturation penalty, the twin critics, the
categorical support and targets), then the skeleton's seams a new agent
uses (an ensemble of K critics, a random subset of them, no target
networks). Synthetic spec, fixed synthetic batches and small networks, so
they run in seconds. The update math against hand-computed targets is in
test_update_math.py, learning on CartpoleBalance in test_learning.py.
"""

import functools

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import losses, networks
from roxie.agents import d4pg, ddpg, off_policy, td3, td4
from roxie.run import config as run_config
from roxie.types import EnvSpec, Transition

SPEC = EnvSpec(task='Synthetic', obs_size=4, action_size=2,
               obs_names=(('x', 4),), control_timestep=0.01,
               episode_length=100)
MODULES = {'ddpg': ddpg, 'td3': td3, 'd4pg': d4pg, 'td4': td4}
NAMES = tuple(MODULES)
DELAYED = ('td3', 'td4')
CATEGORICAL = ('d4pg', 'td4')
# Raw observations (the skeleton's default standardises them; the
# statistics have their own tests in test_obs_normalization.py).
SMALL = dict(hidden_sizes=(32, 32), batch_size=64, actor_lr=1e-3,
             critic_lr=1e-3, noise_start=0.3, noise_end=0.05,
             noise_decay_updates=100, normalize_observations=False)


def _config(name, **overrides):
  return MODULES[name].Config(**dict(SMALL, **overrides))


def _batch(key, n=64):
  """A fixed batch whose reward depends on the observation and action."""
  k_obs, k_act, k_next, k_done = jax.random.split(key, 4)
  obs = jax.random.normal(k_obs, (n, SPEC.obs_size))
  action = jax.random.uniform(k_act, (n, SPEC.action_size), minval=-1.,
                              maxval=1.)
  reward = jnp.tanh(obs[:, 0]) - jnp.square(action[:, 0] - 0.5)
  discount = 0.9 * jax.random.bernoulli(k_done, 0.9, (n,)).astype(jnp.float32)
  return Transition(obs=obs, action=action, reward=reward, discount=discount,
                    next_obs=jax.random.normal(k_next, (n, SPEC.obs_size)))


def _categorical_batch(key, n=64, reward_scale=10.):
  """As `_batch`, with rewards of the size the default support is for."""
  batch = _batch(key, n)
  reward = reward_scale * (1. + jnp.tanh(batch.obs[:, 0]) * batch.action[:, 0])
  return batch._replace(reward=reward)


def _batch_for(name, key):
  return (_categorical_batch if name in CATEGORICAL else _batch)(key)


def _changed(a, b):
  return any(not np.allclose(x, y) for x, y in
             zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _assert_equal(a, b):
  jax.tree.map(np.testing.assert_array_equal, a, b)


def _assert_moved_by_tau(target, online, old_target, tau):
  expected = jax.tree.map(lambda p, t: tau * p + (1. - tau) * t, online,
                          old_target)
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6),
               target, expected)


def _head(params):
  return [k for k in params if k.endswith('/~/head')][0]


@functools.lru_cache(maxsize=None)
def _built(name):
  """(config, recipe, initial state, jitted update) of `name`, built once."""
  config = _config(name)
  recipe = MODULES[name].make(config, SPEC)
  state = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), SPEC)
  return config, recipe, state, jax.jit(recipe.update)


# Shared behaviour of the four recipes.


@pytest.mark.parametrize('name', NAMES)
def test_recipe_fields(name):
  config, recipe, _, _ = _built(name)
  assert recipe.name == name and not recipe.on_policy
  assert recipe.replay.batch_size == config.batch_size
  assert recipe.replay.n_step == config.n_step
  assert recipe.updates_per_iteration == config.updates_per_iteration


@pytest.mark.parametrize('name', NAMES)
def test_state_fields_are_what_checkpoints_name(name):
  _, _, state, _ = _built(name)
  assert type(state) is MODULES[name].State
  assert state._fields == ('actor', 'critic', 'target_actor',
                           'target_critic', 'actor_opt', 'critic_opt',
                           'steps', 'obs_stats')
  # Without normalize_observations the statistics are None, which has no
  # leaves: a checkpoint names what it named before the field existed.
  assert state.obs_stats is None
  paths = {jax.tree_util.keystr(p)
           for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]}
  assert not any('obs_stats' in p for p in paths)


@pytest.mark.parametrize('name', NAMES)
def test_act_shapes_and_range(name):
  _, recipe, state, _ = _built(name)
  obs = 10. * jax.random.normal(jax.random.PRNGKey(1), (7, SPEC.obs_size))
  for explore in (True, False):
    action, extras = jax.jit(recipe.act, static_argnames='explore')(
        state, obs, jax.random.PRNGKey(2), explore=explore)
    assert action.shape == (7, SPEC.action_size)
    assert extras == {}
    assert np.all(np.abs(action) <= 1.)


@pytest.mark.parametrize('name', NAMES)
def test_deterministic_act_ignores_key_and_explore_follows_schedule(name):
  config, recipe, state, _ = _built(name)
  obs = jax.random.normal(jax.random.PRNGKey(1), (4096, SPEC.obs_size))
  act = jax.jit(recipe.act, static_argnames='explore')
  a1, _ = act(state, obs, jax.random.PRNGKey(2), explore=False)
  a2, _ = act(state, obs, jax.random.PRNGKey(3), explore=False)
  np.testing.assert_array_equal(a1, a2)
  # The initial actor outputs ~0, so clipping at +-1 hardly touches the noise:
  # its std is the schedule's value at the agent's update count.
  for steps, std in ((0, config.noise_start), (50, 0.175),
                     (config.noise_decay_updates, config.noise_end),
                     (10 * config.noise_decay_updates, config.noise_end)):
    s = state._replace(steps=jnp.asarray(steps, jnp.int32))
    noisy, _ = act(s, obs, jax.random.PRNGKey(4), explore=True)
    np.testing.assert_allclose(np.std(noisy - a1), std, rtol=0.05)


@pytest.mark.parametrize('name', NAMES)
def test_update_is_finite_and_changes_params(name):
  _, _, state, update = _built(name)
  new, metrics = update(state, _batch_for(name, jax.random.PRNGKey(5)),
                        jax.random.PRNGKey(6))
  assert set(metrics) == {'critic_loss', 'actor_loss', 'q', 'noise_std'}
  assert all(np.isfinite(v) for v in metrics.values())
  assert int(new.steps) == 1
  assert _changed(new.critic, state.critic)
  if name not in DELAYED:  # A delayed actor waits (see the delay test).
    assert _changed(new.actor, state.actor)


@pytest.mark.parametrize('name', NAMES)
def test_targets_move_by_tau_when_the_actor_moves(name):
  config, _, state, update = _built(name)
  batch = _batch_for(name, jax.random.PRNGKey(5))
  old, new = state, state
  for i in range(getattr(config, 'policy_delay', 1)):
    old, new = new, update(new, batch, jax.random.PRNGKey(6 + i))[0]
  for online, target, before in ((new.actor, new.target_actor,
                                  old.target_actor),
                                 (new.critic, new.target_critic,
                                  old.target_critic)):
    _assert_moved_by_tau(target, online, before, config.tau)
    assert _changed(target, before)


@pytest.mark.parametrize('name', NAMES)
def test_critic_loss_decreases_on_a_fixed_batch(name):
  _, _, state, update = _built(name)
  batch = _batch_for(name, jax.random.PRNGKey(7))
  fraction = 0.5
  if name in CATEGORICAL:
    # Terminal transitions have point-mass targets (at most two atoms after
    # projection), so the cross-entropy can fall far below its start, log(K).
    batch = batch._replace(discount=jnp.zeros((64,)))
    fraction = 0.75
  losses_seen = []
  for i in range(50):
    state, metrics = update(state, batch, jax.random.PRNGKey(i))
    losses_seen.append(float(metrics['critic_loss']))
  assert np.mean(losses_seen[-5:]) < fraction * np.mean(losses_seen[:5])


@pytest.mark.parametrize('name', NAMES)
def test_wrong_spec_raises(name):
  _, recipe, _, _ = _built(name)
  other = SPEC._replace(task='Other', obs_size=SPEC.obs_size + 1)
  with pytest.raises(ValueError, match='built for observations of size 4'):
    recipe.init(jax.random.PRNGKey(0), other)
  other = SPEC._replace(task='Other', action_size=SPEC.action_size + 1)
  with pytest.raises(ValueError, match='actions of size 2'):
    recipe.init(jax.random.PRNGKey(0), other)


@pytest.mark.parametrize('name', DELAYED)
def test_delayed_policy_skips_actor_and_target_updates(name):
  config, _, state, update = _built(name)
  batch = _batch_for(name, jax.random.PRNGKey(5))
  # Update 1 of every 2 trains the critics only.
  s1, m1 = update(state, batch, jax.random.PRNGKey(6))
  assert _changed(s1.critic, state.critic)
  for before, after in ((state.actor, s1.actor),
                        (state.target_actor, s1.target_actor),
                        (state.target_critic, s1.target_critic),
                        (state.actor_opt, s1.actor_opt)):
    _assert_equal(before, after)
  assert float(m1['actor_loss']) == 0.
  # Update 2 moves the actor, then both targets by tau towards the networks.
  s2, m2 = update(s1, batch, jax.random.PRNGKey(7))
  assert _changed(s2.actor, s1.actor)
  assert float(m2['actor_loss']) != 0.
  _assert_moved_by_tau(s2.target_actor, s2.actor, s1.target_actor, config.tau)
  _assert_moved_by_tau(s2.target_critic, s2.critic, s1.target_critic,
                       config.tau)
  # Update 3 skips again.
  s3, _ = update(s2, batch, jax.random.PRNGKey(8))
  _assert_equal(s2.actor, s3.actor)
  _assert_equal(s2.target_critic, s3.target_critic)


@pytest.mark.parametrize('name', DELAYED)
def test_target_smoothing_noise_depends_on_the_key(name):
  _, _, state, update = _built(name)
  batch = _batch_for(name, jax.random.PRNGKey(5))
  a, _ = update(state, batch, jax.random.PRNGKey(1))
  b, _ = update(state, batch, jax.random.PRNGKey(2))
  assert _changed(a.critic, b.critic)
  # Without smoothing the update is a function of the batch alone.
  plain = MODULES[name].make(_config(name, target_noise=0.), SPEC)
  update_plain = jax.jit(plain.update)
  a, _ = update_plain(state, batch, jax.random.PRNGKey(1))
  b, _ = update_plain(state, batch, jax.random.PRNGKey(2))
  _assert_equal(a.critic, b.critic)


@pytest.mark.parametrize('name', DELAYED)
def test_policy_delay_below_one_raises(name):
  with pytest.raises(ValueError, match='policy_delay'):
    MODULES[name].make(_config(name, policy_delay=0), SPEC)


# DDPG: the actor's saturation penalty.


def test_ddpg_saturation_penalty_adds_to_actor_loss():
  batch = _batch(jax.random.PRNGKey(5))
  actor_losses = {}
  for weight in (0., 1.):
    recipe = ddpg.make(_config('ddpg', saturation_weight=weight,
                               saturation_threshold=2.), SPEC)
    init = jax.jit(recipe.init, static_argnums=1)
    state = init(jax.random.PRNGKey(0), SPEC)
    # Push every pre-tanh output to 5: a penalty of (5 - 2)^2 per dimension.
    head = _head(state.actor)
    actor = dict(state.actor)
    actor[head] = {'w': jnp.zeros_like(actor[head]['w']),
                   'b': jnp.full_like(actor[head]['b'], 5.)}
    _, metrics = jax.jit(recipe.update)(state._replace(actor=actor), batch,
                                        jax.random.PRNGKey(6))
    actor_losses[weight] = float(metrics['actor_loss'])
  np.testing.assert_allclose(actor_losses[1.] - actor_losses[0.],
                             9. * SPEC.action_size, rtol=1e-4)


def _run_config(agent, task, overrides=None):
  """The agent Config a new run of `task` resolves to, as a dict."""
  return run_config.new_run_config(agent, task, 'cpu', None, 1000, 0,
                                   overrides, None, 1, None, None).config


def test_ddpg_noise_decays_over_its_own_125k_updates():
  # DDPG redeclares the skeleton's noise_decay_updates (50k) as 125k; a run
  # resolves to it, the others keep 50k, and from pixels PIXEL_DEFAULTS'
  # 10k still wins.
  def resolved(agent, overrides=None):
    return _run_config(agent, 'FingerSpin', overrides)['noise_decay_updates']

  assert resolved('ddpg') == 125_000
  for name in ('td3', 'd4pg', 'td4'):
    assert resolved(name) == off_policy.Config().noise_decay_updates == 50_000
  assert resolved('ddpg', run_config.pixel_defaults('ddpg')) == 10_000
  # The recipe acts on it: at update 50k, where the skeleton's std has
  # reached its end (0.1), DDPG's is 0.4 - 0.3 * 50k / 125k = 0.28.
  config = _config('ddpg', noise_start=0.4, noise_end=0.1,
                   noise_decay_updates=ddpg.Config().noise_decay_updates)
  recipe = ddpg.make(config, SPEC)
  state = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), SPEC)
  obs = jax.random.normal(jax.random.PRNGKey(1), (4096, SPEC.obs_size))
  act = jax.jit(recipe.act, static_argnames='explore')
  mean, _ = act(state, obs, jax.random.PRNGKey(2), explore=False)
  state = state._replace(steps=jnp.asarray(50_000, jnp.int32))
  noisy, _ = act(state, obs, jax.random.PRNGKey(3), explore=True)
  np.testing.assert_allclose(np.std(noisy - mean), 0.28, rtol=0.05)


@pytest.mark.parametrize('name', MODULES)
def test_one_step_targets_from_states_three_from_pixels(name):
  # The skeleton's Config takes one-step targets (ReplayConfig's 3 stays
  # MPO's); a run from states resolves to 1 and the recipe samples one-step
  # windows, and from pixels the recipe's PIXEL_DEFAULTS put back 3. The
  # d4pg case failed before D4PG took them, the td4 case before TD4 did
  # (3 == 1).
  module = MODULES[name]

  def resolved(agent, overrides=None):
    return _run_config(agent, 'CheetahRun', overrides)['n_step']

  assert off_policy.Config().n_step == 1
  assert off_policy.ReplayConfig().n_step == 3
  assert resolved(name) == module.Config().n_step == 1
  assert resolved(name, run_config.pixel_defaults(name)) == 3
  assert resolved(name, {'n_step': '2'}) == 2  # --set still wins.
  assert module.make(module.Config(), SPEC).replay.n_step == 1


# TD3 and TD4: twin critics.


@pytest.mark.parametrize('name', DELAYED)
def test_twin_critics_are_independent(name):
  _, _, state, _ = _built(name)
  for leaf in jax.tree.leaves(state.critic):
    assert leaf.shape[0] == 2
  w = [v['w'] for k, v in state.critic.items() if k.endswith('linear_0')][0]
  assert not np.allclose(w[0], w[1])


# D4PG and TD4: the categorical support and targets.


@pytest.mark.parametrize('name', CATEGORICAL)
@pytest.mark.parametrize('overrides, repeat, v_min, v_max', [
    ({}, 1, -5., 120.),  # Derived from discount 0.99: the published support.
    ({'discount': 0.9}, 1, -0.5, 12.),
    # Under an action repeat of 8 (CartpoleSwingup's in the task table) an
    # agent step's reward reaches 8, its values 800: the support scales. It
    # stayed [-5, 120] once, and the critic's mean saturated at 120.
    ({}, 8, -40., 960.),
])
def test_support(name, overrides, repeat, v_min, v_max):
  # The critic starts near-uniform over the atoms, so its mean is the middle
  # of the support.
  spec = SPEC._replace(action_repeat=repeat)
  recipe = MODULES[name].make(_config(name, **overrides), spec)
  state = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), spec)
  _, metrics = jax.jit(recipe.update)(
      state, _categorical_batch(jax.random.PRNGKey(5)), jax.random.PRNGKey(6))
  np.testing.assert_allclose(metrics['q'], (v_min + v_max) / 2., rtol=1e-3)


@pytest.mark.parametrize('name', CATEGORICAL)
def test_critic_init_value(name):
  # critic_init_value starts every Q near it instead of at the midpoint
  # (460 on this support): the first update's q reads it.
  spec = SPEC._replace(action_repeat=8)
  recipe = MODULES[name].make(_config(name, critic_init_value=0.), spec)
  state = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), spec)
  _, metrics = jax.jit(recipe.update)(
      state, _categorical_batch(jax.random.PRNGKey(5)), jax.random.PRNGKey(6))
  assert abs(float(metrics['q'])) < 5.


@pytest.mark.parametrize('name', CATEGORICAL)
def test_bad_support_raises(name):
  with pytest.raises(ValueError, match='v_min < v_max'):
    MODULES[name].make(_config(name, v_min=1., v_max=0.), SPEC)


def test_d4pg_critic_learns_the_shifted_and_scaled_target_distribution():
  # Freeze the target critic (tau = 0) at a point mass on the atom at 20 for
  # every input; with reward 1 and discount 0.5 the target is a point mass
  # at 1 + 0.5 * 20 = 11, which the critic's mean must approach.
  config = _config('d4pg', tau=0., critic_lr=1e-2)
  recipe = d4pg.make(config, SPEC)
  state = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), SPEC)
  assert np.linspace(-5., 120., config.num_atoms)[10] == 20.
  head = _head(state.target_critic)
  target_critic = dict(state.target_critic)
  target_critic[head] = {
      'w': jnp.zeros_like(target_critic[head]['w']),
      'b': jnp.where(jnp.arange(config.num_atoms) == 10, 30., 0.)}
  state = state._replace(target_critic=target_critic)
  batch = _categorical_batch(jax.random.PRNGKey(5))._replace(
      reward=jnp.ones((64,)), discount=jnp.full((64,), 0.5))
  update = jax.jit(recipe.update)
  for i in range(40):
    state, metrics = update(state, batch, jax.random.PRNGKey(i))
  np.testing.assert_allclose(metrics['q'], 11., atol=0.5)


def test_td4_both_heads_learn_the_lower_mean_target_head():
  # Freeze the target critics (tau = 0) at point masses, whatever the input:
  # one head on the atom at 20, the other on the atom at 95. With reward 0
  # and discount 1, per sample the target is the whole distribution of the
  # lower-mean head, so both online heads must learn a mean of 20, whichever
  # head is the low one.
  config = _config('td4', tau=0., critic_lr=1e-2)
  recipe = td4.make(config, SPEC)
  update = jax.jit(recipe.update)
  initial = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), SPEC)
  atoms = np.linspace(-5., 120., config.num_atoms)
  assert atoms[10] == 20. and atoms[40] == 95.
  k = jnp.arange(config.num_atoms)
  low, high = jnp.where(k == 10, 30., 0.), jnp.where(k == 40, 30., 0.)
  head = _head(initial.target_critic)
  batch = _categorical_batch(jax.random.PRNGKey(5))._replace(
      reward=jnp.zeros((64,)), discount=jnp.ones((64,)))
  for biases in ([low, high], [high, low]):
    target_critic = dict(initial.target_critic)
    target_critic[head] = {'w': jnp.zeros_like(target_critic[head]['w']),
                           'b': jnp.stack(biases)}
    state = initial._replace(target_critic=target_critic)
    for i in range(30):
      state, metrics = update(state, batch, jax.random.PRNGKey(i))
    # `q` averages both heads, so it is 20 only if each head is.
    np.testing.assert_allclose(metrics['q'], 20., atol=0.5)


# The skeleton's seams, as a new agent would use them.


def _ensemble_recipe(num_critics, subset_size=None, **kwargs):
  """A REDQ-style recipe: K critics, the target over (a subset's) minimum."""
  config = _config('ddpg')

  def critic_loss(q, target, batch):  # q: [K, N]
    del batch
    return 0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0)), q

  def target(q_next, batch, key):  # q_next: [K, N]
    # One subset per update, shared by the batch (the key closed over).
    return jax.vmap(lambda r, d, q: losses.ensemble_q_target(
        r, d, q, subset_size=subset_size, key=key), in_axes=(0, 0, 1))(
            batch.reward, batch.discount, q_next)

  return off_policy.make(
      config, SPEC, name='ensemble',
      critic=lambda o, a: networks.TwinQCritic(
          num_critics=num_critics,
          **off_policy.critic_kwargs(config, SPEC))(o, a),
      target=target, critic_loss=critic_loss,
      actor_value=lambda q: jnp.mean(q, 0), **kwargs)


def _critic_loss_with_constant_targets(subset_size, keys):
  """The 3-critic recipe's critic loss per update key, and its hand values.

  The target heads are set so that member k outputs the constant k + 1:
  a target r + discount * m for the minimum m of the members drawn.
  """
  recipe = _ensemble_recipe(3, subset_size)
  state = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), SPEC)
  assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(state.critic))
  head = _head(state.critic)
  target_critic = dict(state.target_critic)
  target_critic[head] = {'w': jnp.zeros_like(target_critic[head]['w']),
                         'b': jnp.arange(1., 4.)[:, None]}
  state = state._replace(target_critic=target_critic)
  batch = _batch(jax.random.PRNGKey(5))
  update = jax.jit(recipe.update)
  got = [float(update(state, batch, k)[1]['critic_loss']) for k in keys]
  # The loss is taken at the online critics before the step.
  online = hk.without_apply_rng(hk.transform(
      lambda o, a: networks.TwinQCritic(
          num_critics=3, **off_policy.critic_kwargs(_config('ddpg'), SPEC))(
              o, a)))
  q = online.apply(state.critic, batch.obs, batch.action)  # [3, N]
  by_minimum = {}
  for m in (1., 2., 3.):
    target = batch.reward + batch.discount * m
    by_minimum[m] = 0.5 * np.mean(np.sum(np.square(q - target[None]), 0))
  return got, by_minimum


def test_an_ensemble_of_critics_bootstraps_from_its_minimum():
  got, by_minimum = _critic_loss_with_constant_targets(
      None, [jax.random.PRNGKey(6)])
  np.testing.assert_allclose(got[0], by_minimum[1.], rtol=1e-5)


def test_a_random_subset_of_critics_draws_with_the_update_key():
  # REDQ with a subset of one: the bootstrap value is one member's, drawn
  # per update; over 12 keys more than one member is drawn.
  got, by_minimum = _critic_loss_with_constant_targets(
      1, [jax.random.PRNGKey(i) for i in range(12)])
  drawn = set()
  for loss in got:
    m = min(by_minimum, key=lambda k: abs(by_minimum[k] - loss))
    np.testing.assert_allclose(loss, by_minimum[m], rtol=1e-5)
    drawn.add(m)
  assert len(drawn) > 1


def test_without_target_networks_the_update_reads_no_targets():
  recipe = _ensemble_recipe(2, target_networks=False)
  state = jax.jit(recipe.init, static_argnums=1)(jax.random.PRNGKey(0), SPEC)
  update = jax.jit(recipe.update)
  batch = _batch(jax.random.PRNGKey(5))
  new, _ = update(state, batch, jax.random.PRNGKey(6))
  # The target fields follow the online networks ...
  _assert_equal(new.target_actor, new.actor)
  _assert_equal(new.target_critic, new.critic)
  # ... and whatever they held before does not change the update.
  scrambled = state._replace(
      target_actor=jax.tree.map(lambda x: x + 1., state.target_actor),
      target_critic=jax.tree.map(lambda x: x - 1., state.target_critic))
  other, _ = update(scrambled, batch, jax.random.PRNGKey(6))
  _assert_equal(other.critic, new.critic)
  _assert_equal(other.actor, new.actor)


def test_skeleton_policy_delay_below_one_raises():
  with pytest.raises(ValueError, match='policy_delay must be >= 1, got 0'):
    _ensemble_recipe(2, policy_delay=0)
