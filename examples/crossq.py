"""CrossQ in a page: SAC without target networks, with batch-renormed critics.

"CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater
Sample Efficiency and Simplicity", Bhatt et al., ICLR 2024
(https://arxiv.org/abs/1902.05605). How it differs from SAC (roxie.agents.sac):

- no target networks: the TD target bootstraps from the online critics;
- the critics are batch-renormalised MLPs (`networks.TwinQCritic` with
  `batch_renorm`; the running statistics are the state `critic_stats`, moved
  by each critic step);
- one critic forward pass over the joint batch [(s, a); (s', a')], so the
  normalisation statistics cover both halves (stable bootstrapping without a
  target network); the (s', a') half is the target and gets no gradient;
- the actor and the temperature learn every `policy_delay`-th critic step,
  against the critics in evaluation mode (running statistics), with
  Adam(b1=0.5) and learning rates of 1e-3.

Not the paper's: the critic width (512 here for a CPU; the paper's 2048 is
`--set critic_hidden_sizes=2048,2048`) and the actor, a plain MLP here where
the paper normalises it too. Flat observations only; `tau` is unused.

    roxie train --agent examples/crossq.py:make --task CartpoleSwingup
"""

import dataclasses
from typing import NamedTuple, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import losses, networks, optim
from roxie.agents import off_policy, sac
from roxie.types import EnvSpec, Policy, Recipe, check_spec


@dataclasses.dataclass(frozen=True)
class Config(sac.Config):
  actor_lr: float = 1e-3
  critic_lr: float = 1e-3
  alpha_lr: float = 1e-3
  adam_b1: float = 0.5
  layer_norm: bool = False  # The actor's.
  critic_hidden_sizes: Tuple[int, ...] = (512, 512)
  policy_delay: int = 3  # Critic steps per actor and temperature step.
  renorm_momentum: float = 0.99
  renorm_r_max: float = 3.
  renorm_d_max: float = 5.
  renorm_warmup_steps: int = 100_000  # Critic steps of plain batch norm.


class State(NamedTuple):
  actor: hk.Params
  critic: hk.Params  # Both critics stacked on a leading axis.
  critic_stats: hk.State  # Their BatchRenorm running statistics, [2, ...].
  log_alpha: jnp.ndarray
  actor_opt: optax.OptState
  critic_opt: optax.OptState
  alpha_opt: optax.OptState
  steps: jnp.ndarray  # [] int32 critic steps made.


def critic_loss(critic, params, stats, batch, next_action, next_log_prob,
                alpha):
  """CrossQ's critic loss: one pass over [(s, a); (s', a')], no target net.

  Returns (loss, (q [2, N] at (s, a), the critics' new running statistics)).
  """
  n = batch.action.shape[0]
  q_all, stats = critic.apply(
      params, stats, jnp.concatenate([batch.obs, batch.next_obs]),
      jnp.concatenate([batch.action, next_action]), True)  # [2, 2N]
  q, q_next = q_all[:, :n], jax.lax.stop_gradient(q_all[:, n:])
  target = jax.vmap(lambda r, d, qn, lp: losses.sac_critic_target(
      r, d, qn, lp, alpha=alpha))(batch.reward, batch.discount,
                                  losses.clipped_double_q(*q_next),
                                  next_log_prob)
  return 0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0)), (q, stats)


def critic_network(c: Config, spec: EnvSpec) -> hk.TransformedWithState:
  """The twin batch-renormed critics: (obs, action, is_training) -> [2, N]."""
  renorm = dict(momentum=c.renorm_momentum, r_max=c.renorm_r_max,
                d_max=c.renorm_d_max, warmup_steps=c.renorm_warmup_steps)
  return hk.without_apply_rng(hk.transform_with_state(
      lambda o, a, is_training: networks.TwinQCritic(
          hidden_sizes=c.critic_hidden_sizes, obs_size=spec.obs_size,
          action_size=spec.action_size, batch_renorm=renorm)(o, a,
                                                             is_training)))


def make(config: Config, spec: EnvSpec) -> Recipe:
  c = config
  if spec.obs_shapes is not None:
    raise ValueError('examples/crossq.py takes flat observations only.')
  clip = [optax.clip_by_global_norm(c.max_grad_norm)] if c.max_grad_norm else []
  adam = lambda lr: optax.chain(*clip, optax.adam(lr, b1=c.adam_b1))
  actor_opt, critic_opt, alpha_opt = (adam(c.actor_lr), adam(c.critic_lr),
                                      adam(c.alpha_lr))
  actor = hk.without_apply_rng(hk.transform(lambda o: networks.TanhGaussianActor(
      action_size=spec.action_size, hidden_sizes=c.hidden_sizes,
      layer_norm=c.layer_norm, obs_size=spec.obs_size)(o)))
  critic = critic_network(c, spec)
  target_entropy = (c.target_entropy if c.target_entropy is not None
                    else -float(spec.action_size))

  def init(key, env_spec: EnvSpec) -> State:
    check_spec(spec, env_spec)
    k_actor, k_critic = jax.random.split(key)
    obs, a = jnp.zeros((1, spec.obs_size)), jnp.zeros((1, spec.action_size))
    critic_params, stats = critic.init(k_critic, obs, a, True)
    actor_params = actor.init(k_actor, obs)
    log_alpha = jnp.asarray(jnp.log(c.init_alpha), jnp.float32)
    return State(actor_params, critic_params, stats, log_alpha,
                 actor_opt.init(actor_params), critic_opt.init(critic_params),
                 alpha_opt.init(log_alpha), jnp.zeros((), jnp.int32))

  def act(state: State, obs, key, *, explore: bool = True):
    dist = actor.apply(state.actor, obs)
    return (dist.sample(key) if explore else dist.mode()), {}

  def update(state: State, batch, key):
    alpha = jnp.exp(state.log_alpha)
    k_next, k_pi = jax.random.split(key)
    next_a, next_logp = actor.apply(
        state.actor, batch.next_obs).sample_and_log_prob(k_next)
    (c_loss, (q, stats)), grads = jax.value_and_grad(
        critic_loss, argnums=1, has_aux=True)(
            critic, state.critic, state.critic_stats, batch, next_a,
            next_logp, alpha)
    critic_params, critic_opt_state = optim.step(
        critic_opt, state.critic, state.critic_opt, grads)
    learn_actor = state.steps % c.policy_delay == 0
    state = state._replace(critic=critic_params, critic_stats=stats,
                           critic_opt=critic_opt_state, steps=state.steps + 1)

    def actor_and_temperature(s: State):
      def actor_loss(params):
        a, logp = actor.apply(params, batch.obs).sample_and_log_prob(k_pi)
        q_pi, _ = critic.apply(s.critic, s.critic_stats, batch.obs, a, False)
        return jnp.mean(jax.vmap(lambda qv, lp: losses.sac_actor_loss(
            qv, lp, alpha=alpha))(losses.clipped_double_q(*q_pi), logp)), logp

      (a_loss, logp), grads = jax.value_and_grad(actor_loss, has_aux=True)(
          s.actor)
      actor_params, actor_opt_state = optim.step(actor_opt, s.actor,
                                                 s.actor_opt, grads)
      al_loss, grad = jax.value_and_grad(lambda la: jnp.mean(jax.vmap(
          lambda lp: losses.sac_temperature_loss(
              la, lp, target_entropy=target_entropy))(logp)))(s.log_alpha)
      log_alpha, alpha_opt_state = optim.step(alpha_opt, s.log_alpha,
                                              s.alpha_opt, grad)
      # Scaled so that their mean over consecutive updates is the mean of
      # the actor steps among them.
      return s._replace(actor=actor_params, actor_opt=actor_opt_state,
                        log_alpha=log_alpha, alpha_opt=alpha_opt_state), (
                            c.policy_delay * a_loss, c.policy_delay * al_loss,
                            -c.policy_delay * jnp.mean(logp))

    state, (a_loss, al_loss, entropy) = jax.lax.cond(
        learn_actor, actor_and_temperature,
        lambda s: (s, (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()))), state)
    return state, {'critic_loss': c_loss, 'actor_loss': a_loss,
                   'alpha_loss': al_loss, 'alpha': alpha, 'q': jnp.mean(q),
                   'entropy': entropy}

  return off_policy.replay_recipe(
      'crossq', c, init, act, update,
      Policy(params=lambda s: {'actor': s.actor},
             apply=lambda p, o: actor.apply(p['actor'], o).mode()))
