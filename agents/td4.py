"""TD4: twin delayed distributional deterministic policy gradient.

D4PG ("Distributed Distributional Deterministic Policy Gradients",
Barth-Maron et al., 2018, https://arxiv.org/abs/1804.08617) with TD3's fixes
("Addressing Function Approximation Error in Actor-Critic Methods", Fujimoto
et al., 2018, https://arxiv.org/abs/1802.09477): two categorical critics,
clipped noise on the target action (target policy smoothing), and an actor and
target networks that move only every `policy_delay` critic updates (a
`lax.cond`, so the update stays one compiled program).

Clipped double Q for distributions: a per-atom minimum of two distributions is
not a distribution, so per sample the target takes the WHOLE next-state
distribution of the target head with the lower mean
(`losses.twin_categorical_target`); both heads are trained by cross-entropy to
that one projected n-step target. The actor climbs the first head's mean, as
TD3's actor climbs its first critic. Exploration is Gaussian noise decayed
linearly with the agent's update count.

The whole agent is the three functions at the bottom of `make`: `init`,
`act` and `update`; everything else is a roxie primitive.

Support: the suite's rewards lie in [0, 1], so every discounted value lies in
[0, 1 / (1 - discount)]; by default the atoms span that range with margins of
5% below and 20% above, which at discount 0.99 is the published [-5, 120].

The defaults suit a 2-core CPU. The published large-scale settings (1024
envs, 20 gradient steps per 2048 env steps, noise decayed over ~50M env
steps, 101 atoms on [-5, 120]) are one config away:

  Config(num_envs=1024, steps_per_iteration=2, updates_per_iteration=20,
         warmup_steps=10_000, replay_capacity=500_000, batch_size=512,
         n_step=5, max_grad_norm=1.0, noise_decay_updates=500_000,
         num_atoms=101, v_min=-5.0, v_max=120.0)

From pixels (dict observations, `roxie train --obs pixels`): the critic reads
observations through a shared conv encoder (`networks.encoded_critic`),
trained by the critic loss; the actor and the target actor read its
features through a stop-gradient (the target actor the target encoder's);
sampled observations are randomly shifted (DrQ). Flat observations are
unaffected.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import buffers, losses, networks, optim
from roxie.types import EnvSpec, Recipe, ReplaySpec, Transition, check_spec


@dataclasses.dataclass(frozen=True)
class Config(networks.PixelConfig):
  """TD4 hyperparameters; the defaults suit a 2-core CPU."""
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
  # Categorical critics: atoms on [v_min, v_max]; None derives the range from
  # the discount (see the module docstring).
  num_atoms: int = 51  # As in the D4PG paper; the published runs used 101.
  v_min: Optional[float] = None  # Default: -0.05 / (1 - discount).
  v_max: Optional[float] = None  # Default: 1.2 / (1 - discount).
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
  critic: hk.Params  # Both categorical critics, stacked on a leading axis.
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
  """Builds the TD4 recipe for environments of `spec`."""
  c = config
  if c.policy_delay < 1:
    raise ValueError(f'policy_delay must be >= 1, got {c.policy_delay}.')
  horizon = 1. / (1. - c.discount)
  v_min = c.v_min if c.v_min is not None else -0.05 * horizon
  v_max = c.v_max if c.v_max is not None else 1.2 * horizon
  if not v_min < v_max:
    raise ValueError(f'Need v_min < v_max, got {v_min} and {v_max}.')
  actor_opt = optim.adam(c.actor_lr, c.max_grad_norm)
  critic_opt = optim.adam(c.critic_lr, c.max_grad_norm)
  noise_std = buffers.linear_schedule(c.noise_start, c.noise_end,
                                      c.noise_decay_updates)
  noise = buffers.gaussian_noise(stddev=noise_std)

  actor = networks.deterministic_actor(c, spec)
  critic = hk.without_apply_rng(hk.transform(
      lambda o, a: networks.TwinCategoricalCritic(
          v_min=v_min, v_max=v_max, num_atoms=c.num_atoms,
          hidden_sizes=c.hidden_sizes, layer_norm=c.layer_norm,
          obs_size=spec.obs_size if spec.obs_shapes is None else None,
          action_size=spec.action_size)(o, a)))
  # From pixels the critic encodes observations (networks.encoded_critic).
  critic = networks.encoded_critic(critic,
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

    # Critics: per sample, the target heads' distribution with the lower mean
    # at a smoothed target action mu'(s') + clip(noise), shifted by the n-step
    # reward, scaled by the discount and projected onto the atoms.
    next_a = actor.apply(state.target_actor, critic.actor_input(
        state.target_critic, batch.next_obs)).action
    smoothing = jnp.clip(
        c.target_noise * jax.random.normal(key, next_a.shape),
        -c.target_noise_clip, c.target_noise_clip)
    next_a = jnp.clip(next_a + smoothing, -1., 1.)
    next_dist = critic.apply(state.target_critic, batch.next_obs, next_a)
    atoms = next_dist.atoms  # [K]
    logits1_next, logits2_next = next_dist.logits  # [N, K] each
    probs_next = jax.vmap(functools.partial(
        losses.twin_categorical_target, atoms=atoms))(
            logits1_next, logits2_next)  # [N, K]
    # Per sample (inner vmap), per head (outer vmap, target shared): [2, N].
    td_loss = jax.vmap(jax.vmap(functools.partial(losses.categorical_td_loss,
                                                  atoms=atoms)),
                       in_axes=(0, None, None, None))

    def critic_loss(params):
      dist = critic.apply(params, batch.obs, batch.action)  # logits [2, N, K]
      loss = td_loss(dist.logits, batch.reward, batch.discount, probs_next)
      return jnp.mean(jnp.sum(loss, 0)), dist.mean()

    (c_loss, q), grads = jax.value_and_grad(critic_loss, has_aux=True)(
        state.critic)
    updates, critic_opt_state = critic_opt.update(grads, state.critic_opt,
                                                  state.critic)
    state = state._replace(critic=optax.apply_updates(state.critic, updates),
                           critic_opt=critic_opt_state, steps=state.steps + 1)

    # Actor and targets, every `policy_delay` critic updates: the actor climbs
    # the first head's mean at its own action.
    def actor_loss(params, critic_params):
      a = actor.apply(params, critic.actor_input(critic_params,
                                                 batch.obs)).action
      q_pi = critic.apply(critic_params, batch.obs, a).mean()[0]
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
      name='td4', config=c, init=init, act=act, update=update, on_policy=False,
      replay=ReplaySpec(capacity=c.replay_capacity, batch_size=c.batch_size,
                        n_step=c.n_step, discount=c.discount),
      steps_per_iteration=c.steps_per_iteration,
      updates_per_iteration=c.updates_per_iteration,
      warmup_steps=c.warmup_steps)
