"""A new agent in one small file: deterministic actor + twin critics + n-step.

Run it: `python examples/new_agent.py`. Everything below is a roxie primitive
except the ~20 lines of `update`; swap a loss or a network to make another
agent. The compiled loop, replay, environments and evaluation come for free.
"""

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import envs, losses, loops, networks
from roxie.types import Policy, Recipe, ReplaySpec


def _actor(spec):
  return hk.without_apply_rng(hk.transform(lambda o: networks.DeterministicActor(
      action_size=spec.action_size, hidden_sizes=(64, 64))(o).action))


def make(spec, *, lr=3e-4, tau=0.005, noise=0.2):
  actor = _actor(spec)
  critic = hk.without_apply_rng(hk.transform(lambda o, a: networks.TwinQCritic(
      hidden_sizes=(64, 64))(o, a)))
  opt = optax.adam(lr)

  def init(key, env_spec):
    o, a = jnp.zeros((1, spec.obs_size)), jnp.zeros((1, spec.action_size))
    p = {'actor': actor.init(key, o), 'critic': critic.init(key, o, a)}
    return {'params': p, 'target': p, 'opt': opt.init(p)}

  def act(state, obs, key, *, explore=True):
    a = actor.apply(state['params']['actor'], obs)
    eps = noise * jax.random.normal(key, a.shape) if explore else 0.0
    return jnp.clip(a + eps, -1.0, 1.0), {}

  def update(state, batch, key):
    tgt = state['target']
    q_next = critic.apply(tgt['critic'], batch.next_obs,
                          actor.apply(tgt['actor'], batch.next_obs))
    y = jax.vmap(losses.twin_q_target)(batch.reward, batch.discount,
                                       q_next[0], q_next[1])

    def loss(p):
      q = critic.apply(p['critic'], batch.obs, batch.action)
      q_pi = critic.apply(jax.lax.stop_gradient(p['critic']), batch.obs,
                          actor.apply(p['actor'], batch.obs))[0]
      return jnp.mean(jnp.square(q - y[None])) - jnp.mean(q_pi)

    value, grads = jax.value_and_grad(loss)(state['params'])
    updates, opt_state = opt.update(grads, state['opt'])
    params = optax.apply_updates(state['params'], updates)
    target = optax.incremental_update(params, tgt, tau)
    return {'params': params, 'target': target, 'opt': opt_state}, {'loss': value}

  # What export acts with: what acting needs from the state, and the
  # deterministic action (act(..., explore=False)) from it alone.
  policy = Policy(params=lambda state: {'actor': state['params']['actor']},
                  apply=lambda params, obs: actor.apply(params['actor'], obs))
  return Recipe(name='twin_ddpg', config=None, init=init, act=act,
                update=update, on_policy=False,
                replay=ReplaySpec(capacity=100_000, batch_size=128, n_step=3,
                                  discount=0.99),
                steps_per_iteration=1, updates_per_iteration=2,
                warmup_steps=1_000, policy=policy)


if __name__ == '__main__':
  env = envs.make('CartpoleBalance', num_envs=8, episode_length=200)
  recipe = make(env.spec)
  init, run = loops.make_compiled_loop(recipe, env, iterations=250)
  evaluate = loops.make_evaluator(recipe, envs.make('CartpoleBalance', num_envs=4,
                                                    episode_length=200))
  state = init(jax.random.PRNGKey(0))
  for i in range(5):
    state, out = run(state)
    print(f'{(i + 1) * 2000} steps: eval return '
          f'{float(evaluate(state.agent, jax.random.PRNGKey(i)).mean):.1f}')
