"""SAC: soft actor-critic with twin critics and a learned temperature.

"Soft Actor-Critic Algorithms and Applications", Haarnoja et al., 2018
(https://arxiv.org/abs/1812.05905).

The whole agent is the three functions at the bottom of `make`: `init`,
`act` and `update`; everything else is a roxie primitive.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import losses, networks
from roxie.types import EnvSpec, Recipe, ReplaySpec, Transition, check_spec


@dataclasses.dataclass(frozen=True)
class Config:
  """SAC hyperparameters; the defaults suit a 2-core CPU."""
  # Collection and schedule.
  num_envs: int = 8
  total_steps: int = 150_000
  steps_per_iteration: int = 1  # Env steps per env between update bursts.
  updates_per_iteration: int = 4  # Gradient steps per burst.
  warmup_steps: int = 5_000  # Uniform random actions first.
  # Replay and targets.
  replay_capacity: int = 500_000
  batch_size: int = 256
  n_step: int = 1
  discount: float = 0.99
  tau: float = 0.005
  # Networks and optimisation.
  hidden_sizes: Tuple[int, ...] = (256, 256)
  layer_norm: bool = True
  actor_lr: float = 3e-4
  critic_lr: float = 3e-4
  alpha_lr: float = 3e-4
  max_grad_norm: Optional[float] = None
  init_alpha: float = 0.1
  target_entropy: Optional[float] = None  # Default: -action_size.
  # Control steps per decision (rewards summed; returns and env step counts
  # still count every control step), the DeepMind Control benchmarks'
  # device (PlaNet, DrQ). 4 makes `roxie train` reach CartpoleSwingup >= 800
  # on 2 CPU cores in minutes; 1 is the suite's own decision rate.
  action_repeat: int = 4


class State(NamedTuple):
  actor: hk.Params
  critic: hk.Params
  target_critic: hk.Params
  log_alpha: jnp.ndarray
  actor_opt: optax.OptState
  critic_opt: optax.OptState
  alpha_opt: optax.OptState
  steps: jnp.ndarray  # [] int32 updates made.


def _optimizer(lr: float, max_grad_norm: Optional[float]):
  adam = optax.adam(lr)
  return adam if max_grad_norm is None else optax.chain(
      optax.clip_by_global_norm(max_grad_norm), adam)


def _actor_network(c: Config, spec: EnvSpec) -> hk.Transformed:
  return hk.without_apply_rng(hk.transform(
      lambda o: networks.TanhGaussianActor(
          action_size=spec.action_size, hidden_sizes=c.hidden_sizes,
          layer_norm=c.layer_norm, obs_size=spec.obs_size)(o)))


def policy_params(state: State) -> hk.Params:
  """What acting needs from a trained state (for exported policies)."""
  return {'actor': state.actor}


def make_policy(config: Config, spec: EnvSpec):
  """The deterministic policy alone: `policy(params, obs) -> action`.

  Builds only the actor network (no critic, no optimiser), for exported
  bundles (`roxie.load_policy`). `params` is `policy_params(state)`; the
  action is the one `act(state, obs, key, explore=False)` takes.
  """
  actor = _actor_network(config, spec)
  return lambda params, obs: actor.apply(params['actor'], obs).mode()


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the SAC recipe for environments of `spec`."""
  c = config
  actor_opt = _optimizer(c.actor_lr, c.max_grad_norm)
  critic_opt = _optimizer(c.critic_lr, c.max_grad_norm)
  alpha_opt = optax.adam(c.alpha_lr)

  actor = _actor_network(c, spec)
  critic = hk.without_apply_rng(hk.transform(
      lambda o, a: networks.TwinQCritic(
          hidden_sizes=c.hidden_sizes, layer_norm=c.layer_norm,
          obs_size=spec.obs_size, action_size=spec.action_size)(o, a)))
  target_entropy = (c.target_entropy if c.target_entropy is not None
                    else -float(spec.action_size))

  def init(key, env_spec: EnvSpec) -> State:
    check_spec(spec, env_spec)
    k1, k2 = jax.random.split(key)
    obs = jnp.zeros((1, spec.obs_size))
    act = jnp.zeros((1, spec.action_size))
    actor_params = actor.init(k1, obs)
    critic_params = critic.init(k2, obs, act)
    log_alpha = jnp.asarray(jnp.log(c.init_alpha), jnp.float32)
    return State(actor=actor_params, critic=critic_params,
                 target_critic=critic_params, log_alpha=log_alpha,
                 actor_opt=actor_opt.init(actor_params),
                 critic_opt=critic_opt.init(critic_params),
                 alpha_opt=alpha_opt.init(log_alpha),
                 steps=jnp.zeros((), jnp.int32))

  def act(state: State, obs, key, *, explore: bool = True):
    dist = actor.apply(state.actor, obs)
    return (dist.sample(key) if explore else dist.mode()), {}

  def update(state: State, batch: Transition, key):
    k_next, k_pi = jax.random.split(key)
    alpha = jnp.exp(state.log_alpha)

    # Critic: soft TD target from the twin target critics' minimum.
    next_a, next_logp = actor.apply(state.actor, batch.next_obs
                                    ).sample_and_log_prob(k_next)
    q_next = jnp.min(critic.apply(state.target_critic, batch.next_obs, next_a), 0)
    target = jax.vmap(lambda r, d, q, lp: losses.sac_critic_target(
        r, d, q, lp, alpha=alpha))(batch.reward, batch.discount, q_next, next_logp)

    def critic_loss(params):
      q = critic.apply(params, batch.obs, batch.action)  # [2, N]
      return 0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0)), q

    (c_loss, q), grads = jax.value_and_grad(critic_loss, has_aux=True)(
        state.critic)
    updates, critic_opt_state = critic_opt.update(grads, state.critic_opt,
                                                  state.critic)
    critic_params = optax.apply_updates(state.critic, updates)

    # Actor: maximise the soft Q of its own reparameterised actions.
    def actor_loss(params):
      a, logp = actor.apply(params, batch.obs).sample_and_log_prob(k_pi)
      q_pi = jnp.min(critic.apply(critic_params, batch.obs, a), 0)
      loss = jax.vmap(lambda qv, lp: losses.sac_actor_loss(
          qv, lp, alpha=alpha))(q_pi, logp)
      return jnp.mean(loss), logp

    (a_loss, logp), grads = jax.value_and_grad(actor_loss, has_aux=True)(
        state.actor)
    updates, actor_opt_state = actor_opt.update(grads, state.actor_opt,
                                                state.actor)
    actor_params = optax.apply_updates(state.actor, updates)

    # Temperature: keep the policy's entropy near the target.
    def alpha_loss(log_alpha):
      return jnp.mean(jax.vmap(lambda lp: losses.sac_temperature_loss(
          log_alpha, lp, target_entropy=target_entropy))(logp))

    al_loss, grad = jax.value_and_grad(alpha_loss)(state.log_alpha)
    updates, alpha_opt_state = alpha_opt.update(grad, state.alpha_opt)
    log_alpha = optax.apply_updates(state.log_alpha, updates)

    new_state = State(
        actor=actor_params, critic=critic_params,
        target_critic=optax.incremental_update(critic_params,
                                               state.target_critic, c.tau),
        log_alpha=log_alpha, actor_opt=actor_opt_state,
        critic_opt=critic_opt_state, alpha_opt=alpha_opt_state,
        steps=state.steps + 1)
    metrics = {'critic_loss': c_loss, 'actor_loss': a_loss,
               'alpha_loss': al_loss, 'alpha': alpha, 'q': jnp.mean(q),
               'entropy': -jnp.mean(logp)}
    return new_state, metrics

  return Recipe(
      name='sac', config=c, init=init, act=act, update=update, on_policy=False,
      replay=ReplaySpec(capacity=c.replay_capacity, batch_size=c.batch_size,
                        n_step=c.n_step, discount=c.discount),
      steps_per_iteration=c.steps_per_iteration,
      updates_per_iteration=c.updates_per_iteration,
      warmup_steps=c.warmup_steps)
