"""The deterministic-actor recipes' updates checked against their math.

DDPG, TD3, D4PG and TD4 are driven through their public API only
(`make(config, spec)`, `State`'s field names, `Config`'s fields), so these
tests hold across a refactor of the recipes' insides.

The trick: with `layer_norm=False` and one ReLU hidden layer, a critic's
parameters can be written by hand to compute a known function, e.g. a
constant per head, `c + 3 * s'_0`, or `c - |a_0|` (see `_mlp`). Freezing the
target networks (`tau=0`) at such functions and starting the online critic
at all-zero parameters (so that only its output bias can learn: every other
gradient passes through a zero weight or a zero hidden activation) makes
the online critic converge to the batch mean of the recipe's TD target,
which the tests compute by hand. A wrong target (the max instead of the min
of two critics, the online network instead of the target network, `obs`
instead of `next_obs`, no smoothing noise, no clip) lands elsewhere.

Adam's first step moves each parameter by the learning rate times the sign
of its gradient, so one actor update from zero weights moves the actor's
output bias by exactly `actor_lr` in the direction that climbs the critic:
the deterministic action becomes `tanh(b +- actor_lr)`.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie.agents import d4pg, ddpg, td3, td4
from roxie.types import EnvSpec, ReplaySpec, Rollout, Transition

O, A, H, K = 3, 2, 8, 11  # obs size, action size, hidden width, atoms.
SPEC = EnvSpec(task='Synthetic', obs_size=O, action_size=A,
               obs_names=(('x', O),), control_timestep=0.01,
               episode_length=100)
MODULES = {'ddpg': ddpg, 'td3': td3, 'd4pg': d4pg, 'td4': td4}
TWIN = ('td3', 'td4')
CATEGORICAL = ('d4pg', 'td4')
# Atoms of the categorical critics: -10, -8, ..., 10.
ATOMS = np.linspace(-10., 10., K)
N = 32  # Batch size of the synthetic batches.


def _config(name, **overrides):
  # Hand-set networks read the raw observations (the skeleton's default would
  # standardise them).
  base = dict(hidden_sizes=(H,), layer_norm=False, batch_size=N,
              actor_lr=1e-2, critic_lr=5e-2, normalize_observations=False)
  if name in CATEGORICAL:
    base.update(num_atoms=K, v_min=-10., v_max=10.)
  if name in TWIN:
    base.update(policy_delay=1)
  base.update(overrides)
  return MODULES[name].Config(**base)


def _mlp(units, out_w, out_b):
  """Hand-set parameters of one Linear-ReLU-Linear network.

  Args:
    units: up to H hidden units, each (input index, scale, offset): the unit
      computes relu(scale * x[index] + offset), where x = [obs, action]
      (obs indices 0..O-1, action indices O..O+A-1).
    out_w: [len(units), out] output weights of those units.
    out_b: [out] output bias.

  Returns:
    (w1 [O+A, H], b1 [H], w2 [H, out], b2 [out]) as float32 arrays.
  """
  out_b = np.asarray(out_b, np.float32)
  w1 = np.zeros((O + A, H), np.float32)
  b1 = np.zeros((H,), np.float32)
  w2 = np.zeros((H, out_b.shape[0]), np.float32)
  for j, (index, scale, offset) in enumerate(units):
    w1[index, j], b1[j] = scale, offset
  if units:
    w2[:len(units)] = np.asarray(out_w, np.float32)
  return w1, b1, w2, out_b


def _q_linear(const, coefs):
  """A Q head computing const + sum coef * x[index] (for |x| < 10)."""
  units = [(i, 1., 10.) for i in coefs]
  w = [[c] for c in coefs.values()]
  return _mlp(units, w, [const - 10. * sum(coefs.values())])


def _q_abs(const, index, coef):
  """A Q head computing const + coef * |x[index]|."""
  return _mlp([(index, 1., 0.), (index, -1., 0.)], [[coef], [coef]], [const])


def _logits_point(atom):
  """Categorical logits with (all but 1e-12 of) the mass on one atom."""
  return _mlp([], None, np.where(np.arange(K) == atom, 30., 0.))


def _logits_switch(index, hi_atom, lo_atom, gain=10.):
  """Logits gain * x on `hi_atom`, -gain * x on `lo_atom`, 0 elsewhere."""
  w = np.zeros((1, K))
  w[0, hi_atom], w[0, lo_atom] = gain, -gain
  b = np.zeros((K,))
  b[hi_atom], b[lo_atom] = -10. * gain, 10. * gain
  return _mlp([(index, 1., 10.)], w, b)


def _set_critic(template, heads):
  """`template`'s tree with the hand-set heads (one, or two stacked)."""
  parts = [np.stack(p) for p in zip(*heads)] if len(heads) > 1 else heads[0]
  w1, b1, w2, b2 = parts

  def leaf(path, x):
    name = jax.tree_util.keystr(path)
    if 'linear_0' in name:
      value = w1 if name.endswith("['w']") else b1
    elif 'head' in name:
      value = w2 if name.endswith("['w']") else b2
    else:
      raise AssertionError(f'unexpected critic parameter {name}; these '
                           'tests expect Linear-ReLU-Linear critics')
    assert value.shape == x.shape, (name, value.shape, x.shape)
    return jnp.asarray(value)

  return jax.tree_util.tree_map_with_path(leaf, template)


def _constant_actor(template, pre_tanh):
  """Actor parameters with zero weights and output bias `pre_tanh` [A]."""
  def leaf(path, x):
    name = jax.tree_util.keystr(path)
    if 'head' in name and name.endswith("['b']"):
      return jnp.asarray(pre_tanh, x.dtype)
    return jnp.zeros_like(x)
  return jax.tree_util.tree_map_with_path(leaf, template)


def _zeros(tree):
  return jax.tree.map(jnp.zeros_like, tree)


def _batch(reward, discount, obs0=-2., next_obs0=2., key=0):
  """A batch whose obs[:, 0] and next_obs[:, 0] are constants."""
  k1, k2, k3 = jax.random.split(jax.random.PRNGKey(key), 3)
  obs = jax.random.uniform(k1, (N, O), minval=-1., maxval=1.)
  next_obs = jax.random.uniform(k2, (N, O), minval=-1., maxval=1.)
  return Transition(
      obs=obs.at[:, 0].set(obs0),
      action=jax.random.uniform(k3, (N, A), minval=-1., maxval=1.),
      reward=jnp.broadcast_to(jnp.asarray(reward, jnp.float32), (N,)),
      discount=jnp.broadcast_to(jnp.asarray(discount, jnp.float32), (N,)),
      next_obs=next_obs.at[:, 0].set(next_obs0))


# Half the rows end in a terminal state (discount 0), half bootstrap with 0.5.
REWARD = np.where(np.arange(N) % 2 == 0, 1., -1.)
DISCOUNT = np.where(np.arange(N) % 4 < 2, 0.5, 0.)

_RECIPES = {}


def _build(module, config, name, overrides):
  """(recipe, init state, jitted update, jitted run of many updates), cached."""
  key = (name, tuple(sorted(overrides.items())))
  if key not in _RECIPES:
    recipe = module.make(config, SPEC)
    state = recipe.init(jax.random.PRNGKey(0), SPEC)

    @jax.jit
    def run(state, batch, keys):
      return jax.lax.scan(lambda s, k: recipe.update(s, batch, k), state,
                          keys)

    _RECIPES[key] = (recipe, state, jax.jit(recipe.update), run)
  return _RECIPES[key]


def _recipe(name, **overrides):
  """`_build` for a DDPG-family recipe with `_config`'s settings."""
  return _build(MODULES[name], _config(name, **overrides), name, overrides)


def _learned_q(name, target_heads, batch, num_updates=400, **overrides):
  """The online critic's mean after training to frozen target critics."""
  recipe, state, _, run = _recipe(name, tau=0., **overrides)
  del recipe
  state = state._replace(critic=_zeros(state.critic),
                         target_critic=_set_critic(state.target_critic,
                                                   target_heads))
  keys = jax.random.split(jax.random.PRNGKey(1), num_updates)
  state, metrics = run(state, batch, keys)
  return np.asarray(metrics['q'][-20:]).mean(), state


def _expected_mean_target(value_next):
  """Batch mean of r + discount * value_next."""
  return float(np.mean(REWARD + DISCOUNT * value_next))


# The target critics read next_obs[:, 0] = +2 (obs[:, 0] = -2) as follows.
#   ddpg: Q' = 1 + 3 s0 -> 7 at next_obs (-5 at obs).
#   td3:  Q1' = 1, Q2' = 3 s0 -> min 1 (max 6; -6 at obs; online critic 0).
#   d4pg: point mass on atom 8 where s0 > 0, on atom -8 where s0 < 0.
#   td4:  head 1 a point mass on 2, head 2 on 8 where s0 > 0 and -8 where
#         s0 < 0: the lower-mean head is head 1 at next_obs (value 2),
#         head 2 at obs (-8); the higher-mean one gives 8.
TARGET_CASES = {
    'ddpg': ([_q_linear(1., {0: 3.})], 7.),
    'td3': ([_q_linear(1., {}), _q_linear(0., {0: 3.})], 1.),
    'd4pg': ([_logits_switch(0, hi_atom=9, lo_atom=1)], 8.),
    'td4': ([_logits_point(6), _logits_switch(0, hi_atom=9, lo_atom=1)], 2.),
}


@pytest.mark.parametrize('name', sorted(MODULES))
def test_critic_learns_the_td_target_of_the_frozen_target_critic(name):
  assert ATOMS[9] == 8. and ATOMS[1] == -8. and ATOMS[6] == 2.
  heads, value_next = TARGET_CASES[name]
  batch = _batch(REWARD, DISCOUNT)
  q, state = _learned_q(name, heads, batch)
  expected = _expected_mean_target(value_next)
  np.testing.assert_allclose(q, expected, atol=0.05)
  # Only the output bias learned: the critic is constant, as assumed.
  for path, leaf in jax.tree_util.tree_flatten_with_path(state.critic)[0]:
    if not ('head' in jax.tree_util.keystr(path)
            and jax.tree_util.keystr(path).endswith("['b']")):
      np.testing.assert_array_equal(leaf, 0.)


def test_the_frozen_heads_compute_what_the_cases_say():
  # The hand-set parameters checked against the roxie networks the recipes
  # are built from, so a wrong construction cannot pass as a wrong recipe.
  import haiku as hk  # pylint: disable=g-import-not-at-top
  from roxie import networks  # pylint: disable=g-import-not-at-top
  obs = jnp.zeros((2, O)).at[:, 0].set(jnp.array([2., -2.]))
  action = jnp.array([[0.5, -0.7], [-0.25, 0.1]])
  q = hk.without_apply_rng(hk.transform(lambda o, a: networks.QCritic(
      hidden_sizes=(H,), layer_norm=False)(o, a)))
  params = _set_critic(q.init(jax.random.PRNGKey(0), obs, action),
                       [_q_linear(1., {0: 3.})])
  np.testing.assert_allclose(q.apply(params, obs, action), [7., -5.],
                             atol=1e-5)
  params = _set_critic(params, [_q_abs(1., O, -1.)])
  np.testing.assert_allclose(q.apply(params, obs, action), [0.5, 0.75],
                             atol=1e-6)
  cat = hk.without_apply_rng(hk.transform(
      lambda o, a: networks.CategoricalCritic(
          v_min=-10., v_max=10., num_atoms=K, hidden_sizes=(H,),
          layer_norm=False)(o, a)))
  params = _set_critic(cat.init(jax.random.PRNGKey(0), obs, action),
                       [_logits_switch(0, hi_atom=9, lo_atom=1)])
  np.testing.assert_allclose(cat.apply(params, obs, action).mean(),
                             [8., -8.], atol=1e-5)


# Online critics that climb with action[0] (index O of the critic input);
# for the twin recipes the second head falls with it, so an actor that
# climbs the first critic (as TD3 and TD4 specify), their minimum or their
# mean would move differently.
ACTOR_CASES = {
    'ddpg': [_q_linear(0., {O: 1.})],
    'td3': [_q_linear(0., {O: 1.}), _q_linear(0., {O: -1.})],
    'd4pg': [_logits_switch(O, hi_atom=9, lo_atom=1, gain=1.)],
    'td4': [_logits_switch(O, hi_atom=9, lo_atom=1, gain=1.),
            _logits_switch(O, hi_atom=1, lo_atom=9, gain=1.)],
}


@pytest.mark.parametrize('name', sorted(MODULES))
def test_actor_climbs_the_critic_by_one_adam_step(name):
  recipe, state, update, _ = _recipe(name, critic_lr=0.)
  pre_tanh = np.array([0.5, -0.3], np.float32)
  state = state._replace(
      actor=_constant_actor(state.actor, pre_tanh),
      critic=_set_critic(state.critic, ACTOR_CASES[name]))
  obs = _batch(REWARD, DISCOUNT).obs
  act = jax.jit(recipe.act, static_argnames='explore')
  before, _ = act(state, obs, jax.random.PRNGKey(0), explore=False)
  np.testing.assert_allclose(before, np.tanh(pre_tanh)[None].repeat(N, 0),
                             rtol=1e-6)
  new, metrics = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(2))
  after, _ = act(new, obs, jax.random.PRNGKey(0), explore=False)
  # Adam's first step is lr * sign(gradient): action[0] climbs by exactly
  # actor_lr in pre-tanh units; action[1] has no gradient and stays.
  lr = recipe.config.actor_lr
  expected = np.tanh(pre_tanh + np.array([lr, 0.], np.float32))
  np.testing.assert_allclose(after, expected[None].repeat(N, 0), rtol=1e-5)
  assert float(metrics['actor_loss']) != 0.


def _perturbed(tree, key, scale=0.1):
  leaves, treedef = jax.tree.flatten(tree)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(treedef, [
      x + scale * jax.random.normal(k, x.shape, x.dtype)
      for x, k in zip(leaves, keys)])


@pytest.mark.parametrize('name', sorted(MODULES))
def test_targets_move_by_tau_towards_the_new_online_networks(name):
  tau = 0.25
  recipe, state, update, _ = _recipe(name, tau=tau)
  # Targets away from the online networks in every leaf, so each leaf must
  # visibly move.
  state = state._replace(
      target_actor=_perturbed(state.actor, jax.random.PRNGKey(3)),
      target_critic=_perturbed(state.critic, jax.random.PRNGKey(4)))
  del recipe
  new, _ = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(5))
  for field in ('actor', 'critic'):
    online = getattr(new, field)
    old = getattr(state, 'target_' + field)
    moved = getattr(new, 'target_' + field)
    assert jax.tree.structure(moved) == jax.tree.structure(old)
    for path, o, t_old, t_new in zip(
        [jax.tree_util.keystr(p) for p, _ in
         jax.tree_util.tree_flatten_with_path(old)[0]],
        jax.tree.leaves(online), jax.tree.leaves(old), jax.tree.leaves(moved)):
      np.testing.assert_allclose(t_new, tau * o + (1. - tau) * t_old,
                                 atol=1e-6, err_msg=f'{field} {path}')
      assert not np.allclose(t_new, t_old), f'{field} {path} did not move'
  # The online networks did take a step (so "the new online networks" is
  # a distinct claim from "the old ones").
  assert any(not np.allclose(x, y) for x, y in zip(
      jax.tree.leaves(new.critic), jax.tree.leaves(state.critic)))


@pytest.mark.parametrize('name', TWIN)
def test_actor_and_targets_move_only_every_policy_delay_updates(name):
  _, state, update, _ = _recipe(name, policy_delay=3, tau=0.5)
  batch = _batch(REWARD, DISCOUNT)
  moved = []
  for i in range(6):
    new, metrics = update(state, batch, jax.random.PRNGKey(10 + i))
    assert int(new.steps) == i + 1
    changed = {f: any(not np.array_equal(x, y) for x, y in zip(
        jax.tree.leaves(getattr(new, f)), jax.tree.leaves(getattr(state, f))))
               for f in ('critic', 'actor', 'target_actor', 'target_critic')}
    assert changed['critic'], i
    assert changed['actor'] == changed['target_actor'] == (
        changed['target_critic']), (i, changed)
    assert (float(metrics['actor_loss']) != 0.) == changed['actor']
    moved.append(changed['actor'])
    state = new
  # The 3rd and 6th critic updates bring the actor and target updates.
  assert moved == [False, False, True, False, False, True]


def _mean_abs_clipped_normal(std, clip):
  """E|clip(std * z, -clip, clip)| for z ~ N(0, 1), in closed form."""
  if std == 0.:
    return 0.
  c = clip / std
  phi = math.exp(-0.5 * c * c) / math.sqrt(2. * math.pi)
  tail = 0.5 * math.erfc(c / math.sqrt(2.))  # P(z > c)
  # E|z| restricted to |z| < c, plus c on each tail.
  return std * (2. * (1. / math.sqrt(2. * math.pi) - phi) + 2. * c * tail)


@pytest.mark.parametrize('std,clip', [(1., 0.3), (0.2, 0.5), (0., 0.5)])
def test_td3_target_smoothing_noise_reaches_the_target_clipped(std, clip):
  # Target critics Q1' = 1 - |a_0|, Q2' = 2 - |a_0| and a target actor that
  # outputs 0: the target action is the clipped noise itself, so the TD
  # target's mean is r + discount * (1 - E|clip(std * z)|).
  name = 'td3'
  _, state, _, run = _recipe(name, tau=0., target_noise=std,
                             target_noise_clip=clip)
  state = state._replace(
      critic=_zeros(state.critic),
      target_actor=_zeros(state.target_actor),
      target_critic=_set_critic(state.target_critic,
                                [_q_abs(1., O, -1.), _q_abs(2., O, -1.)]))
  batch = _batch(REWARD, DISCOUNT)._replace(discount=jnp.ones((N,)))
  keys = jax.random.split(jax.random.PRNGKey(1), 600)
  _, metrics = run(state, batch, keys)
  q = np.asarray(metrics['q'][-200:]).mean()
  expected = np.mean(REWARD) + 1. - _mean_abs_clipped_normal(std, clip)
  np.testing.assert_allclose(q, expected, atol=0.02)


def test_mean_abs_clipped_normal_matches_sampling():
  z = np.random.default_rng(0).standard_normal(1_000_000)
  for std, clip in ((1., 0.3), (0.2, 0.5), (0.5, 0.5)):
    np.testing.assert_allclose(
        _mean_abs_clipped_normal(std, clip),
        np.mean(np.abs(np.clip(std * z, -clip, clip))), rtol=5e-3)


@pytest.mark.parametrize('name', TWIN)
def test_smoothing_noise_is_the_only_randomness_of_the_update(name):
  # With flat observations the key only draws the smoothing noise: no noise,
  # no dependence on the key; with noise, a different update per key.
  batch = _batch(REWARD, DISCOUNT)
  for std in (0., 0.2):
    _, state, update, _ = _recipe(name, target_noise=std)
    a, _ = update(state, batch, jax.random.PRNGKey(1))
    b, _ = update(state, batch, jax.random.PRNGKey(2))
    same = all(np.array_equal(x, y) for x, y in zip(
        jax.tree.leaves(a.critic), jax.tree.leaves(b.critic)))
    assert same == (std == 0.), std


@pytest.mark.parametrize('name', sorted(MODULES))
def test_replay_and_schedule_come_from_the_config(name):
  recipe, _, _, _ = _recipe(name)
  c = recipe.config
  assert recipe.replay == ReplaySpec(capacity=c.replay_capacity,
                                     batch_size=c.batch_size,
                                     n_step=c.n_step, discount=c.discount)
  assert not recipe.on_policy
  assert (recipe.steps_per_iteration, recipe.updates_per_iteration,
          recipe.warmup_steps) == (c.steps_per_iteration,
                                   c.updates_per_iteration, c.warmup_steps)
  other = MODULES[name].make(dataclasses.replace(c, n_step=5, discount=0.9),
                             SPEC)
  assert (other.replay.n_step, other.replay.discount) == (5, 0.9)


# SAC: the same hand-set critics, a tanh-Gaussian actor with zero weights
# (its head bias is [mean (A), raw log std (A)] for every observation), and a
# temperature held fixed (alpha_lr = 0) or stepped alone.

from roxie.agents import sac  # pylint: disable=g-import-not-at-top,g-bad-import-order
from roxie.networks import distributions  # pylint: disable=g-import-not-at-top,g-bad-import-order

SAC_MEAN = np.array([0.5, -0.5], np.float32)
SAC_RAW_LOG_STD = np.zeros((A,), np.float32)  # log std -1.5 in (-5, 2).


def _sac(**overrides):
  config = sac.Config(**dict(dict(
      hidden_sizes=(H,), layer_norm=False, batch_size=N, actor_lr=1e-2,
      critic_lr=5e-2, alpha_lr=1e-2), **overrides))
  return _build(sac, config, 'sac', overrides)


def _sac_actor(template):
  return _constant_actor(template, np.concatenate([SAC_MEAN,
                                                   SAC_RAW_LOG_STD]))


def _sac_head_bias(actor_params):
  return [np.asarray(leaf) for path, leaf in
          jax.tree_util.tree_flatten_with_path(actor_params)[0]
          if 'head' in jax.tree_util.keystr(path)
          and jax.tree_util.keystr(path).endswith("['b']")][0]


def _sac_mean_log_prob(num_samples=400_000):
  """E[log pi(a|s)] of the hand-set actor, by sampling its distribution."""
  log_std = -5. + 0.5 * 7. * (np.tanh(SAC_RAW_LOG_STD) + 1.)
  dist = distributions.TanhGaussian(
      mean=jnp.broadcast_to(SAC_MEAN, (num_samples, A)),
      log_std=jnp.broadcast_to(jnp.asarray(log_std, jnp.float32),
                               (num_samples, A)))
  _, log_prob = dist.sample_and_log_prob(jax.random.PRNGKey(123))
  return float(jnp.mean(log_prob))


@pytest.mark.parametrize('alpha', [0.05, 2.])
def test_sac_critic_learns_the_soft_target_of_the_frozen_twin_critics(alpha):
  # Q1' = 1, Q2' = 3 s0 (6 at next_obs): the soft target's mean is
  # r + discount * (min(Q1', Q2') - alpha * E[log pi(a'|s')]). The max of
  # the twins (6), the online critic, or obs (Q2' = -6) land elsewhere.
  recipe, state, _, run = _sac(tau=0., actor_lr=0., alpha_lr=0.,
                               init_alpha=alpha)
  del recipe
  state = state._replace(
      actor=_sac_actor(state.actor), critic=_zeros(state.critic),
      target_critic=_set_critic(state.target_critic,
                                [_q_linear(1., {}), _q_linear(0., {0: 3.})]))
  batch = _batch(REWARD, DISCOUNT)
  keys = jax.random.split(jax.random.PRNGKey(1), 500)
  _, metrics = run(state, batch, keys)
  q = np.asarray(metrics['q'][-100:]).mean()
  np.testing.assert_allclose(np.asarray(metrics['alpha']), alpha, rtol=1e-6)
  expected = _expected_mean_target(1. - alpha * _sac_mean_log_prob())
  np.testing.assert_allclose(q, expected, atol=0.03)


def test_sac_actor_climbs_the_minimum_of_the_twin_critics():
  # Q1 = a_0, Q2 = -a_0: where a_0 > 0 (mean 0.5, std 0.22) the minimum is
  # Q2, so the actor's mean for a_0 falls by one Adam step (lr); the max, or
  # Q1 alone, would raise it. The temperature is ~0 so the entropy term
  # cannot decide the sign.
  recipe, state, update, _ = _sac(critic_lr=0., alpha_lr=0., init_alpha=1e-6)
  state = state._replace(
      actor=_sac_actor(state.actor),
      critic=_set_critic(state.critic, [_q_linear(0., {O: 1.}),
                                        _q_linear(0., {O: -1.})]))
  new, _ = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(2))
  lr = recipe.config.actor_lr
  np.testing.assert_allclose(_sac_head_bias(new.actor)[0], SAC_MEAN[0] - lr,
                             rtol=1e-4)


def test_sac_actor_raises_its_entropy_against_a_flat_critic():
  # A constant critic leaves only alpha * log pi in the actor loss: every
  # raw log std rises by one Adam step, and the means move towards 0 (tanh's
  # squashing concentrates density away from 0).
  recipe, state, update, _ = _sac(critic_lr=0., alpha_lr=0., init_alpha=1.)
  state = state._replace(actor=_sac_actor(state.actor),
                         critic=_zeros(state.critic))
  new, _ = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(2))
  lr = recipe.config.actor_lr
  np.testing.assert_allclose(
      _sac_head_bias(new.actor),
      np.concatenate([SAC_MEAN - lr * np.sign(SAC_MEAN),
                      SAC_RAW_LOG_STD + lr]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('offset,direction', [(0.8, 1.), (-0.8, -1.)])
def test_sac_temperature_steps_towards_the_entropy_target(offset, direction):
  # The hand-set policy's entropy is H = -E[log pi] ~ -0.64. Below a target
  # of H + 0.8 alpha must rise, above H - 0.8 it must fall, by one Adam
  # step. (A loss that took +log pi for the entropy, 0.64, would sit above
  # H + 0.8 and lower alpha.)
  entropy = -_sac_mean_log_prob()
  assert 0.5 < abs(entropy) < 1.
  recipe, state, update, _ = _sac(critic_lr=0., actor_lr=0.,
                                  target_entropy=float(entropy + offset))
  state = state._replace(actor=_sac_actor(state.actor))
  new, metrics = update(state, _batch(REWARD, DISCOUNT),
                        jax.random.PRNGKey(2))
  np.testing.assert_allclose(
      float(new.log_alpha),
      float(state.log_alpha) + direction * recipe.config.alpha_lr, rtol=1e-5)
  np.testing.assert_allclose(float(metrics['alpha']),
                             np.exp(float(state.log_alpha)), rtol=1e-6)


def test_sac_target_critic_moves_by_tau_on_every_leaf():
  tau = 0.25
  _, state, update, _ = _sac(tau=tau)
  state = state._replace(
      target_critic=_perturbed(state.critic, jax.random.PRNGKey(4)))
  new, _ = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(5))
  for o, t_old, t_new in zip(jax.tree.leaves(new.critic),
                             jax.tree.leaves(state.target_critic),
                             jax.tree.leaves(new.target_critic)):
    np.testing.assert_allclose(t_new, tau * o + (1. - tau) * t_old,
                               atol=1e-6)
    assert not np.allclose(t_new, t_old)


# MPO: a Gaussian policy with zero weights (head bias [mean (A), raw log std
# (A)], log std soft-bounded into (-5, 3.6)), the hand-set critics (MPO's
# critic uses ELU, which is the identity on the positive inputs `_q_linear`
# feeds it), and one Adam step per dual.

from roxie.agents import mpo  # pylint: disable=g-import-not-at-top,g-bad-import-order



def _mpo(**overrides):
  config = mpo.Config(**dict(dict(
      hidden_sizes=(H,), layer_norm=False, batch_size=N, num_samples=8,
      policy_lr=1e-2, critic_lr=5e-2, dual_lr=1e-2,
      action_penalty_epsilon=0.), **overrides))
  return _build(mpo, config, 'mpo', overrides)


def _gaussian_policy(template, mean, raw_log_std):
  return _constant_actor(template, np.concatenate(
      [np.asarray(mean, np.float32),
       np.broadcast_to(np.float32(raw_log_std), (A,))]))


def _mean_clipped_normal(mean, std, num_samples=1_000_000):
  """E[clip(mean + std * z, -1, 1)], by sampling."""
  z = np.random.default_rng(0).standard_normal(num_samples)
  return float(np.mean(np.clip(mean + std * z, -1., 1.)))


def test_mpo_critic_learns_the_target_critic_under_the_target_policy():
  # Q' = 1 + 3 s0 + 2 a_0, scored on the clipped samples of the target
  # policy (mean 0.3, std 0.5): the TD target's mean is
  # r + discount * (7 + 2 E[clip(a_0)]). The online policy's samples (mean
  # -0.3), the max over samples, or obs (Q' = -5 + ...) land elsewhere.
  raw = 0.  # log std -5 + 4.3 (tanh(0) + 1) = -0.7.
  std = float(np.exp(-5. + 0.5 * 8.6 * (np.tanh(raw) + 1.)))
  _, state, _, run = _mpo(tau=0., policy_lr=0., dual_lr=0.)
  state = state._replace(
      critic=_zeros(state.critic),
      policy=_gaussian_policy(state.policy, [-0.3, 0.], raw),
      target_policy=_gaussian_policy(state.policy, [0.3, 0.], raw),
      target_critic=_set_critic(state.target_critic,
                                [_q_linear(1., {0: 3., O: 2.})]))
  keys = jax.random.split(jax.random.PRNGKey(1), 400)
  _, metrics = run(state, _batch(REWARD, DISCOUNT), keys)
  q = np.asarray(metrics['q'][-100:]).mean()
  np.testing.assert_allclose(np.asarray(metrics['std'][-1]), std, rtol=1e-4)
  expected = _expected_mean_target(7. + 2. * _mean_clipped_normal(0.3, std))
  np.testing.assert_allclose(q, expected, atol=0.03)


def _mpo_dual_step(target_mean, online_mean, critic_heads, **overrides):
  recipe, state, update, _ = _mpo(tau=0., critic_lr=0., **overrides)
  state = state._replace(
      policy=_gaussian_policy(state.policy, online_mean, 0.),
      target_policy=_gaussian_policy(state.policy, target_mean, 0.),
      target_critic=(_zeros(state.target_critic) if critic_heads is None else
                     _set_critic(state.target_critic, critic_heads)))
  new, metrics = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(3))
  lr = recipe.config.dual_lr
  step = jax.tree.map(lambda a, b: np.asarray(a - b) / lr, new.duals,
                      state.duals)
  return step, metrics, (state, new)


def test_mpo_temperature_dual_steps_towards_the_kl_bound():
  # A flat critic gives uniform E-step weights (KL 0 < epsilon): the
  # temperature falls by one Adam step; a steep one (Q = 100 a_0) puts the
  # weights on the best of 8 samples (KL ~ log 8 > epsilon): it rises.
  step, metrics, _ = _mpo_dual_step([0., 0.], [0., 0.], None)
  np.testing.assert_allclose(step.log_temperature, -1., rtol=1e-4)
  np.testing.assert_allclose(metrics['kl_e_step'], 0., atol=1e-5)
  step, metrics, _ = _mpo_dual_step([0., 0.], [0., 0.],
                                    [_q_linear(0., {O: 100.})])
  np.testing.assert_allclose(step.log_temperature, 1., rtol=1e-4)
  assert float(metrics['kl_e_step']) > 1.


def test_mpo_m_step_duals_step_towards_their_kl_bounds():
  # Online policy == target policy: both KLs are 0, below their bounds, so
  # every alpha falls by one Adam step. Online mean moved away from the
  # target (same std): alpha_mean rises (per dimension), alpha_std falls.
  # KL_std is 0 in both cases: alpha_std's gradient is positive'(raw) *
  # epsilon_std, ~1e-5 under softplus, small enough that Adam's eps (1e-8)
  # shortens its first step by ~1e-3: the expected step says so exactly.
  step, _, (state, _) = _mpo_dual_step([0., 0.], [0., 0.], None)
  c = mpo.Config()
  positive = mpo._DUAL_TRANSFORMS[c.dual_transform][0]  # pylint: disable=protected-access
  grad = np.asarray(jax.vmap(jax.grad(positive))(state.duals.log_alpha_std))
  grad = grad * c.epsilon_std
  std_step = -grad / (grad + 1e-8)
  np.testing.assert_allclose(step.log_alpha_mean, [-1., -1.], rtol=1e-4)
  np.testing.assert_allclose(step.log_alpha_std, std_step, rtol=1e-4)
  step, metrics, _ = _mpo_dual_step([0., 0.], [0.5, -0.5], None)
  np.testing.assert_allclose(step.log_alpha_mean, [1., 1.], rtol=1e-4)
  np.testing.assert_allclose(step.log_alpha_std, std_step, rtol=1e-4)
  assert float(metrics['kl_mean']) > 0.


def test_mpo_policy_moves_towards_the_e_step_weights():
  # Q' = 10 a_0: the E-step weights favour samples with large a_0, so the
  # weighted maximum likelihood raises the mean of a_0 by one Adam step
  # (softmax(-Q) would lower it). Online == target, so the KL penalties
  # have zero gradient here.
  recipe, state, update, _ = _mpo(tau=0., critic_lr=0., dual_lr=0.)
  state = state._replace(
      policy=_gaussian_policy(state.policy, [0., 0.], 0.),
      target_policy=_gaussian_policy(state.policy, [0., 0.], 0.),
      target_critic=_set_critic(state.target_critic,
                                [_q_linear(0., {O: 10.})]))
  new, _ = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(3))
  np.testing.assert_allclose(_sac_head_bias(new.policy)[0],
                             recipe.config.policy_lr, rtol=1e-4)


def test_mpo_hard_target_copies_every_period():
  _, state, update, _ = _mpo(target_update_period=3)
  state = state._replace(
      target_policy=_perturbed(state.policy, jax.random.PRNGKey(3)),
      target_critic=_perturbed(state.critic, jax.random.PRNGKey(4)))
  batch = _batch(REWARD, DISCOUNT)
  for i in range(6):
    new, _ = update(state, batch, jax.random.PRNGKey(20 + i))
    for field in ('policy', 'critic'):
      target, old_target = (getattr(new, 'target_' + field),
                            getattr(state, 'target_' + field))
      expected = getattr(new, field) if i in (2, 5) else old_target
      for x, y in zip(jax.tree.leaves(target), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(x, y, err_msg=f'update {i} {field}')
    state = new


def test_mpo_polyak_targets_move_by_tau_on_every_leaf():
  tau = 0.25
  _, state, update, _ = _mpo(tau=tau)
  state = state._replace(
      target_policy=_perturbed(state.policy, jax.random.PRNGKey(3)),
      target_critic=_perturbed(state.critic, jax.random.PRNGKey(4)))
  new, _ = update(state, _batch(REWARD, DISCOUNT), jax.random.PRNGKey(5))
  for field in ('policy', 'critic'):
    for o, t_old, t_new in zip(jax.tree.leaves(getattr(new, field)),
                               jax.tree.leaves(getattr(state,
                                                       'target_' + field)),
                               jax.tree.leaves(getattr(new,
                                                       'target_' + field))):
      np.testing.assert_allclose(t_new, tau * o + (1. - tau) * t_old,
                                 atol=1e-6)
      assert not np.allclose(t_new, t_old)


# PPO: advantages from `ppo.rollout_advantages` against a NumPy GAE, and the
# update on rollouts made by the recipe's own `act` (so stored
# log-probabilities are the current policy's), with one epoch of one
# minibatch, a constant learning rate and no gradient clipping: the first
# step of Adam's direction moves each parameter by lr * sign(gradient).

from roxie.agents import ppo  # pylint: disable=g-import-not-at-top,g-bad-import-order

T, B = 4, 8


def _np_gae(reward, terminated, truncated, value, value_next, gamma, lam):
  """[T, B] GAE(lambda) and returns, cut at episode ends, in plain NumPy."""
  adv = np.zeros_like(reward)
  following = np.zeros_like(reward[0])
  for t in reversed(range(reward.shape[0])):
    discount = gamma * (1. - terminated[t])
    delta = reward[t] + discount * value_next[t] - value[t]
    ended = np.logical_or(terminated[t], truncated[t])
    following = delta + np.where(ended, 0., discount * lam * following)
    adv[t] = following
  return adv, adv + value


def _rollout(key, reward_fn, *, terminated=None, truncated=None, state=None,
             recipe=None):
  """A [T, B] rollout; with a recipe, acted by its `act` from `state`."""
  k_obs, k_final, k_last, k_act = jax.random.split(key, 4)
  obs = jax.random.normal(k_obs, (T, B, O))
  zeros = jnp.zeros((T, B), bool)
  if recipe is None:
    action = jnp.zeros((T, B, A))
    extras = {'value': jax.random.normal(k_act, (T, B))}
  else:
    action, extras = jax.vmap(
        lambda o, k: recipe.act(state, o, k, explore=True))(
            obs, jax.random.split(k_act, T))
  return Rollout(
      obs=obs, action=action, reward=reward_fn(extras),
      terminated=zeros if terminated is None else terminated,
      truncated=zeros if truncated is None else truncated,
      final_obs=jax.random.normal(k_final, (T, B, O)), extras=extras,
      last_obs=jax.random.normal(k_last, (B, O)))


def test_ppo_advantages_bootstrap_from_final_obs_and_stop_at_ends():
  terminated = np.zeros((T, B), bool)
  truncated = np.zeros((T, B), bool)
  terminated[1, :3] = True
  truncated[2, 3:6] = True
  truncated[0, 7] = terminated[3, 7] = True
  rollout = _rollout(jax.random.PRNGKey(0),
                     lambda e: jnp.arange(T * B, dtype=jnp.float32).reshape(
                         T, B) / 10., terminated=jnp.asarray(terminated),
                     truncated=jnp.asarray(truncated))
  value_fn = lambda o: 2. * o[..., 0] - o[..., 1]
  gae = jax.jit(lambda r: ppo.rollout_advantages(
      r, value_fn, discount=0.9, lambda_=0.8))(rollout)
  r = jax.tree.map(np.asarray, rollout)
  adv, ret = _np_gae(r.reward, terminated, truncated, r.extras['value'],
                     np.asarray(value_fn(r.final_obs)), 0.9, 0.8)
  np.testing.assert_allclose(gae.advantages, adv, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(gae.returns, ret, rtol=1e-5, atol=1e-5)


def _ppo(**overrides):
  key = ('ppo', tuple(sorted(overrides.items())))
  if key not in _RECIPES:
    config = ppo.Config(**dict(dict(
        rollout_length=T, hidden_sizes=(H,), num_epochs=1,
        num_minibatches=1, target_kl=None, max_grad_norm=None,
        entropy_coef=0., learning_rate=1e-2, discount=0.,
        normalize_observations=False, normalize_advantages=False),
                                   **overrides))
    recipe = ppo.make(config, SPEC)
    state = recipe.init(jax.random.PRNGKey(0), SPEC)
    state = state._replace(
        actor=_constant_actor(state.actor, np.array([0.2, -0.1], np.float32)),
        critic=_zeros(state.critic))
    # _constant_actor zeroed the state-independent log std too: set it.
    state = state._replace(actor=jax.tree_util.tree_map_with_path(
        lambda p, x: (jnp.full_like(x, -0.5)
                      if 'log_std' in jax.tree_util.keystr(p) else x),
        state.actor))
    _RECIPES[key] = (recipe, state, jax.jit(recipe.update), None)
  return _RECIPES[key]


def _ppo_mean_bias(actor_params):
  return _sac_head_bias(actor_params)


def test_ppo_policy_climbs_the_advantage():
  # discount 0 and a zero value network: the advantage is the reward,
  # which grows with the sampled a_0, so the mean of a_0 rises by lr.
  recipe, state, update, _ = _ppo()
  rollout = _rollout(jax.random.PRNGKey(1),
                     lambda e: e['raw_action'][..., 0], state=state,
                     recipe=recipe)
  new, metrics = update(state, rollout, jax.random.PRNGKey(2))
  np.testing.assert_allclose(_ppo_mean_bias(new.actor)[0],
                             0.2 + recipe.config.learning_rate, rtol=1e-4)
  np.testing.assert_allclose(metrics['approx_kl'], 0., atol=1e-6)


def test_ppo_clipped_ratio_stops_the_policy_gradient():
  # Positive advantages and a ratio of e > 1 + epsilon everywhere: the
  # clipped surrogate is flat, so the actor does not move. With ratio 1 it
  # does.
  recipe, state, update, _ = _ppo()
  rollout = _rollout(jax.random.PRNGKey(1),
                     lambda e: 5. + e['raw_action'][..., 0], state=state,
                     recipe=recipe)
  assert np.all(rollout.reward > 0.)
  moved, _ = update(state, rollout, jax.random.PRNGKey(2))
  assert not np.allclose(_ppo_mean_bias(moved.actor),
                         _ppo_mean_bias(state.actor))
  stale = rollout._replace(extras=dict(
      rollout.extras, log_prob=rollout.extras['log_prob'] - 1.))
  new, metrics = update(state, stale, jax.random.PRNGKey(2))
  for x, y in zip(jax.tree.leaves(new.actor), jax.tree.leaves(state.actor)):
    np.testing.assert_array_equal(x, y)
  np.testing.assert_allclose(metrics['clip_fraction'], 1.)
  del recipe


@pytest.mark.parametrize('normalize', [True, False])
def test_ppo_advantage_normalisation_ignores_a_reward_offset(normalize):
  recipe, state, update, _ = _ppo(normalize_advantages=normalize)
  rollout = _rollout(jax.random.PRNGKey(1),
                     lambda e: e['raw_action'][..., 0], state=state,
                     recipe=recipe)
  a, _ = update(state, rollout, jax.random.PRNGKey(2))
  b, _ = update(state, rollout._replace(reward=rollout.reward - 5.),
                jax.random.PRNGKey(2))
  same = all(np.allclose(x, y, atol=1e-6) for x, y in
             zip(jax.tree.leaves(a.actor), jax.tree.leaves(b.actor)))
  # Standardised advantages make the update blind to the offset; raw ones
  # turn it into a push towards less likely actions.
  assert same == normalize
  del recipe


def test_ppo_value_network_fits_the_gae_returns():
  # Zero weights: the value network is its output bias, which many epochs
  # fit to the mean of the returns computed with the value of the state
  # before the update (2 everywhere), truncation bootstrapping included.
  recipe, state, update, _ = _ppo(num_epochs=300, discount=0.9,
                                  gae_lambda=0.8, learning_rate=2e-2)
  state = state._replace(critic=jax.tree_util.tree_map_with_path(
      lambda p, x: (jnp.full_like(x, 2.) if 'head' in jax.tree_util.keystr(p)
                    and jax.tree_util.keystr(p).endswith("['b']") else x),
      state.critic))
  terminated = np.zeros((T, B), bool)
  truncated = np.zeros((T, B), bool)
  terminated[1, :3] = True
  truncated[2, 3:6] = True
  rollout = _rollout(jax.random.PRNGKey(1),
                     lambda e: 1. + e['raw_action'][..., 0], state=state,
                     recipe=recipe, terminated=jnp.asarray(terminated),
                     truncated=jnp.asarray(truncated))
  np.testing.assert_allclose(rollout.extras['value'], 2., rtol=1e-6)
  new, _ = update(state, rollout, jax.random.PRNGKey(2))
  _, returns = _np_gae(np.asarray(rollout.reward), terminated, truncated,
                       np.full((T, B), 2.), np.full((T, B), 2.), 0.9, 0.8)
  _, extras = recipe.act(new, rollout.obs[0], jax.random.PRNGKey(0),
                         explore=False)
  np.testing.assert_allclose(extras['value'], returns.mean(), atol=0.02)


def test_ppo_observation_statistics_fold_in_the_rollout():
  recipe, state, update, _ = _ppo(normalize_observations=True)
  rollout = _rollout(jax.random.PRNGKey(1), lambda e: e['raw_action'][..., 0],
                     state=state, recipe=recipe)
  new, _ = update(state, rollout, jax.random.PRNGKey(2))
  obs = np.asarray(rollout.obs).reshape(-1, O)
  np.testing.assert_allclose(new.obs_stats.mean, obs.mean(0), atol=1e-5)
  np.testing.assert_allclose(new.obs_stats.var, obs.var(0), rtol=1e-4)
  del recipe
