"""One off-policy actor-critic skeleton: DDPG, TD3, D4PG and TD4 are its cases.

"Continuous control with deep reinforcement learning", Lillicrap et al., 2015
(https://arxiv.org/abs/1509.02971), is the shape every case shares: a
deterministic tanh actor mu(s) climbs a critic Q(s, a); the critic regresses
to a target built from slowly moving (Polyak) copies of both networks at the
next observation; exploration adds Gaussian noise whose scale decays linearly
with the agent's own update count (`State.steps`), so the schedule lives in
the state and needs nothing from the loop.

What a recipe states is only what differs, as arguments of `make`:

  critic        the critic network, a haiku function `(obs, action) -> out`:
                one Q-value, a stack of K (an ensemble, for clipped double Q
                or REDQ-style minima), or distributions over atoms;
  target        `(target critics' out at (s', a'), batch, key) -> target`,
                over however many critics `out` holds (min of two, a random
                subset's min as in REDQ with `losses.ensemble_q_target`,
                lower-mean head, ...); computed outside the gradient;
  critic_loss   `(out, target, batch) -> (loss, q)` for the online critics;
  actor_value   `out -> [N]`, the value the actor climbs (the first critic,
                a distribution's mean);
  smoothing     TD3's clipped Gaussian noise on the target action, or None;
  policy_delay  critic updates per actor and target update (a `lax.cond` on
                the update counter, so the update stays one program);
  target_networks  False bootstraps from the online networks (CrossQ-style);
                the state keeps its target fields, equal to the online ones.

The replay's n-step windows (`Config.n_step`) arrive folded into
`Transition(reward, discount, next_obs)`, so every target is written for one
step.

From pixels (dict observations): the critic reads observations through a
shared conv encoder (`networks.encoded_critic`) trained by the critic loss;
the actor and target actor read its features through a stop-gradient (the
target actor the target encoder's); sampled observations are randomly
shifted (DrQ). Flat observations pass through unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import (Any, Callable, ClassVar, Mapping, NamedTuple, Optional,
                    Tuple)

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import buffers, losses, networks, optim
from roxie.types import EnvSpec, Policy, Recipe, ReplaySpec, RunDefaults, Transition, check_spec


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
  """Collection, replay and target fields of every off-policy recipe.

  The base of this module's `Config` and of SAC's and MPO's; a recipe
  redeclares a field to change its default (it keeps its place). `pixels`
  is how observations with images are encoded (flat ones ignore it); its
  fields are set by their own names (`--set encoder_pooling=mean`).
  """
  pixels: networks.PixelConfig = dataclasses.field(
      default_factory=networks.PixelConfig)
  # Collection and schedule (per env: the run decides how many envs).
  steps_per_iteration: int = 1  # Env steps per env between update bursts.
  updates_per_iteration: int = 4  # Gradient steps per burst.
  # Uniform random actions first: agent steps summed over the envs (under
  # an action repeat R, R env steps each), as CURL's State-SAC (1,000).
  # It was 5,000, 40% of a 100k-env-step budget on CartpoleSwingup (R = 8):
  # SAC on CheetahRun at 100k, 3 seeds, 226 against 177 (RESULTS.md).
  warmup_steps: int = 1_000
  # Replay and targets.
  replay_capacity: int = 500_000
  batch_size: int = 256
  # MPO's. This module's Config (DDPG, TD3, D4PG, TD4) and SAC take
  # one-step targets from states, and every recipe takes 3 from pixels
  # (PIXEL_DEFAULTS).
  n_step: int = 3
  discount: float = 0.99
  tau: float = 0.005
  # Observations standardised with running statistics merged from the
  # replay's batches (`observe_batch`), then clipped to +-obs_clip; flat
  # vectors, or a dict observation's float vector entries (never images).
  normalize_observations: bool = False
  obs_clip: float = 10.
  # What a config.json or policy bundle without the field means (`roxie.
  # config.from_dict`; a recipe's own ABSENT_MEANS adds to this): runs
  # written before the field trained on raw observations, whatever the
  # recipe's default is now (all but MPO's standardise).
  ABSENT_MEANS: ClassVar[Mapping[str, bool]] = {
      'normalize_observations': False}


# What `roxie train --obs pixels` starts every off-policy recipe from (each
# recipe's PIXEL_DEFAULTS adds its own learning rates; `--set` still wins;
# on the task table's tasks its action repeat replaces the 8 here):
# DrQ's settings for the DeepMind Control tasks scaled to a 2-core CPU. 4
# envs, action repeat 8 (DrQ's on Cartpole), a 100k replay of frames, batch
# 128, one update per agent step (4 per iteration of the 4 envs), 1,000
# agent steps of warm-up (8,000 control steps), tau 0.01 (DrQ's critic
# target rate), and DrQ's larger critic learning rate, since the critic
# trains the encoder.
PIXEL_RUN_DEFAULTS = {
    'num_envs': 4,
    'replay_capacity': 100_000,
    'batch_size': 128,
    'updates_per_iteration': 4,
    'warmup_steps': 1_000,
    'critic_lr': 1e-3,
    'tau': 0.01,
    'action_repeat': 8,
    'total_steps': 100_000,
    # Observations as they come, whatever a recipe's default: standardising
    # would touch only a `pixels+state` run's state vector, and the pixel
    # rows were measured without it.
    'normalize_observations': False,
}


def replay_recipe(name: str, config: ReplayConfig, init, act, update,
                  policy) -> Recipe:
  """An off-policy Recipe whose collection and replay come from `config`.

  The replay spec (capacity, batch, n-step, discount) and the schedule
  (steps and updates per iteration, warm-up) are the ReplayConfig's fields;
  SAC, MPO, this module's skeleton and the examples build theirs here.
  """
  c = config
  return Recipe(
      name=name, config=c, init=init, act=act, update=update, on_policy=False,
      replay=ReplaySpec(capacity=c.replay_capacity, batch_size=c.batch_size,
                        n_step=c.n_step, discount=c.discount),
      steps_per_iteration=c.steps_per_iteration,
      updates_per_iteration=c.updates_per_iteration,
      warmup_steps=c.warmup_steps, policy=policy)


# -- Observation statistics (`ReplayConfig.normalize_observations`) --------
#
# An off-policy update sees replay batches, not the env's stream, so the
# running mean and variance are merged from each sampled batch's
# observations: the statistics of what the critic trains on. They live in
# the agent state (`obs_stats`; None when off, which has no leaves, so a
# state and a checkpoint without normalisation are what they were before
# the option existed). Acting, both observations of an update, and the
# exported policy standardise with them.


def obs_stats_init(config: Any, spec: EnvSpec):
  """The statistics a state starts with: None unless the config asks.

  Args:
    config: a recipe config; its `normalize_observations` (absent: False).
    spec: the env spec (dict observations get statistics per float vector
      entry; images pass through).
  """
  if not getattr(config, 'normalize_observations', False):
    return None
  return buffers.observation_normalizer_init(spec)


def standardise(config: Any, stats, obs):
  """obs as the networks read it: standardised and clipped, or unchanged."""
  if stats is None:
    return obs
  return buffers.normalize(stats, obs, clip=config.obs_clip)


def observe_batch(config: Any, stats, batch: Transition):
  """(stats merged with batch.obs, batch with obs and next_obs standardised).

  Both observations are standardised with the merged statistics, so the
  online and the target networks read one scale within an update.
  """
  if stats is None:
    return stats, batch
  stats = buffers.normalizer_update(stats, batch.obs)
  return stats, batch._replace(
      obs=standardise(config, stats, batch.obs),
      next_obs=standardise(config, stats, batch.next_obs))


def with_obs_stats(params: dict, state: Any) -> dict:
  """A policy's params plus the state's statistics as dicts, if it keeps any.

  Bundles hold dicts of arrays: the statistics go in under 'obs_stats' as
  `buffers.normalizer_as_dict` writes them.
  """
  stats = getattr(state, 'obs_stats', None)
  if stats is None:
    return params
  return dict(params, obs_stats=buffers.normalizer_as_dict(stats))


def standardised_policy(config: Any, apply: Callable) -> Callable:
  """`apply(params, obs)` reading obs standardised by params['obs_stats'].

  The exported policy's side of `with_obs_stats`: params without statistics
  reach `apply` with obs unchanged.
  """

  def wrapped(params, obs):
    stats = params.get('obs_stats')
    if stats is None:
      return apply(params, obs)
    return apply(params, standardise(config, buffers.normalizer_from_dict(
        stats), obs))

  return wrapped


@dataclasses.dataclass(frozen=True)
class Config(ReplayConfig):
  """What every case shares; the defaults suit a 2-core CPU.

  The published large-scale settings (1024 envs, 20 gradient steps per 2048
  env steps, noise decayed over ~50M env steps) are one config away, run
  with 1024 envs (`--num-envs 1024`, a run setting):

    Config(steps_per_iteration=2, updates_per_iteration=20,
           warmup_steps=10_000, replay_capacity=500_000, batch_size=512,
           n_step=5, max_grad_norm=1.0, noise_decay_updates=500_000)
  """
  # One-step targets from states (3 before 2026-12-07): TD3, DDPG, D4PG
  # and TD4 each gained on CheetahRun and FingerSpin at 500k; TD3, DDPG
  # and TD4 lost CartpoleSwingup's 100k cell, D4PG ReacherEasy's. Their
  # docstrings have the evidence.
  n_step: int = 1
  # Exploration: Gaussian noise, std decayed linearly over the first updates.
  # Counted in updates, the decay's length in env steps grows with the
  # action repeat: at 8 envs and 4 updates a burst, an update is 4 env
  # steps at a repeat of 2 and 8 at 4 (the decay ends at 200k env steps
  # on FingerSpin, 400k on CheetahRun). DDPG's own default decays over
  # 125k updates (agents/ddpg.py's docstring gives the evidence; TD3 and
  # TD4 did not gain from it on FingerSpin).
  noise_start: float = 0.4
  noise_end: float = 0.1
  noise_decay_updates: int = 50_000
  # Networks and optimisation.
  hidden_sizes: Tuple[int, ...] = (256, 256)
  layer_norm: bool = True
  # The critic's torso: 0 residual blocks keeps the MLP of hidden_sizes;
  # N > 0 makes it BRO's residual net (`networks.ResidualMLP`: N blocks,
  # every layer critic_width wide; BRO's critic is N = 2, width 512).
  critic_blocks: int = 0
  critic_width: int = 512
  # DrQ's learning rate for the DeepMind Control tasks (as SAC and MPO)
  # with standardised observations (below): D4PG's default first, then,
  # from the same 100k evidence on the six tasks, the skeleton's, so
  # DDPG's, TD3's and TD4's too (2026-12-06). 3e-4 on raw observations
  # before: DMC.md's variant `lr3e-4-noobsnorm` of each. The rows:
  # d4pg.py's docstring and benchmarks/RESULTS.md, "DDPG, TD3 and TD4
  # move to DrQ's learning rate on standardised observations".
  actor_lr: float = 1e-3
  critic_lr: float = 1e-3
  max_grad_norm: Optional[float] = None
  # Standardised observations, as SAC's (the field and its meaning are
  # ReplayConfig's; a saved config without it reads False).
  normalize_observations: bool = True


# How DDPG, TD3, D4PG and TD4 run unless told otherwise (run settings, not
# Config fields; `--set num_envs=...` changes them): 8 envs, 200k env
# steps, no action repeat off the task table (runs from pixels use 8, as
# DrQ does on Cartpole: PIXEL_RUN_DEFAULTS).
RUN_DEFAULTS = RunDefaults(num_envs=8, total_steps=200_000, action_repeat=1)


# What `roxie train --obs pixels` changes in the defaults above (`--set`
# still wins): the off-policy recipes' shared settings from pixels
# (`PIXEL_RUN_DEFAULTS`), DrQ's actor learning rate, the exploration noise
# decayed over 10k updates, and 3-step targets (DrQ-v2's), also for DDPG, TD3
# and D4PG, whose one-step default is evidence from states only.
PIXEL_DEFAULTS = dict(PIXEL_RUN_DEFAULTS, actor_lr=1e-3,
                      noise_decay_updates=10_000, n_step=3)


class State(NamedTuple):
  """The agent state of every case (checkpoints depend on these names)."""
  actor: hk.Params
  critic: hk.Params  # An ensemble's members stacked on a leading axis.
  target_actor: hk.Params
  target_critic: hk.Params
  actor_opt: optax.OptState
  critic_opt: optax.OptState
  steps: jnp.ndarray  # [] int32 critic updates made; drives the noise schedule.
  # Running observation statistics (`normalize_observations`), else None.
  obs_stats: Optional[Any] = None


# The deterministic policy's parts, which `make` puts in `Recipe.policy`
# (every case's state holds `actor` and `critic`); module-level too, for
# code that reads them from the module.
def policy_params(state: Any) -> dict:
  """What acting needs from a trained state (`Recipe.policy.params`).

  `networks.deterministic_policy_params`, plus the observation statistics
  where the state keeps them.
  """
  return with_obs_stats(networks.deterministic_policy_params(state), state)


def make_policy(config: Any, spec: EnvSpec) -> Callable:
  """`networks.make_deterministic_policy`, standardising as the state did."""
  return standardised_policy(config,
                             networks.make_deterministic_policy(config, spec))


def critic_kwargs(config: Config, spec: EnvSpec) -> dict:
  """The critic constructors' shared keyword arguments for `spec`.

  On flat observations the critic checks their size; from pixels it reads
  encoder features, whose width it takes as given.
  """
  return dict(torso_kwargs(config),
              obs_size=networks.observation_encoder(config, spec).obs_size,
              action_size=spec.action_size)


def torso_kwargs(config: Any) -> dict:
  """A critic's torso arguments from a config's network fields.

  hidden_sizes and layer_norm; with `critic_blocks` > 0 (a config without
  the field has none) the residual torso's `residual_blocks` and its one
  width.
  """
  blocks = getattr(config, 'critic_blocks', 0)
  if not blocks:
    return dict(hidden_sizes=config.hidden_sizes,
                layer_norm=config.layer_norm)
  return dict(hidden_sizes=(config.critic_width,),
              layer_norm=config.layer_norm, residual_blocks=blocks)


@dataclasses.dataclass(frozen=True)
class DelayedConfig(Config):
  """TD3's additions: target policy smoothing and a delayed actor."""
  policy_delay: int = 2  # Critic updates per actor (and target) update.
  target_noise: float = 0.2  # Std of the target policy smoothing noise.
  target_noise_clip: float = 0.5


@dataclasses.dataclass(frozen=True)
class CategoricalConfig(Config):
  """A categorical critic's atoms on [v_min, v_max] (D4PG's).

  None derives an end of the range from the discount and the env's action
  repeat R (`EnvSpec.action_repeat`): the suite's rewards lie in [0, 1] per
  control step, so an agent step's reward lies in [0, R] and every
  discounted value, n-step or not, in [0, R / (1 - discount)]; the default
  range spans it with margins of 5% below and 20% above, which at discount
  0.99 and R = 1 is exactly D4PG's published [-5, 120] (R = 8, CartpoleSwingup
  under the task table: [-40, 960]). Until this took R into account the
  range stayed [-5, 120] under any action repeat, and the critic's mean
  saturated at 120 where values reach R x 100.
  """
  num_atoms: int = 51  # As in the D4PG paper; the published runs used 101.
  v_min: Optional[float] = None  # Default: -0.05 * R / (1 - discount).
  v_max: Optional[float] = None  # Default: 1.2 * R / (1 - discount).
  # Where every Q's mass starts (None: uniform over the atoms, so every Q
  # starts at the support's midpoint, 0.575 R / (1 - discount) by default).
  critic_init_value: Optional[float] = None


def categorical_critic_kwargs(config: CategoricalConfig,
                              spec: EnvSpec) -> dict:
  """`critic_kwargs` plus the support of a categorical critic.

  Raises:
    ValueError: unless v_min < v_max.
  """
  horizon = spec.action_repeat / (1. - config.discount)
  v_min = config.v_min if config.v_min is not None else -0.05 * horizon
  v_max = config.v_max if config.v_max is not None else 1.2 * horizon
  # Traced (per member of a population, from a swept discount or bound),
  # the order was checked when each member's config was built on the host.
  ordered = v_min < v_max
  if not isinstance(ordered, jax.core.Tracer) and not ordered:
    raise ValueError(f'Need v_min < v_max, got {v_min} and {v_max}.')
  return dict(critic_kwargs(config, spec), v_min=v_min, v_max=v_max,
              num_atoms=config.num_atoms,
              init_value=config.critic_init_value)


def make(config: Config, spec: EnvSpec, *, name: str,
         critic: Callable[[Any, jnp.ndarray], Any],
         target: Callable[[Any, Transition, jnp.ndarray], Any],
         critic_loss: Callable[[Any, Any, Transition], Tuple[Any, Any]],
         actor_value: Callable[[Any], jnp.ndarray] = lambda out: out,
         smoothing: Optional[Tuple[float, float]] = None,
         policy_delay: int = 1,
         target_networks: bool = True,
         saturation_weight: float = 0.,
         saturation_threshold: float = 2.) -> Recipe:
  """Builds an off-policy deterministic actor-critic recipe.

  Args:
    config: the shared hyperparameters (a recipe's Config extends `Config`).
    spec: the environments' spec.
    name: the recipe's name.
    critic: haiku function `(obs or features [N, F], action [N, A]) -> out`
      (built inside `hk.transform`; its module names are the parameters').
    target: `(out of the target critics at (s', a'), batch, key) -> target`,
      where a' is the target actor's (smoothed) action; no gradient flows
      through. `key` is its own (e.g. for REDQ's random subset of critics).
    critic_loss: `(out of the online critics at (s, a), target, batch) ->
      (scalar loss, q)`; `q` is averaged into the 'q' metric.
    actor_value: `out at (s, mu(s)) -> [N]` value the actor climbs.
    smoothing: (std, clip) of TD3's clipped Gaussian noise added to the
      target action; None adds none.
    policy_delay: critic updates per actor and target update, >= 1.
    target_networks: whether to bootstrap from Polyak-averaged target
      networks (False: from the online ones).
    saturation_weight, saturation_threshold: the actor's pre-tanh saturation
      penalty (`losses.dpg_actor_loss`); weight 0 turns it off.

  Returns:
    The recipe; its update's metrics are 'critic_loss', 'actor_loss', 'q' and
    'noise_std'.
  """
  c = config
  if policy_delay < 1:
    raise ValueError(f'policy_delay must be >= 1, got {policy_delay}.')
  actor_opt = optim.adam(c.actor_lr, c.max_grad_norm)
  critic_opt = optim.adam(c.critic_lr, c.max_grad_norm)
  noise_std = buffers.linear_schedule(c.noise_start, c.noise_end,
                                      c.noise_decay_updates)
  noise = buffers.gaussian_noise(stddev=noise_std)
  actor = networks.deterministic_actor(c, spec)
  net = networks.encoded_critic(hk.without_apply_rng(hk.transform(critic)),
                                networks.observation_encoder(c, spec))

  def init(key, env_spec: EnvSpec) -> State:
    check_spec(spec, env_spec)
    k_actor, k_critic = jax.random.split(key)
    obs = net.encoder.dummy_obs(1)
    critic_params = net.init(k_critic, obs, jnp.zeros((1, spec.action_size)))
    actor_params = actor.init(k_actor, net.actor_input(critic_params, obs))
    return State(actor=actor_params, critic=critic_params,
                 target_actor=actor_params, target_critic=critic_params,
                 actor_opt=actor_opt.init(actor_params),
                 critic_opt=critic_opt.init(critic_params),
                 steps=jnp.zeros((), jnp.int32),
                 obs_stats=obs_stats_init(c, spec))

  def act(state: State, obs, key, *, explore: bool = True):
    obs = standardise(c, state.obs_stats, obs)
    action = actor.apply(state.actor,
                         net.actor_input(state.critic, obs)).action
    if not explore:
      return action, {}
    # The noise scale is the schedule's value at the agent's update count.
    eps, _ = noise.sample(
        buffers.NoiseState(noise=jnp.zeros_like(action), count=state.steps),
        key)
    return jnp.clip(action + eps, -1., 1.), {}

  def update(state: State, batch: Transition, key):
    explore_std = noise_std(state.steps)
    obs_stats, batch = observe_batch(c, state.obs_stats, batch)
    state = state._replace(obs_stats=obs_stats)
    # From pixels the images are shifted; the key is split only where both
    # the shift and the smoothing noise need one.
    smooth_keys, (k_augment,) = net.split_keys(key, int(smoothing is not None))
    k_smooth = smooth_keys[0] if smooth_keys else key
    batch = net.augment(k_augment, batch)

    # Critics: regress to the target at the target actor's action a' at s'
    # (with clipped smoothing noise when asked for).
    target_actor, target_critic = ((state.target_actor, state.target_critic)
                                   if target_networks else
                                   (state.actor, state.critic))
    next_a = actor.apply(target_actor, net.actor_input(
        target_critic, batch.next_obs)).action
    if smoothing is not None:
      std, clip = smoothing
      eps = jnp.clip(std * jax.random.normal(k_smooth, next_a.shape),
                     -clip, clip)
      next_a = jnp.clip(next_a + eps, -1., 1.)
    # The target's key is folded from the update's, so the keys above stay
    # what they were before the target took one.
    y = target(net.apply(target_critic, batch.next_obs, next_a), batch,
               jax.random.fold_in(key, 1))

    def critic_objective(params):
      return critic_loss(net.apply(params, batch.obs, batch.action), y, batch)

    (c_loss, q), grads = jax.value_and_grad(critic_objective, has_aux=True)(
        state.critic)
    critic_params, critic_opt_state = optim.step(
        critic_opt, state.critic, state.critic_opt, grads)
    state = state._replace(critic=critic_params, critic_opt=critic_opt_state,
                           steps=state.steps + 1)

    # Actor (and targets): climb the new critic at the actor's own action;
    # gradients reach only the actor's parameters.
    def actor_objective(params, critic_params):
      out = actor.apply(params, net.actor_input(critic_params, batch.obs))
      q_pi = actor_value(net.apply(critic_params, batch.obs, out.action))
      # A traced weight (one per member of a population) always adds the
      # penalty; weighted by 0 it changes nothing.
      pre_tanh = (out.pre_tanh if isinstance(saturation_weight, jax.core.Tracer)
                  or saturation_weight > 0 else None)
      return jnp.mean(jax.vmap(lambda q, p: losses.dpg_actor_loss(
          q, p, saturation_weight=saturation_weight,
          threshold=saturation_threshold))(q_pi, pre_tanh))

    def update_actor_and_targets(s: State):
      a_loss, grads = jax.value_and_grad(actor_objective)(s.actor, s.critic)
      actor_params, actor_opt_state = optim.step(actor_opt, s.actor,
                                                 s.actor_opt, grads)
      if target_networks:
        new_targets = dict(
            target_actor=optax.incremental_update(
                actor_params, s.target_actor, c.tau),
            target_critic=net.polyak(s.critic, s.target_critic, c.tau,
                                     c.pixels.encoder_tau))
      else:
        new_targets = dict(target_actor=actor_params, target_critic=s.critic)
      return s._replace(actor=actor_params, actor_opt=actor_opt_state,
                        **new_targets), a_loss

    if policy_delay == 1:
      state, a_loss = update_actor_and_targets(state)
    else:
      def delayed(s: State):
        # Scaled so that its mean over consecutive updates is the mean loss
        # of the actor updates among them.
        s, a_loss = update_actor_and_targets(s)
        return s, a_loss * policy_delay

      state, a_loss = jax.lax.cond(state.steps % policy_delay == 0, delayed,
                                   lambda s: (s, jnp.zeros(())), state)
    metrics = {'critic_loss': c_loss, 'actor_loss': a_loss, 'q': jnp.mean(q),
               'noise_std': explore_std}
    return state, metrics

  return replay_recipe(name, c, init, act, update,
                       Policy(params=policy_params,
                              apply=make_policy(c, spec)))
