"""PPO's flat-vector update against the per-leaf update it replaced.

`reference_update` is the update as it was written before the flat
optimiser: two optax optimisers over the actor's and the critic's parameter
trees, every data leaf gathered on its own. The recipe's update must compute
the same numbers (to float32 rounding: sums run in another order) from the
same state, rollouts and keys, over several updates, with and without
gradient clipping, the adaptive rate and value clipping.
`benchmarks/ppo_update.py` imports it as the "before" side.
"""

import functools

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import buffers, losses, networks
from roxie.agents import ppo
from roxie.types import EnvSpec, Rollout

SPEC = EnvSpec(task='Synthetic', obs_size=3, action_size=2,
               obs_names=(('x', 3),), control_timestep=0.01,
               episode_length=5)


def reference_update(c: ppo.Config, spec: EnvSpec):
  """PPO's update as written before the flat optimiser (per-leaf optax)."""
  actor_opt = ppo._optimizer(c.max_grad_norm)  # pylint: disable=protected-access
  critic_opt = ppo._optimizer(c.max_grad_norm)  # pylint: disable=protected-access
  actor = ppo._actor_network(c, spec)  # pylint: disable=protected-access
  critic = hk.without_apply_rng(hk.transform(
      lambda o: networks.ValueNetwork(
          hidden_sizes=c.hidden_sizes, layer_norm=c.layer_norm,
          obs_size=spec.obs_size, output_init_scale=1.)(o)))
  observe = functools.partial(ppo._observe, c)  # pylint: disable=protected-access

  def policy(params, stats, obs):
    dist = actor.apply(params, observe(stats, obs))
    return dist._replace(log_std=jnp.clip(dist.log_std, *c.log_std_range))

  def value(params, stats, obs):
    return critic.apply(params, observe(stats, obs))

  def update(state, rollout, key):
    gae = ppo.rollout_advantages(
        rollout, functools.partial(value, state.critic, state.obs_stats),
        discount=c.discount, lambda_=c.gae_lambda)
    obs_stats = (buffers.normalizer_update(state.obs_stats, rollout.obs)
                 if c.normalize_observations else state.obs_stats)
    total = rollout.reward.size
    flat = lambda x: x.reshape((total,) + x.shape[2:])
    data = {'obs': flat(rollout.obs),
            'raw_action': flat(rollout.extras['raw_action']),
            'log_prob': flat(rollout.extras['log_prob']),
            'value': flat(rollout.extras['value']),
            'advantage': flat(gae.advantages), 'return': flat(gae.returns)}

    def loss_fn(params, mb):
      actor_params, critic_params = params
      dist = policy(actor_params, obs_stats, mb['obs'])
      adv = mb['advantage']
      if c.normalize_advantages:
        adv = (adv - jnp.mean(adv)) / (jnp.std(adv) + 1e-8)
      surrogate = losses.ppo_policy_loss(
          dist.log_prob(mb['raw_action']), mb['log_prob'], adv,
          epsilon=c.clip_epsilon)
      entropy = jnp.mean(dist.entropy())
      v_loss = losses.ppo_value_loss(
          value(critic_params, obs_stats, mb['obs']), mb['value'],
          mb['return'], clip_epsilon=c.value_clip_epsilon)
      loss = surrogate.loss - c.entropy_coef * entropy + v_loss
      return loss, {'policy_loss': surrogate.loss, 'value_loss': v_loss,
                    'entropy': entropy, 'approx_kl': surrogate.approx_kl,
                    'clip_fraction': surrogate.clip_fraction}

    def minibatch_step(carry, mb):
      params, opt_states, lr = carry
      grads, metrics = jax.grad(loss_fn, has_aux=True)(params, mb)
      if c.target_kl is not None:
        kl = metrics['approx_kl']
        lr = jnp.where(kl > 2. * c.target_kl, lr / 1.5,
                       jnp.where(kl < 0.5 * c.target_kl, lr * 1.5, lr))
        lr = jnp.clip(lr, 1e-5, 1e-2)
      a_up, a_opt = actor_opt.update(grads[0], opt_states[0])
      c_up, c_opt = critic_opt.update(grads[1], opt_states[1])
      step = lambda p, u: jax.tree.map(lambda x, d: x - lr * d, p, u)
      params = (step(params[0], a_up), step(params[1], c_up))
      return (params, (a_opt, c_opt), lr), {**metrics, 'learning_rate': lr}

    def epoch(carry, k):
      return jax.lax.scan(minibatch_step, carry,
                          ppo.minibatches(k, data, c.num_minibatches))

    carry = ((state.actor, state.critic), (state.actor_opt, state.critic_opt),
             state.learning_rate)
    ((actor_params, critic_params), (a_opt, c_opt), lr), metrics = (
        jax.lax.scan(epoch, carry, jax.random.split(key, c.num_epochs)))
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics['std'] = jnp.mean(
        policy(actor_params, obs_stats, rollout.last_obs).stddev)
    metrics['value'] = jnp.mean(rollout.extras['value'])
    return ppo.State(actor=actor_params, critic=critic_params,
                     actor_opt=a_opt, critic_opt=c_opt, obs_stats=obs_stats,
                     learning_rate=lr, steps=state.steps + 1), metrics

  return update


def _rollout(recipe, state, key, *, t=8, b=4):
  """A [t, b] rollout acted by `recipe`, with episode ends and a reward
  that depends on the action (so the policy has a gradient)."""
  k_obs, k_final, k_act = jax.random.split(key, 3)
  obs = 2. * jax.random.normal(k_obs, (t, b, SPEC.obs_size)) + 1.
  actions, extras = jax.vmap(
      lambda o, k: recipe.act(state, o, k, explore=True))(
          obs, jax.random.split(k_act, t))
  terminated = np.zeros((t, b), bool)
  truncated = np.zeros((t, b), bool)
  terminated[2, 0] = True
  truncated[4, 1] = True
  return Rollout(obs=obs, action=actions,
                 reward=obs[..., 0] * actions[..., 0] - actions[..., 1] ** 2,
                 terminated=jnp.asarray(terminated),
                 truncated=jnp.asarray(truncated),
                 final_obs=3. * jax.random.normal(k_final, obs.shape),
                 extras=extras, last_obs=obs[-1] + 0.5)


CASES = {
    'defaults': dict(),
    # A small threshold, so the clip binds on every step.
    'tight_clip_no_kl': dict(max_grad_norm=0.05, target_kl=None),
    'no_clip_value_clip': dict(max_grad_norm=None, value_clip_epsilon=0.2,
                               normalize_observations=False,
                               normalize_advantages=False, entropy_coef=0.01),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_flat_update_equals_the_per_leaf_reference(case):
  config = ppo.Config(hidden_sizes=(16, 16), num_epochs=2, num_minibatches=4,
                      **CASES[case])
  recipe = ppo.make(config, SPEC)
  new_update = jax.jit(recipe.update)
  old_update = jax.jit(reference_update(config, SPEC))
  new = old = recipe.init(jax.random.PRNGKey(0), SPEC)
  for i in range(4):
    # Both act on the reference's state, so a difference cannot feed back
    # into the data.
    rollout = _rollout(recipe, old, jax.random.PRNGKey(10 + i))
    key = jax.random.PRNGKey(i)
    new, new_metrics = new_update(new, rollout, key)
    old, old_metrics = old_update(old, rollout, key)
  assert jax.tree.structure(new) == jax.tree.structure(old)
  moved = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(
      jax.tree.leaves(old.actor), jax.tree.leaves(
          recipe.init(jax.random.PRNGKey(0), SPEC).actor)))
  assert moved > 1e-3  # The updates really trained.
  for path, x, y in zip(
      [jax.tree_util.keystr(p) for p, _ in
       jax.tree_util.tree_flatten_with_path(new)[0]],
      jax.tree.leaves(new), jax.tree.leaves(old)):
    assert x.dtype == y.dtype and x.shape == y.shape, path
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=path)
  assert set(new_metrics) == set(old_metrics)
  for name in new_metrics:
    np.testing.assert_allclose(new_metrics[name], old_metrics[name],
                               rtol=1e-5, atol=1e-6, err_msg=name)
