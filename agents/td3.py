"""TD3: twin delayed deep deterministic policy gradient.

"Addressing Function Approximation Error in Actor-Critic Methods", Fujimoto
et al., 2018 (https://arxiv.org/abs/1802.09477).

DDPG with three fixes against overestimation: two critics whose minimum forms
the target (clipped double Q), clipped Gaussian noise on the target action
(target policy smoothing), and an actor and target networks that move only
every `policy_delay` critic updates. The delay is a `lax.cond` on the update
counter, so the whole update stays one compiled program. Exploration is
Gaussian noise decayed linearly with the agent's update count, as in DDPG.

The whole agent is the three functions at the bottom of `make`: `init`,
`act` and `update`; everything else is a roxie primitive.

The defaults suit a 2-core CPU. The published large-scale settings (1024
envs, 20 gradient steps per 2048 env steps, noise decayed over ~50M env
steps) are one config away:

  Config(num_envs=1024, steps_per_iteration=2, updates_per_iteration=20,
         warmup_steps=10_000, replay_capacity=500_000, batch_size=512,
         n_step=5, max_grad_norm=1.0, noise_decay_updates=500_000)

From pixels (dict observations, `roxie train --obs pixels`): the critic reads
observations through a shared conv encoder (`networks.encoded_critic`),
trained by the critic loss; the actor and the target actor read its
features through a stop-gradient (the target actor the target encoder's);
sampled observations are randomly shifted (DrQ). Flat observations are
unaffected.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import buffers, losses, networks, optim
from roxie.types import EnvSpec, Recipe, ReplaySpec, Transition, check_spec


@dataclasses.dataclass(frozen=True)
class Config(networks.PixelConfig):
  """TD3 hyperparameters; the defaults suit a 2-core CPU."""
  # Collection and schedule.
  num_envs: int = 8
  total_steps: int = 200_000
  steps_per_iteration: int = 1  # Env steps per env between update bursts.
  updates_per_iteration: int = 4  # Gradient steps per burst.
  warmup_steps: int = 5_000  # Uniform random actions first.
  # Replay and targets.
  replay_capacity: int = 500_000
  batch_size: int = 256
  n_step: int = 3
  discount: float = 0.99
  tau: float = 0.005
  # TD3's additions.
  policy_delay: int = 2  # Critic updates per actor (and target) update.
  target_noise: float = 0.2  # Std of the target policy smoothing noise.
  target_noise_clip: float = 0.5
  # Exploration: Gaussian noise, std decayed linearly over the first updates.
  noise_start: float = 0.4
  noise_end: float = 0.1
  noise_decay_updates: int = 50_000
  # Networks and optimisation.
  hidden_sizes: Tuple[int, ...] = (256, 256)
  layer_norm: bool = True
  actor_lr: float = 3e-4
  critic_lr: float = 3e-4
  max_grad_norm: Optional[float] = None
  # Control steps per decision (`roxie.envs.wrappers.ActionRepeat`); runs
  # from pixels use 8 (PIXEL_DEFAULTS), as DrQ does on Cartpole.
  action_repeat: int = 1


# What `roxie train --obs pixels` changes in the defaults above (`--set`
# still wins): the off-policy recipes' shared settings from pixels
# (`networks.PIXEL_RUN_DEFAULTS`), DrQ's actor learning rate, and the
# exploration noise decayed over 10k updates.
PIXEL_DEFAULTS = dict(networks.PIXEL_RUN_DEFAULTS, actor_lr=1e-3,
                      noise_decay_updates=10_000)


class State(NamedTuple):
  actor: hk.Params
  critic: hk.Params  # Both critics, stacked on a leading axis.
  target_actor: hk.Params
  target_critic: hk.Params
  actor_opt: optax.OptState
  critic_opt: optax.OptState
  steps: jnp.ndarray  # [] int32 critic updates made.


# The deterministic actor and the export hooks (roxie.export) are shared
# with the other DDPG-style recipes: the state holds `actor` and `critic`.
policy_params = networks.deterministic_policy_params
make_policy = networks.make_deterministic_policy


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the TD3 recipe for environments of `spec`."""
  c = config
  if c.policy_delay < 1:
    raise ValueError(f'policy_delay must be >= 1, got {c.policy_delay}.')
  actor_opt = optim.adam(c.actor_lr, c.max_grad_norm)
  critic_opt = optim.adam(c.critic_lr, c.max_grad_norm)
  noise_std = buffers.linear_schedule(c.noise_start, c.noise_end,
                                      c.noise_decay_updates)
  noise = buffers.gaussian_noise(stddev=noise_std)

  actor = networks.deterministic_actor(c, spec)
  # From pixels the critic encodes observations (networks.encoded_critic).
  critic = networks.encoded_critic(hk.without_apply_rng(hk.transform(
      lambda o, a: networks.TwinQCritic(
          hidden_sizes=c.hidden_sizes, layer_norm=c.layer_norm,
          obs_size=spec.obs_size if spec.obs_shapes is None else None,
          action_size=spec.action_size)(o, a))),
                                   networks.encoder_from_config(c, spec))

  def init(key, env_spec: EnvSpec) -> State:
    check_spec(spec, env_spec)
    k1, k2 = jax.random.split(key)
    encoder = critic.encoder
    obs = (jnp.zeros((1, spec.obs_size)) if encoder is None
           else encoder.dummy_obs(1))
    act = jnp.zeros((1, spec.action_size))
    critic_params = critic.init(k2, obs, act)
    actor_params = actor.init(k1, critic.actor_input(critic_params, obs))
    return State(actor=actor_params, critic=critic_params,
                 target_actor=actor_params, target_critic=critic_params,
                 actor_opt=actor_opt.init(actor_params),
                 critic_opt=critic_opt.init(critic_params),
                 steps=jnp.zeros((), jnp.int32))

  def act(state: State, obs, key, *, explore: bool = True):
    action = actor.apply(state.actor,
                         critic.actor_input(state.critic, obs)).action
    if not explore:
      return action, {}
    # The noise scale is the schedule's value at the agent's update count.
    eps, _ = noise.sample(
        buffers.NoiseState(noise=jnp.zeros_like(action), count=state.steps),
        key)
    return jnp.clip(action + eps, -1., 1.), {}

  def update(state: State, batch: Transition, key):
    explore_std = noise_std(state.steps)
    if critic.encoder is not None:  # From pixels: shift the images.
      key, k_augment = jax.random.split(key)
      batch = critic.augment(k_augment, batch)
    # Critics: regress both to r + discount * min(Q1', Q2') at a smoothed
    # target action mu'(s') + clip(noise).
    next_a = actor.apply(state.target_actor, critic.actor_input(
        state.target_critic, batch.next_obs)).action
    smoothing = jnp.clip(
        c.target_noise * jax.random.normal(key, next_a.shape),
        -c.target_noise_clip, c.target_noise_clip)
    next_a = jnp.clip(next_a + smoothing, -1., 1.)
    q1_next, q2_next = critic.apply(state.target_critic, batch.next_obs,
                                    next_a)
    target = jax.vmap(losses.twin_q_target)(batch.reward, batch.discount,
                                            q1_next, q2_next)

    def critic_loss(params):
      q = critic.apply(params, batch.obs, batch.action)  # [2, N]
      return 0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0)), q

    (c_loss, q), grads = jax.value_and_grad(critic_loss, has_aux=True)(
        state.critic)
    updates, critic_opt_state = critic_opt.update(grads, state.critic_opt,
                                                  state.critic)
    state = state._replace(critic=optax.apply_updates(state.critic, updates),
                           critic_opt=critic_opt_state, steps=state.steps + 1)

    # Actor and targets, every `policy_delay` critic updates: the actor climbs
    # the first critic at its own action.
    def actor_loss(params, critic_params):
      actor_obs = critic.actor_input(critic_params, batch.obs)
      q_pi = critic.apply(critic_params, batch.obs,
                          actor.apply(params, actor_obs).action)[0]
      return jnp.mean(jax.vmap(losses.dpg_actor_loss)(q_pi))

    def update_actor_and_targets(s: State):
      a_loss, grads = jax.value_and_grad(actor_loss)(s.actor, s.critic)
      updates, actor_opt_state = actor_opt.update(grads, s.actor_opt, s.actor)
      actor_params = optax.apply_updates(s.actor, updates)
      s = s._replace(
          actor=actor_params, actor_opt=actor_opt_state,
          target_actor=optax.incremental_update(actor_params, s.target_actor,
                                                c.tau),
          target_critic=critic.polyak(s.critic, s.target_critic, c.tau,
                                      c.encoder_tau))
      # Scaled so that its mean over consecutive updates is the mean loss of
      # the actor updates among them.
      return s, a_loss * c.policy_delay

    def skip(s: State):
      return s, jnp.zeros(())

    state, a_loss = jax.lax.cond(state.steps % c.policy_delay == 0,
                                 update_actor_and_targets, skip, state)
    metrics = {'critic_loss': c_loss, 'actor_loss': a_loss, 'q': jnp.mean(q),
               'noise_std': explore_std}
    return state, metrics

  return Recipe(
      name='td3', config=c, init=init, act=act, update=update, on_policy=False,
      replay=ReplaySpec(capacity=c.replay_capacity, batch_size=c.batch_size,
                        n_step=c.n_step, discount=c.discount),
      steps_per_iteration=c.steps_per_iteration,
      updates_per_iteration=c.updates_per_iteration,
      warmup_steps=c.warmup_steps)
