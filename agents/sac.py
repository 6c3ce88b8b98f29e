"""SAC: soft actor-critic with twin critics and a learned temperature.

"Soft Actor-Critic Algorithms and Applications", Haarnoja et al., 2018
(https://arxiv.org/abs/1812.05905).

The whole agent is the three functions at the bottom of `make`: `init`,
`act` and `update`; everything else is a roxie primitive.

From pixels. With dict observations (an env made with `pixels=PixelSpec(...)`)
the recipe follows DrQ ("Image Augmentation Is All You Need", Kostrikov et
al., 2020, https://arxiv.org/abs/2004.13649) and SAC-AE (Yarats et al., 2019,
https://arxiv.org/abs/1910.01741): a conv encoder (`networks.SharedEncoder`)
belongs to the critic and is trained by the critic loss only (its parameters
are `critic['encoder']`, the Q-heads' `critic['q']`; the target critic keeps
a target encoder, averaged with `encoder_tau`), the actor acts on its
features through a stop-gradient, and sampled observations and next
observations are randomly shifted (`augment_pad`) before encoding. Flat
observations go through the identity encoder (`networks.observation_encoder`
chooses once), so the state-based networks and parameters are unchanged.

On the DeepMind Control benchmark (benchmarks/results/DMC.md has the
current rows), at 500k env steps and 3 seeds, these defaults meet CURL's
State-SAC on CartpoleSwingup (865 against 848) and ReacherEasy (977
against 923), are short within the interval on FingerSpin (819; seeds
977, 618, 861, against 923) and WalkerWalk (908; 858, 894, 973, against
948), and short on BallInCup (968 against 974) and CheetahRun (684
against 795). Return / CURL, IQM over the six: 0.98 [0.96, 1.01] at 500k,
0.93 [0.87, 1.00] at 100k.

Standardised observations (`normalize_observations`, the default of every
off-policy recipe but MPO since 2026-12-06, SAC's first, an option of MPO's;
`off_policy.observe_batch`): running statistics merged from each replay
batch, applied to acting, both observations of an update and the exported
policy. The DMC state vectors mix scales (FingerSpin pays only while the
hinge turns at >= 15 rad/s, its fingertip features move by tenths), and
the torsos' LayerNorm comes after the first layer, so a raw input on a
larger scale can swamp the rest. It was chosen on all six tasks at both
budgets, 3 seeds each (the raw-observation rows are variant `noobsnorm`
in DMC.md), at no CPU cost `benchmarks/run_cost.py` can measure: at 500k
CheetahRun 684 against 570 (every seed above every raw seed from 60k
on), FingerSpin 819 against 689, ReacherEasy 977 against 916,
CartpoleSwingup 865 against 861, BallInCup 968 against 972, and WalkerWalk
908 against 959; at 100k CheetahRun 470 against 304, WalkerWalk 797
against 769 (6 seeds each), ReacherEasy 837 against 691, FingerSpin 637
against 582, CartpoleSwingup 820 against 824, BallInCup 959 against 968.
Return / CURL IQM 0.98 [0.96, 1.01] against 0.95 [0.92, 0.99] at 500k,
0.93 [0.87, 1.00] against 0.89 [0.80, 0.94] at 100k. WalkerWalk is what
it costs: standardised, most seeds settle on a lower, crouched gait
(at 160k 4 of 6 seeds at 810-850, where 5 of 6 raw seeds were
above 910; seed 0's mean torso height 1.11 against seed 2's 1.24 at 300k), and
climb from it slowly (858 and 894 at 500k); no input is clipped and the
statistics match the policy's own observations, so it is not a scale
artefact (benchmarks/RESULTS.md, "Standardised observations become SAC's
default").

The learning rate, 1e-3 for actor and critic, is DrQ's for these tasks (the
SAC papers and pytorch_sac use 3e-4, which is variant `lr3e-4` in DMC.md:
the rows made before the change). It was chosen on raw observations, as
was every variant named below (their rows' overrides say
`normalize_observations=false`), on all six tasks at both budgets, 3
seeds each: at 100k it leads 3e-4 on every task (CartpoleSwingup
824 against 790, ReacherEasy 691 against 589, FingerSpin 582 against 416,
CheetahRun 304 against 226, WalkerWalk 701 against 565, BallInCup 968
against 938), and at 500k it leads or is level on every task
(CartpoleSwingup 861 against 863, ReacherEasy 916 against 902, FingerSpin
689 against 653, CheetahRun 570 against 470, WalkerWalk 959 against 898,
BallInCup 972 against 970); return / CURL IQM over the six, 0.85 [0.76,
0.93] against 0.73 [0.62, 0.82] at 100k and 0.95 [0.92, 0.99] against 0.92
[0.87, 0.98] at 500k. An update costs the same (the longest runs,
FingerSpin and WalkerWalk, took 25.3 and 26.4 CPU minutes at 500k with four
runs sharing 2 cores). Its critic lags no less (on CheetahRun, Q at
0.70-0.74 of the discounted value of its return at 500k,
`benchmarks/dmc_metrics.py`): the policy moves faster. The variants named
below (`utd1`, `utd1-b128`, `tau0.02`, `ar1-utd1`, `warmup5k`) and the
metrics quoted with them were measured at 3e-4 (their overrides in DMC.md
say so).

What CheetahRun's metrics showed at 3e-4 (seed 1, 500k env steps, action
repeat 4, the 5,000-step warm-up of an earlier default): the entropy sits
at its target (-6, the action size) from ~140k steps on with alpha ~0.03,
so exploration is not what limits it; the mean Q is still rising (29 at
140k, 96 at 320k, 142 at 500k, where a return of ~500 per 1000 steps
would settle it near 200), and so is the return, about linearly: the critic
has not caught up with the policy's value when the budget ends. The budget
is the update count: 8 envs x 4 updates per iteration make 0.5 updates per
agent step, 62.5k updates in 500k env steps, against the published State
SAC's one per agent step (125k) with 1024-unit layers (SAC-AE's settings)
where these are 256. `updates_per_iteration=8` (one per agent step, ~2x
the CPU) is the `utd1` variant in DMC.md: 524 (574 / 524 / 473), against
470 at 3e-4 with the default's updates and 570 at 1e-3. At
half the batch (`utd1-b128`: `batch_size=128` as well) an update costs
0.58x, and a CheetahRun run with twice the default's updates 1.07x
its CPU: 498 (514 / 540 / 439); at 100k it led 3e-4's default on all six
tasks by 21-64 (3 seeds each, intervals overlapping), but at 500k it was
level on CartpoleSwingup (863) and BallInCup (968 against 970) and below
on ReacherEasy (743 against 902: one seed at 282, its evaluations
swinging 282-838 at a flat Q; benchmarks/RESULTS.md). Wider or normalised
critics (SimbaV2, BRO: `critic_blocks`, `networks.ResidualMLP`; CrossQ:
`networks.BatchRenormMLP`, examples/crossq.py) are the other lever, at
more CPU per update. At 1e-3 (DMC.md, 3 seeds, 500k): `utd1-lr1e-3`
(`updates_per_iteration=8`) reaches 600 [537, 653] at 2.06x the CPU, its
seeds' mean level with the default's until 320k and 10-31 above it after,
and FingerSpin 729 [589, 963] against 689 at ~2.5x (its mean above the
default's at every evaluation but 280k, level, yet each seed settles on
its own level by ~150k, 589 / 637 / 963, its critic at 0.71-0.82 of its
policy's value); action repeat 2 (`ar2`) 578 [541, 603] at 2.5x. n_step
stays 1:
`n_step=3` trails at 1e-3 (CheetahRun 267 against 304 at 100k and 385
against 470 at 240k, FingerSpin 454 against 582 at 100k), its critic no
closer to its policy's value; the replay's n-step sum is uncorrected and
leaves the intermediate steps' entropy bonus out.

Why the critic lags at 100k (benchmarks/RESULTS.md, "SAC's critic at 100k
env steps"; measured at 3e-4): with Polyak targets the bootstrapped value
closes about tau * (1 - discount**n_step) of its remaining gap a update,
5e-5 at these defaults, a time constant of 20k updates; CheetahRun's 100k
env steps are 12.5k updates. At 100k the mean Q of every standard task is
2-4x higher at `tau=0.02` (CheetahRun 19-22 -> 46-48, BallInCup 46-133 ->
223-312), and `n_step=3` does the same on CheetahRun (36-43). The return
gains less: return / CURL IQM over the six tasks 0.76 [0.67, 0.85] at tau
0.02 against 0.73 [0.62, 0.82] (variant `tau0.02` in DMC.md, the same CPU):
a higher IQM on five tasks, lower on CartpoleSwingup (one seed at 537), and
every task's interval overlapping the default's. At 500k on CheetahRun the
two are level (IQM 475 at 0.02, 470 at 0.005, 3 seeds each), so the faster
target does not cost that asymptote; the default stays 0.005 until the
other five tasks show the same at 500k.

The State SAC that DMC tables cite (pytorch_sac, DrQ's; RESULTS.md,
"The State SAC that the DMC tables cite") runs without action repeat and
makes one update per env step, 4-16x the updates these defaults make in
the same env steps (4x at action repeat 2, 16x at 8). Under that protocol
(`--set action_repeat=1 --set updates_per_iteration=8`) this recipe
reaches 666 on FingerSpin at 100k against 416 at 3e-4's default (582
at 1e-3), and 584
with one update per agent step at action repeat 2 (`utd1`, half the
updates and 0.43x the CPU of the former).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import losses, networks, optim
from roxie.agents import off_policy
from roxie.types import EnvSpec, Policy, Recipe, RunDefaults, Transition, check_spec


@dataclasses.dataclass(frozen=True)
class Config(off_policy.ReplayConfig):
  """SAC hyperparameters; the defaults suit a 2-core CPU.

  Collection, replay and targets: the fields of `off_policy.ReplayConfig`
  (steps_per_iteration, updates_per_iteration, warmup_steps,
  replay_capacity, batch_size, discount, tau), with these defaults changed:
  """
  n_step: int = 1
  # Networks and optimisation.
  hidden_sizes: Tuple[int, ...] = (256, 256)
  layer_norm: bool = True
  # The critic's torso: 0 residual blocks keeps the MLP of hidden_sizes;
  # N > 0 makes it BRO's residual net (`networks.ResidualMLP`: N blocks,
  # every layer critic_width wide; BRO's critic is N = 2, width 512).
  critic_blocks: int = 0
  critic_width: int = 512
  # DrQ's rate for the DMC tasks (the SAC papers' 3e-4 is variant `lr3e-4`
  # in DMC.md; the module docstring says what the two give).
  actor_lr: float = 1e-3
  critic_lr: float = 1e-3
  alpha_lr: float = 3e-4
  max_grad_norm: Optional[float] = None
  init_alpha: float = 0.1
  target_entropy: Optional[float] = None  # Default: -action_size.
  # Observations standardised by running statistics of the replay's
  # batches (`off_policy.observe_batch`; the module docstring has the
  # evidence). On by default for the deterministic recipes too
  # (`off_policy.Config`), off for MPO.
  normalize_observations: bool = True  # Absent from a saved config: False.
  # From pixels (dict observations only; see the module docstring): the
  # `pixels` field (`networks.PixelConfig`: encoder_channels,
  # encoder_strides, encoder_feature_size, encoder_pooling, encoder_tau and
  # augment_pad).


# How SAC runs unless told otherwise (run settings, not Config fields;
# `--set total_steps=...` changes them): 8 envs, 150k env steps, and action
# repeat 4 off the task table (control steps per decision, rewards summed;
# returns and env step counts still count every control step): the DeepMind
# Control benchmarks' device (PlaNet, DrQ). 4 makes `roxie train` reach
# CartpoleSwingup >= 800 on 2 CPU cores in minutes; on the table's tasks
# (CartpoleSwingup's is 8) the table's value replaces it.
RUN_DEFAULTS = RunDefaults(num_envs=8, total_steps=150_000, action_repeat=4)


# What `roxie train --obs pixels` changes in the defaults above (`--set`
# still wins): the off-policy recipes' shared settings from pixels (DrQ's
# for the DeepMind Control tasks, scaled to a 2-core CPU; see
# `off_policy.PIXEL_RUN_DEFAULTS`: raw observations among them), with DrQ's
# actor and temperature learning rates.
PIXEL_DEFAULTS = dict(off_policy.PIXEL_RUN_DEFAULTS, actor_lr=1e-3,
                      alpha_lr=1e-3)


class State(NamedTuple):
  actor: hk.Params
  critic: hk.Params
  target_critic: hk.Params
  log_alpha: jnp.ndarray
  actor_opt: optax.OptState
  critic_opt: optax.OptState
  alpha_opt: optax.OptState
  steps: jnp.ndarray  # [] int32 updates made.
  # Running observation statistics (`normalize_observations`), else None.
  obs_stats: Optional[Any] = None


def _encoder(c: Config, spec: EnvSpec) -> networks.SharedEncoder:
  """The encoder SAC reads `spec`'s observations through (identity if flat)."""
  return networks.observation_encoder(c, spec)


def _actor_network(c: Config, spec: EnvSpec) -> hk.Transformed:
  # The actor reads the encoder's features (flat: the observation itself).
  obs_size = _encoder(c, spec).obs_size
  return hk.without_apply_rng(hk.transform(
      lambda o: networks.TanhGaussianActor(
          action_size=spec.action_size, hidden_sizes=c.hidden_sizes,
          layer_norm=c.layer_norm, obs_size=obs_size)(o)))


def policy_params(state: State) -> hk.Params:
  """What acting needs from a trained state (`Recipe.policy.params`).

  The actor's parameters, from pixels the critic's (online) encoder, and
  with `normalize_observations` the observation statistics.
  """
  return off_policy.with_obs_stats(networks.policy_params_with_encoder(
      {'actor': state.actor}, state.critic), state)


def make_policy(config: Config, spec: EnvSpec):
  """The deterministic policy alone: `apply(params, obs) -> action`.

  Builds only the actor network (and the encoder, from pixels; no critic
  head, no optimiser), for exported bundles (`roxie.load_policy`). `params`
  is `policy_params(state)`; the action is the one
  `act(state, obs, key, explore=False)` takes.
  """
  actor = _actor_network(config, spec)
  encoder = _encoder(config, spec)
  return off_policy.standardised_policy(config, lambda params, obs: actor.apply(
      params['actor'], networks.policy_input(encoder, params, obs)).mode())


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the SAC recipe for environments of `spec`."""
  c = config
  actor_opt = optim.adam(c.actor_lr, c.max_grad_norm)
  critic_opt = optim.adam(c.critic_lr, c.max_grad_norm)
  alpha_opt = optax.adam(c.alpha_lr)

  actor = _actor_network(c, spec)
  encoder = _encoder(c, spec)
  q_net = hk.without_apply_rng(hk.transform(
      lambda o, a: networks.TwinQCritic(
          **off_policy.torso_kwargs(c), obs_size=encoder.obs_size,
          action_size=spec.action_size)(o, a)))
  # Observations reach the actor and the Q-heads as the encoder's features
  # (networks.encoded_critic): from pixels the critic owns the encoder and
  # the actor reads it through a stop-gradient; flat, the critic is `q_net`
  # itself and the features are the observation.
  critic = networks.encoded_critic(q_net, encoder)
  target_entropy = (c.target_entropy if c.target_entropy is not None
                    else -float(spec.action_size))

  def init(key, env_spec: EnvSpec) -> State:
    check_spec(spec, env_spec)
    (k_actor, k_q), (k_encoder,) = critic.split_keys(key, 2)
    obs = encoder.dummy_obs(1)
    critic_params = critic.init(k_q, obs, jnp.zeros((1, spec.action_size)),
                                encoder_key=k_encoder)
    actor_params = actor.init(k_actor, critic.actor_input(critic_params, obs))
    log_alpha = jnp.asarray(jnp.log(c.init_alpha), jnp.float32)
    return State(actor=actor_params, critic=critic_params,
                 target_critic=critic_params, log_alpha=log_alpha,
                 actor_opt=actor_opt.init(actor_params),
                 critic_opt=critic_opt.init(critic_params),
                 alpha_opt=alpha_opt.init(log_alpha),
                 steps=jnp.zeros((), jnp.int32),
                 obs_stats=off_policy.obs_stats_init(c, spec))

  def act(state: State, obs, key, *, explore: bool = True):
    obs = off_policy.standardise(c, state.obs_stats, obs)
    dist = actor.apply(state.actor, critic.actor_input(state.critic, obs))
    return (dist.sample(key) if explore else dist.mode()), {}

  def update(state: State, batch: Transition, key):
    alpha = jnp.exp(state.log_alpha)
    obs_stats, batch = off_policy.observe_batch(c, state.obs_stats, batch)
    # DrQ: from pixels each observation is shifted with its own key.
    (k_next, k_pi), (k_aug, k_aug_next) = critic.split_keys(key, 2, 2)
    obs = encoder.augment(k_aug, batch.obs)
    next_obs = encoder.augment(k_aug_next, batch.next_obs)

    # Critic: soft TD target from the twin target critics' minimum. The
    # actor reads the online encoder's features, the target critic its own.
    next_a, next_logp = actor.apply(
        state.actor, critic.actor_input(state.critic, next_obs)
    ).sample_and_log_prob(k_next)
    q1_next, q2_next = critic.apply(state.target_critic, next_obs, next_a)
    q_next = losses.clipped_double_q(q1_next, q2_next)
    target = jax.vmap(lambda r, d, q, lp: losses.sac_critic_target(
        r, d, q, lp, alpha=alpha))(batch.reward, batch.discount, q_next, next_logp)
    target = jax.lax.stop_gradient(target)

    def critic_loss(params):
      feats = critic.features(params, obs)  # From pixels: trains the encoder.
      q = critic.head(params, feats, batch.action)  # [2, N]
      return (0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0)),
              (q, feats))

    (c_loss, (q, feats)), grads = jax.value_and_grad(
        critic_loss, has_aux=True)(state.critic)
    updates, critic_opt_state = critic_opt.update(grads, state.critic_opt,
                                                  state.critic)
    critic_params = optax.apply_updates(state.critic, updates)
    # The actor reuses the critic step's features, detached (from pixels one
    # encoder pass fewer; the encoder moved by one critic step since).
    feats = jax.lax.stop_gradient(feats)

    # Actor: maximise the soft Q of its own reparameterised actions.
    def actor_loss(params):
      a, logp = actor.apply(params, feats).sample_and_log_prob(k_pi)
      q_pi = losses.clipped_double_q(*critic.head(critic_params, feats, a))
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

    # Targets: the Q-heads at tau, from pixels the target encoder at
    # encoder_tau.
    target_critic = critic.polyak(critic_params, state.target_critic, c.tau,
                                  c.pixels.encoder_tau)
    new_state = State(
        actor=actor_params, critic=critic_params,
        target_critic=target_critic,
        log_alpha=log_alpha, actor_opt=actor_opt_state,
        critic_opt=critic_opt_state, alpha_opt=alpha_opt_state,
        steps=state.steps + 1, obs_stats=obs_stats)
    metrics = {'critic_loss': c_loss, 'actor_loss': a_loss,
               'alpha_loss': al_loss, 'alpha': alpha, 'q': jnp.mean(q),
               'entropy': -jnp.mean(logp)}
    return new_state, metrics

  return off_policy.replay_recipe(
      'sac', c, init, act, update,
      Policy(params=policy_params, apply=make_policy(c, spec)))
