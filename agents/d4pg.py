"""D4PG: distributional deterministic policy gradient with n-step returns.

"Distributed Distributional Deterministic Policy Gradients", Barth-Maron et
al., 2018 (https://arxiv.org/abs/1804.08617).

DDPG whose critic is a categorical distribution over fixed atoms on
[v_min, v_max]. The critic is trained by cross-entropy to the n-step
distributional Bellman target, projected back onto the atoms; the replay
already folds each n-step window into `Transition(reward, discount,
next_obs)`, so the target is the target critic's distribution at
(s', mu'(s')) shifted by `reward` and scaled by `discount`. The actor climbs
the critic's mean. Exploration is Gaussian noise decayed linearly with the
agent's update count, as in DDPG. (The paper's distributed actors and
prioritised replay are not part of this recipe.)

The whole agent is the three functions at the bottom of `make`: `init`,
`act` and `update`; everything else is a roxie primitive.

Support: the suite's rewards lie in [0, 1], so every discounted value, n-step
or not, lies in [0, 1 / (1 - discount)]. By default the atoms span that range
with margins of 5% below and 20% above, which at discount 0.99 is exactly the
published [-5, 120].

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
  """D4PG hyperparameters; the defaults suit a 2-core CPU."""
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
  # Categorical critic: atoms on [v_min, v_max]; None derives the range from
  # the discount (see the module docstring).
  num_atoms: int = 51  # As in the D4PG paper; the published runs used 101.
  v_min: Optional[float] = None  # Default: -0.05 / (1 - discount).
  v_max: Optional[float] = None  # Default: 1.2 / (1 - discount).
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
  critic: hk.Params
  target_actor: hk.Params
  target_critic: hk.Params
  actor_opt: optax.OptState
  critic_opt: optax.OptState
  steps: jnp.ndarray  # [] int32 updates made; drives the noise schedule.


# The deterministic actor and the export hooks (roxie.export) are shared
# with the other DDPG-style recipes: the state holds `actor` and `critic`.
policy_params = networks.deterministic_policy_params
make_policy = networks.make_deterministic_policy


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the D4PG recipe for environments of `spec`."""
  c = config
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
      lambda o, a: networks.CategoricalCritic(
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
    # D4PG's update is deterministic given the batch (from pixels, given
    # the random shifts of its images).
    batch = critic.augment(key, batch)

    # Critic: cross-entropy to the target critic's distribution at
    # (s', mu'(s')), shifted by the n-step reward, scaled by the discount and
    # projected onto the atoms.
    next_a = actor.apply(state.target_actor, critic.actor_input(
        state.target_critic, batch.next_obs)).action
    next_dist = critic.apply(state.target_critic, batch.next_obs, next_a)
    probs_next = next_dist.probs()  # [N, K]
    atoms = next_dist.atoms  # [K]

    def critic_loss(params):
      dist = critic.apply(params, batch.obs, batch.action)
      loss = jax.vmap(functools.partial(losses.categorical_td_loss,
                                        atoms=atoms))(
          dist.logits, batch.reward, batch.discount, probs_next)
      return jnp.mean(loss), dist.mean()

    (c_loss, q), grads = jax.value_and_grad(critic_loss, has_aux=True)(
        state.critic)
    updates, critic_opt_state = critic_opt.update(grads, state.critic_opt,
                                                  state.critic)
    critic_params = optax.apply_updates(state.critic, updates)

    # Actor: climb the new critic's mean at its own action.
    actor_obs = critic.actor_input(critic_params, batch.obs)

    def actor_loss(params):
      a = actor.apply(params, actor_obs).action
      q_pi = critic.apply(critic_params, batch.obs, a).mean()
      return jnp.mean(jax.vmap(losses.dpg_actor_loss)(q_pi))

    a_loss, grads = jax.value_and_grad(actor_loss)(state.actor)
    updates, actor_opt_state = actor_opt.update(grads, state.actor_opt,
                                                state.actor)
    actor_params = optax.apply_updates(state.actor, updates)

    new_state = State(
        actor=actor_params, critic=critic_params,
        target_actor=optax.incremental_update(actor_params,
                                              state.target_actor, c.tau),
        target_critic=critic.polyak(critic_params, state.target_critic,
                                    c.tau, c.encoder_tau),
        actor_opt=actor_opt_state, critic_opt=critic_opt_state,
        steps=state.steps + 1)
    metrics = {'critic_loss': c_loss, 'actor_loss': a_loss, 'q': jnp.mean(q),
               'noise_std': noise_std(state.steps)}
    return new_state, metrics

  return Recipe(
      name='d4pg', config=c, init=init, act=act, update=update,
      on_policy=False,
      replay=ReplaySpec(capacity=c.replay_capacity, batch_size=c.batch_size,
                        n_step=c.n_step, discount=c.discount),
      steps_per_iteration=c.steps_per_iteration,
      updates_per_iteration=c.updates_per_iteration,
      warmup_steps=c.warmup_steps)
