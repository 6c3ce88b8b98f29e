"""PPO: proximal policy optimisation with GAE and a separate value network.

"Proximal Policy Optimization Algorithms", Schulman et al., 2017
(https://arxiv.org/abs/1707.06347), with generalised advantage estimation,
"High-Dimensional Continuous Control Using Generalized Advantage
Estimation", Schulman et al., 2015 (https://arxiv.org/abs/1506.02438).

The loop collects one [T, B] rollout with `act` (which also returns the
behaviour log-probability, the value and the pre-clip action as extras) and
hands it to `update`, which

  1. values every step's TRUE next observation, V(final_obs[t]), so a
     truncated step bootstraps from the state it reached and a terminated
     one does not bootstrap at all; GAE(lambda) never crosses an episode end;
  2. folds the rollout's observations into the running observation
     statistics (mean/variance, `roxie.buffers.normalizer_*`);
  3. runs `num_epochs` passes, each over a fresh permutation of the T * B
     samples cut into `num_minibatches` minibatches (`lax.scan` over both),
     minimising the clipped surrogate (advantages standardised per minibatch)
     minus an entropy bonus, and the (optionally clipped) value loss.

Choices aimed at robustness (the published arms collapsed on several tasks;
these are the usual remedies, checked here on small tasks only):
observations are standardised and clipped; the policy and the value
function are separate networks with separate Adam optimisers, each with its
own gradient-norm clip, so large value errors never shrink the policy's
step; the log std is one learned vector per action (state-independent),
started below 0 and clamped to `log_std_range`; actions are clipped into
[-1, 1] for the environment while the likelihood is always that of the
pre-clip sample; the learning rate adapts to keep the approximate KL
between the behaviour and the current policy near `target_kl` (the schedule
of rsl_rl's PPO, "Learning to Walk in Minutes Using Massively Parallel Deep
Reinforcement Learning", Rudin et al., 2021, https://arxiv.org/abs/2109.11978).
With the defaults, CartpoleSwingup (1,000-step episodes, one seed) held an
evaluation return of ~850 from 300k to 1M steps, where constant rates of
1e-3 or 3e-4 with 64-step rollouts peaked at 700-880 and fell back to
250-500 (for their training returns).

Normalisation and the policy: `act` runs inside the collection scan with the
agent state of the iteration's start, so the stored log-probabilities and
values use the statistics of that time. The statistics are updated before
the epochs, so the probability ratio measures the change of the policy the
next rollout will actually run, input statistics included.

Published settings (the original Roxie release) are one config away (the
robustness choices above stay on):

  Config(rollout_length=32, num_epochs=5, num_minibatches=4,
         clip_epsilon=0.2, gae_lambda=0.95, entropy_coef=0.002)

run with 1,024 envs for 500M env steps (run settings: `--num-envs 1024
--steps 500000000`; add target_kl=None for their constant learning rate).
The CPU defaults instead update every 16 x 256 = 4,096 steps with 10 epochs of
32 minibatches of 128. Rollouts longer than a few dozen steps matter here: all
envs start together and, without terminations, truncate together, so a short
rollout shows every env at the same phase of its episode.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import haiku as hk
import jax
from jax import flatten_util
import jax.numpy as jnp
import optax

from roxie import buffers, losses, networks, optim
from roxie.types import Array, EnvSpec, Policy, Recipe, Rollout, RunDefaults, check_spec


# How PPO runs unless told otherwise (run settings, not Config fields;
# `--set num_envs=...` changes them): 16 envs, 1M env steps, no action
# repeat off the task table.
RUN_DEFAULTS = RunDefaults(num_envs=16, total_steps=1_000_000, action_repeat=1)


@dataclasses.dataclass(frozen=True)
class Config:
  """PPO hyperparameters; the defaults suit a 2-core CPU."""
  # Collection and schedule (per env: the run decides how many envs).
  rollout_length: int = 256  # T steps per env per update.
  num_epochs: int = 10
  num_minibatches: int = 32  # Must divide T * the run's num_envs.
  # Returns and the surrogate.
  discount: float = 0.99
  gae_lambda: float = 0.95
  clip_epsilon: float = 0.2
  value_clip_epsilon: Optional[float] = None  # None: unclipped value loss.
  entropy_coef: float = 0.002
  normalize_advantages: bool = True
  # Networks and optimisation.
  hidden_sizes: Tuple[int, ...] = (64, 64)
  layer_norm: bool = False
  init_log_std: float = -0.5
  log_std_range: Tuple[float, float] = (-3., 0.5)
  learning_rate: float = 1e-3  # The initial one when target_kl is set.
  # If set, the learning rate adapts per minibatch to keep the approximate
  # KL(behaviour || current) near target_kl: divided by 1.5 above twice the
  # target, multiplied by 1.5 below half of it, within [1e-5, 1e-2].
  target_kl: Optional[float] = 0.01
  max_grad_norm: Optional[float] = 0.5  # Per network.
  # Observations.
  normalize_observations: bool = True
  obs_clip: float = 10.  # After standardising.


class State(NamedTuple):
  actor: hk.Params
  critic: hk.Params
  actor_opt: optax.OptState
  critic_opt: optax.OptState
  obs_stats: buffers.NormalizerState
  learning_rate: jnp.ndarray  # [] float32, constant unless target_kl is set.
  steps: jnp.ndarray  # [] int32 updates made.


_ADAM_EPS = 1e-5


def _optimizer(max_grad_norm: Optional[float]):
  # Adam's direction only; the (possibly adaptive) step size is applied
  # in the update. The update steps a flat vector with `roxie.optim`'s
  # equivalent arithmetic; this optax form defines the state's layout.
  adam = optax.scale_by_adam(eps=_ADAM_EPS)
  return adam if max_grad_norm is None else optax.chain(
      optax.clip_by_global_norm(max_grad_norm), adam)


def rollout_advantages(rollout: Rollout, value_fn: Callable[[Array], Array],
                       *, discount: float, lambda_: float) -> losses.GaeOutput:
  """GAE(lambda) of a [T, B] rollout, cut at episode ends.

  Each step bootstraps from the value of its TRUE next observation,
  `value_fn(final_obs[t])`, which is the reset-free observation where an
  episode ended (and `obs[t + 1]` elsewhere); a terminated step has discount
  0, a truncated one keeps `discount`.

  Args:
    rollout: the rollout; `extras['value']` [T, B] holds V(obs[t]) as
      computed when acting.
    value_fn: maps [..., O] observations to [...] values.
    discount: gamma.
    lambda_: the GAE parameter.

  Returns:
    A `GaeOutput` of [T, B] advantages and returns.
  """
  v_next = value_fn(rollout.final_obs)
  discount_t = discount * (1. - rollout.terminated.astype(jnp.float32))
  ended = jnp.logical_or(rollout.terminated, rollout.truncated)
  per_env = functools.partial(losses.gae_advantages, lambda_=lambda_)
  return jax.vmap(per_env, in_axes=1, out_axes=1)(
      rollout.reward, discount_t, ended, rollout.extras['value'], v_next)


def minibatches(key, data, num_minibatches: int):
  """Shuffles [N, ...] leaves and cuts them into [M, N / M, ...] minibatches.

  Every sample lands in exactly one minibatch (one permutation shared by all
  leaves).

  Args:
    key: PRNG key for the permutation.
    data: a pytree of arrays with a common leading axis N.
    num_minibatches: M, which must divide N.

  Returns:
    The pytree with leaves reshaped to [M, N / M, ...].
  """
  total = jax.tree.leaves(data)[0].shape[0]
  if total % num_minibatches:
    raise ValueError(f'ppo: num_minibatches={num_minibatches} must divide '
                     f'the {total} samples of a rollout.')
  order = jax.random.permutation(key, total)
  return jax.tree.map(
      lambda x: x[order].reshape((num_minibatches, -1) + x.shape[1:]), data)


def _actor_network(c: Config, spec: EnvSpec) -> hk.Transformed:
  return hk.without_apply_rng(hk.transform(
      lambda o: networks.GaussianActor(
          action_size=spec.action_size, hidden_sizes=c.hidden_sizes,
          layer_norm=c.layer_norm, init_log_std=c.init_log_std,
          obs_size=spec.obs_size, output_init_scale=0.01)(o)))


def _observe(c: Config, stats: buffers.NormalizerState, obs):
  """Observations as the networks see them (standardised if configured)."""
  if not c.normalize_observations:
    return obs
  return buffers.normalize(stats, obs, clip=c.obs_clip)


def policy_params(state: State) -> Dict[str, Any]:
  """What acting needs from a trained state (`Recipe.policy.params`).

  The actor's parameters and the observation statistics it standardises with.
  """
  return {'actor': state.actor,
          'obs_stats': buffers.normalizer_as_dict(state.obs_stats)}


def make_policy(config: Config, spec: EnvSpec):
  """The deterministic policy alone: `apply(params, obs) -> action`.

  Builds only the actor (no value network, no optimiser), for exported
  bundles (`roxie.load_policy`); `params` is `policy_params(state)`. The
  observations are standardised inside, and the action is the one
  `act(state, obs, key, explore=False)` takes: the mean, clipped to [-1, 1].
  """
  actor = _actor_network(config, spec)

  def apply(params, obs):
    stats = buffers.normalizer_from_dict(params['obs_stats'])
    obs = _observe(config, stats, obs)
    return jnp.clip(actor.apply(params['actor'], obs).mode(), -1., 1.)

  return apply


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the PPO recipe for environments of `spec`."""
  c = config
  actor_opt = _optimizer(c.max_grad_norm)
  critic_opt = _optimizer(c.max_grad_norm)
  actor = _actor_network(c, spec)
  critic = hk.without_apply_rng(hk.transform(
      lambda o: networks.ValueNetwork(
          hidden_sizes=c.hidden_sizes, layer_norm=c.layer_norm,
          obs_size=spec.obs_size, output_init_scale=1.)(o)))

  observe = functools.partial(_observe, c)

  def policy(params, stats, obs):
    dist = actor.apply(params, observe(stats, obs))
    return dist._replace(log_std=jnp.clip(dist.log_std, *c.log_std_range))

  def value(params, stats, obs):
    return critic.apply(params, observe(stats, obs))

  def init(key, env_spec: EnvSpec) -> State:
    check_spec(spec, env_spec)
    k1, k2 = jax.random.split(key)
    obs = jnp.zeros((1, spec.obs_size))
    actor_params = actor.init(k1, obs)
    critic_params = critic.init(k2, obs)
    return State(actor=actor_params, critic=critic_params,
                 actor_opt=actor_opt.init(actor_params),
                 critic_opt=critic_opt.init(critic_params),
                 obs_stats=buffers.normalizer_init(spec.obs_size),
                 learning_rate=jnp.asarray(c.learning_rate, jnp.float32),
                 steps=jnp.zeros((), jnp.int32))

  def act(state: State, obs, key, *, explore: bool = True):
    dist = policy(state.actor, state.obs_stats, obs)
    raw = dist.sample(key) if explore else dist.mode()
    extras = {'log_prob': dist.log_prob(raw),
              'value': value(state.critic, state.obs_stats, obs),
              'raw_action': raw}
    return jnp.clip(raw, -1., 1.), extras

  def update(state: State, rollout: Rollout, key):
    # 1. GAE with the networks and statistics that collected the rollout.
    gae = rollout_advantages(
        rollout, functools.partial(value, state.critic, state.obs_stats),
        discount=c.discount, lambda_=c.gae_lambda)

    # 2. Observation statistics, before the epochs (see the module docstring).
    obs_stats = (buffers.normalizer_update(state.obs_stats, rollout.obs)
                 if c.normalize_observations else state.obs_stats)

    # 3. Epochs x minibatches of the clipped surrogate and the value loss.
    # The networks are trained as ONE flat parameter vector (raveled here,
    # unraveled after the epochs), with one Adam over it and each network's
    # gradient clipped on its own segment: the same arithmetic as an optax
    # optimiser per network, in a few fused kernels per step instead of
    # several per parameter leaf. Likewise the samples travel as one [N, F]
    # matrix, so each epoch's shuffle is one gather.
    total = rollout.reward.size
    flat = lambda x: x.reshape((total, -1))
    data = jnp.concatenate(
        [flat(x) for x in (rollout.obs, rollout.extras['raw_action'],
                           rollout.extras['log_prob'],
                           rollout.extras['value'], gae.advantages,
                           gae.returns)], axis=1)
    o, a = spec.obs_size, spec.action_size
    params, unravel = flatten_util.ravel_pytree((state.actor, state.critic))
    sizes = (sum(x.size for x in jax.tree.leaves(state.actor)),
             sum(x.size for x in jax.tree.leaves(state.critic)))
    opt = optim.ravel_adam_states((state.actor_opt, state.critic_opt))

    def loss_fn(params, mb):
      actor_params, critic_params = unravel(params)
      obs, raw = mb[:, :o], mb[:, o:o + a]
      log_prob, v_old, adv, ret = (mb[:, o + a + i] for i in range(4))
      dist = policy(actor_params, obs_stats, obs)
      if c.normalize_advantages:
        adv = (adv - jnp.mean(adv)) / (jnp.std(adv) + 1e-8)
      surrogate = losses.ppo_policy_loss(
          dist.log_prob(raw), log_prob, adv, epsilon=c.clip_epsilon)
      entropy = jnp.mean(dist.entropy())
      v_loss = losses.ppo_value_loss(
          value(critic_params, obs_stats, obs), v_old, ret,
          clip_epsilon=c.value_clip_epsilon)
      # The two networks share no parameters, so one sum trains both.
      loss = surrogate.loss - c.entropy_coef * entropy + v_loss
      return loss, {'policy_loss': surrogate.loss, 'value_loss': v_loss,
                    'entropy': entropy, 'approx_kl': surrogate.approx_kl,
                    'clip_fraction': surrogate.clip_fraction}

    def minibatch_step(carry, mb):
      params, opt, lr = carry
      grads, metrics = jax.grad(loss_fn, has_aux=True)(params, mb)
      if c.target_kl is not None:
        kl = metrics['approx_kl']
        lr = jnp.where(kl > 2. * c.target_kl, lr / 1.5,
                       jnp.where(kl < 0.5 * c.target_kl, lr * 1.5, lr))
        lr = jnp.clip(lr, 1e-5, 1e-2)
      if c.max_grad_norm is not None:
        grads = optim.clip_segments_by_norm(grads, sizes, c.max_grad_norm)
      direction, opt = optim.adam_direction(grads, opt, eps=_ADAM_EPS)
      return (params - lr * direction, opt, lr), {**metrics,
                                                   'learning_rate': lr}

    def epoch(carry, k):
      return jax.lax.scan(minibatch_step, carry,
                          minibatches(k, data, c.num_minibatches))

    (params, opt, lr), metrics = jax.lax.scan(
        epoch, (params, opt, state.learning_rate),
        jax.random.split(key, c.num_epochs))
    actor_params, critic_params = unravel(params)
    a_opt, c_opt = optim.unravel_adam_states(
        opt, (state.actor_opt, state.critic_opt))
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics['std'] = jnp.mean(
        policy(actor_params, obs_stats, rollout.last_obs).stddev)
    metrics['value'] = jnp.mean(rollout.extras['value'])
    new_state = State(actor=actor_params, critic=critic_params,
                      actor_opt=a_opt, critic_opt=c_opt, obs_stats=obs_stats,
                      learning_rate=lr, steps=state.steps + 1)
    return new_state, metrics

  return Recipe(name='ppo', config=c, init=init, act=act, update=update,
                on_policy=True, rollout_length=c.rollout_length,
                policy=Policy(params=policy_params,
                              apply=make_policy(c, spec)))
