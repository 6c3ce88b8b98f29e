"""MPO: maximum a posteriori policy optimisation with a Q critic.

"Maximum a Posteriori Policy Optimisation", Abdolmaleki et al., 2018
(https://arxiv.org/abs/1806.06920), with the decoupled Gaussian M-step of
"Relative Entropy Regularized Policy Iteration", Abdolmaleki et al., 2018
(https://arxiv.org/abs/1812.02256).

One update, on an n-step replay batch (s, a, R, d, s'):

  1. Draw N actions per s' from the *target* policy (pre-clip Gaussian
     samples) and score them with the *target* critic on the clipped actions,
     which is what the environment would execute.
  2. Critic: TD towards R + d * mean_i Q_target(s', clip(a_i)).
  3. E-step at s': weights softmax(Q / temperature), temperature set by its
     dual so that KL(weights || target policy) stays near `epsilon`.
  4. M-step at s': weighted maximum likelihood of the pre-clip samples (their
     log-likelihood, not that of the clipped action), mean and std fitted
     separately under KL(target || online) bounds `epsilon_mean` and
     `epsilon_std`, with Lagrange multipliers alpha_mean, alpha_std.
  5. Duals (log temperature, log alphas) take a step of their own optimiser
     (Adam, `dual_lr`); targets follow the online networks.

Action bounds. The Gaussian is not squashed, and the critic cannot tell
apart samples beyond a bound (they clip to the same action), so on tasks
whose best actions sit at the bounds (CartpoleSwingup's swing) the E-step
rewards the far tails and the M-step drifts the mean out of bounds and grows
the std. As in Acme's MPO (after "A Distributional View on Multi-Objective
Policy Optimization", Abdolmaleki et al., 2020), a second objective, the
penalty -||a - clip(a)||, gets its own E-step (own temperature, KL bound
`action_penalty_epsilon`) and its weights join the M-step's: the policy is
fitted to both improved distributions. `action_penalty_epsilon = 0` turns it
off.

Duals (`dual_transform`). The temperatures and the multipliers are learnt
through softplus, as in Acme's and tonic's MPO: an Adam step adds about
`dual_lr` to a dual above ~1. Under 'exp' (roxie's default until
2026-12-04: their logs are learnt) each step multiplies it instead, and on
WalkerWalk the std's multiplier reached 1.1e5 within 25k env steps
(1e4-3e4 later), while the mean's KL stayed far inside its bound. At that
weight the std's penalty can outweigh the weighted likelihood in the
policy's gradient, which the mean shares with the std (one torso, one
global-norm clip): the likely reason the mean learnt slowly. Seed 0 read
57 at 100k under 'exp' and 213 under softplus, where alpha_std
stays at 15-60 and the std's KL runs 2-4x its bound; the std itself is
~0.49 under both. Over the six tasks, 3 seeds, softplus leads on every
task at 100k and on five of six at 500k (return / CURL IQM 0.20 against
'exp's 0.12 at 100k, 0.53 against 0.44 at 500k; ReacherEasy 615 against
369, CartpoleSwingup 542 against 428; BallInCup 881 against 919, one seed
at 786, still above MPO's 877) at the same cost per update
(benchmarks/RESULTS.md, "MPO's duals through softplus").

Updates (`updates_per_iteration`). MPO makes the shared 4 gradient steps
per burst of the other off-policy recipes (one update per two agent steps
at 8 envs); it made 2 until 2026-12-04. Twice the updates cost about twice
the update's CPU and, 3 seeds at 500k, lead on all six tasks:
CartpoleSwingup 852 against 542 (CURL's State SAC 848), ReacherEasy 778
against 615, FingerSpin 527 against 403, CheetahRun 385 against 271,
WalkerWalk 812 against 435, BallInCup 956 against 881; a run costs 6.3
(CartpoleSwingup) to 25.9 (WalkerWalk) CPU minutes, inside the 30 a
default may take (benchmarks/RESULTS.md, "MPO at the shared update
count"; the old default's rows are variant `upi2`). At 100k it leads on
four (WalkerWalk 275 against 189, FingerSpin 270 against 55) and trails on
ReacherEasy (137 against 217) and BallInCup (227 against 480). The
critic is nearer its policy's value early on (logged Q over the
discounted value of the evaluation return at 100k on WalkerWalk 0.62-0.75
against 0.40-0.51) and near level at 500k under both (0.6-1.07), so what
still holds MPO short of CURL's column on FingerSpin and CheetahRun is
how fast its policy improves, not its critic.

Learning rates (`policy_lr`, `critic_lr`). Both are 1e-3 (DrQ's, as
SAC's), 3e-4 until 2026-12-05. At 500k, 3 seeds, 1e-3 leads or is level
on all six tasks: CartpoleSwingup 860 against 852, ReacherEasy 907 against
778 (meets MPO's 831), FingerSpin 549 against 527, CheetahRun 442 against
385, WalkerWalk 821 against 812, BallInCup 959 against 956; return / CURL
IQM 0.87 [0.83, 0.92] against 0.82 [0.76, 0.87]. At 100k it leads on all
six (0.45 against 0.28; BallInCup 724, meeting 671, against 227). An
update costs ~1.13x as much (benchmarks/run_cost.py on WalkerWalk); the old
default's rows are variant `lr3e-4` (benchmarks/RESULTS.md, "MPO's
learning rates to DrQ's 1e-3"). From pixels the policy keeps 3e-4
(PIXEL_DEFAULTS below).

Known limit (issue 13): the std stays near its initial 0.5 (0.42 at 500k
on CartpoleSwingup). Freer std bounds do not help under softplus
(`epsilon_std` 1e-4 and 1e-3, 2 updates a burst: 363 and 286 at 250k on
WalkerWalk, seed 0, against 433). Earlier rounds,
under 'exp', on CartpoleSwingup ("MPO's plateau", rounds one to four):
no penalty objective, the std fitted around the online mean, the penalty tilt
multiplied into the Q tilt, a critic bootstrapping on the mean action,
wider or narrower bounds on every KL, a smaller initial std, a
tanh-squashed policy and a target policy 10-100x faster each left the
plateau where it was; 32 envs reach it later (521 at 4M env steps); four
times the updates gave 564 at 200k on seed 0 against 356.

Steps 1-4 share one set of target-critic evaluations, as Acme's MPO learner
does: the policy is improved at the batch's bootstrap states s', which are
replay states like any other. Those evaluations (num_samples actions at
each of the batch's next states) are most of an update's time on a CPU; the
policy and critic torsos use ELU as Acme's do, through `networks.elu`
(exp(x) - 1 where XLA's CPU backend would emit a slow expm1; ~0.89x the
wall time of a default WalkerWalk run, benchmarks/RESULTS.md).

Targets: with `target_update_period == 0` (default) both target networks
track the online ones by Polyak averaging with `tau` after every update;
with `target_update_period = K > 0` they are hard copies refreshed every K
updates (as in Acme's MPO, K = 100).

Actions: the policy is an unsquashed diagonal Gaussian with state-dependent
std (`roxie.networks.GaussianActor`); `act` clips samples (or the mean, for
evaluation) into [-1, 1], and the critic always sees clipped actions, so
Q(s, clip(a)) is the value of the pre-clip sample a whose likelihood the
M-step maximises.

Published settings (the original Roxie release) are one config away:

  Config(steps_per_iteration=2, updates_per_iteration=20,
         warmup_steps=10_000, batch_size=512, n_step=5,
         hidden_sizes=(256, 256), num_samples=20, epsilon=0.1,
         epsilon_mean=1e-3, epsilon_std=1e-5, dual_lr=1e-2, policy_lr=3e-4,
         critic_lr=3e-4, tau=0.005, max_grad_norm=1.0)

run with 1,024 envs for 500M env steps (run settings: `--num-envs 1024
--steps 500000000`): 2,048 env steps and 20 gradient steps per iteration.

From pixels (dict observations, `roxie train --obs pixels`), as the other
off-policy recipes and DrQ/SAC-AE: a conv encoder (`networks.encoded_critic`)
belongs to the critic (`critic['encoder']`, the Q-head's `critic['q']`) and
is trained by the critic loss only; the policy reads the online encoder's
features through a stop-gradient (acting and the M-step); the target policy
and the target critic read the target critic's encoder; sampled observations
and next observations are randomly shifted (`augment_pad`). Each next
observation is encoded once per update and its features tiled over the N
samples, so the conv torso's cost does not grow with `num_samples` (three
encoder passes per update: obs by the online encoder for the critic loss,
next_obs by the target encoder for steps 1-3, next_obs by the online encoder
for the M-step). The target encoder follows the targets' rule: with
`target_update_period == 0` it is Polyak-averaged at `encoder_tau` (the
Q-head and the policy at `tau`), as in SAC and DDPG; with
`target_update_period = K` it is hard-copied with the rest of the target
critic every K updates (as Acme's target observation network), so the frozen
target Q-head keeps reading the features it was copied with. Flat
observations are unaffected.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping, NamedTuple, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from roxie import losses, networks, optim
from roxie.agents import off_policy
from roxie.types import EnvSpec, Policy, Recipe, RunDefaults, Transition, check_spec

# Each dual stays in [e^-18 (~1.5e-8), 1e6] under either transform. The floor
# keeps it from vanishing, the ceiling from growing without limit. Under
# 'exp' (duals in log space), without the ceiling a KL
# bound the policy cannot meet (Adam moves the online std by at most about
# policy_lr a step, however large its multiplier; the std's KL on the
# 21-dimensional HumanoidStand stayed ~9x its bound) raises the multiplier
# exponentially: 4e10 at 10k env steps, 1.2e21 at 18k, then the float32
# update overflowed to NaN (benchmarks/RESULTS.md, humanoid.py). At 1e6 a
# KL of 1e-5 already weighs ~10, as much as the weighted log-likelihood.
# CartpoleSwingup's defaults stay below 5.3e3 for 200k env steps, but over
# 600k one seed's alpha_std reached 8.2e5, near the ceiling: the std's bound
# binds (benchmarks/RESULTS.md, "MPO's plateau, continued").
_MIN_LOG_DUAL = -18.
_MAX_LOG_DUAL = math.log(1e6)


def _inverse_softplus(x: float) -> float:
  # log(exp(x) - 1), stable for large x.
  return x + math.log(-math.expm1(-x))


# `Config.dual_transform`: how each dual's unconstrained parameter maps to its
# positive value, with that map's inverse (for the initial values) and the
# parameter's range, the same positive range [e^-18, 1e6] for both.
_DUAL_TRANSFORMS = {
    'exp': (jnp.exp, math.log, (_MIN_LOG_DUAL, _MAX_LOG_DUAL)),
    'softplus': (jax.nn.softplus, _inverse_softplus,
                 (_inverse_softplus(math.exp(_MIN_LOG_DUAL)),
                  _inverse_softplus(1e6))),
}


@dataclasses.dataclass(frozen=True)
class Config(off_policy.ReplayConfig):
  """MPO hyperparameters; the defaults suit a 2-core CPU.

  Collection, replay and targets: the fields of `off_policy.ReplayConfig`
  (steps_per_iteration, warmup_steps,
  replay_capacity, batch_size, n_step, discount, and tau, the Polyak rate
  used when target_update_period == 0). updates_per_iteration is the
  shared 4, as for the other off-policy recipes (2 until 2026-12-04:
  module docstring).
  """
  target_update_period: int = 0  # > 0: hard target copies every K updates.
  # Networks and optimisation.
  hidden_sizes: Tuple[int, ...] = (256, 256)
  layer_norm: bool = True
  # The critic's torso: 0 residual blocks keeps the MLP of hidden_sizes;
  # N > 0 makes it BRO's residual net (`networks.ResidualMLP`: N blocks,
  # every layer critic_width wide; BRO's critic is N = 2, width 512).
  critic_blocks: int = 0
  critic_width: int = 512
  policy_lr: float = 1e-3
  critic_lr: float = 1e-3
  max_grad_norm: Optional[float] = 1.0
  # Initial std exp(mean(log_std_bounds)) ~ 0.5; the head bounds it softly.
  log_std_bounds: Tuple[float, float] = (-5., 3.6)
  # MPO.
  num_samples: int = 20  # N actions per state for the E-step.
  epsilon: float = 0.1  # E-step KL bound.
  epsilon_mean: float = 1e-3  # M-step KL bound on the mean.
  epsilon_std: float = 1e-5  # M-step KL bound on the std.
  per_dimension: bool = True  # Bound each action dimension's KL (as Acme).
  dual_lr: float = 1e-2
  init_temperature: float = 1.
  init_alpha_mean: float = 1.
  init_alpha_std: float = 10.
  # How the duals (temperatures, multipliers) are parametrised: 'softplus'
  # (as Acme's and tonic's MPO: Adam's steps add to a dual above ~1) or
  # 'exp' (their logs are learnt, so steps multiply them; the default until
  # 2026-12-04, see the module docstring).
  dual_transform: str = 'softplus'
  # What a config.json or policy bundle without the field means (`roxie.
  # config.from_dict`; adds to `off_policy.ReplayConfig.ABSENT_MEANS`): runs
  # written before the field trained with 'exp'.
  ABSENT_MEANS: ClassVar[Mapping[str, str]] = {'dual_transform': 'exp'}
  # Out-of-bounds action penalty (second objective; 0 turns it off).
  action_penalty_epsilon: float = 1e-3
  # From pixels (dict observations only; see the module docstring): the
  # `pixels` field (`networks.PixelConfig`: encoder_channels,
  # encoder_strides, encoder_feature_size, encoder_pooling, encoder_tau
  # (Polyak targets only) and augment_pad).


# How MPO runs unless told otherwise (run settings, not Config fields): 8
# envs, 500k env steps (CartpoleSwingup passes 800 at 120k-280k, 3 seeds,
# dmc_curves.csv; 381k-461k at the old 3e-4 rates; 200k until MPO took 4
# updates a burst), no action repeat off the task
# table (runs from pixels use 8, as DrQ does on Cartpole: PIXEL_DEFAULTS).
RUN_DEFAULTS = RunDefaults(num_envs=8, total_steps=500_000, action_repeat=1)


# What `roxie train --obs pixels` changes in the defaults above (`--set`
# still wins): the off-policy recipes' shared settings from pixels
# (`off_policy.PIXEL_RUN_DEFAULTS`: DrQ's for the DeepMind Control tasks,
# scaled to a 2-core CPU: 4 envs, action repeat 8, a 100k replay of frames,
# batch 128, one update per agent step). The critic, which trains the
# encoder, takes DrQ's larger learning rate; the policy keeps 3e-4 (the
# state-based default's before 2026-12-05; the pixel runs were measured at
# it), since its step is bounded by the M-step's KL constraints rather than
# by the learning rate. `tau` 0.01 as the other recipes from pixels (the target
# policy is also the M-step's trust-region anchor, so this is also how fast
# the policy may move). `num_samples` stays 20: from pixels the conv torso
# dominates the update, and its cost does not grow with N (each observation
# is encoded once and its features tiled).
PIXEL_DEFAULTS = dict(off_policy.PIXEL_RUN_DEFAULTS, policy_lr=3e-4)


class Duals(NamedTuple):
  # Unconstrained parameters, mapped to the positive duals by
  # `Config.dual_transform`: logs under 'exp', softplus inverses under
  # 'softplus' (the `log_` names are kept: saved states carry them).
  log_temperature: jnp.ndarray  # []
  log_alpha_mean: jnp.ndarray  # [A] per dimension, else []
  log_alpha_std: jnp.ndarray  # [A] per dimension, else []
  log_penalty_temperature: jnp.ndarray  # [] for the action-bound penalty.


class State(NamedTuple):
  policy: hk.Params
  target_policy: hk.Params
  critic: hk.Params
  target_critic: hk.Params
  duals: Duals
  policy_opt: optax.OptState
  critic_opt: optax.OptState
  dual_opt: optax.OptState
  steps: jnp.ndarray  # [] int32 updates made.
  # Running observation statistics (`normalize_observations`), else None.
  obs_stats: Optional[Any] = None


def _policy_network(c: Config, spec: EnvSpec) -> hk.Transformed:
  # The policy reads the encoder's features (flat: the observation itself).
  obs_size = networks.observation_encoder(c, spec).obs_size
  return hk.without_apply_rng(hk.transform(
      lambda o: networks.GaussianActor(
          action_size=spec.action_size, hidden_sizes=c.hidden_sizes,
          activation=networks.elu, layer_norm=c.layer_norm,
          state_dependent_std=True, log_std_bounds=c.log_std_bounds,
          obs_size=obs_size)(o)))


def policy_params(state: State) -> hk.Params:
  """What acting needs from a trained state (`Recipe.policy.params`).

  The policy's parameters, from pixels the critic's (online) encoder, and
  with `normalize_observations` the observation statistics.
  """
  return off_policy.with_obs_stats(networks.policy_params_with_encoder(
      {'policy': state.policy}, state.critic), state)


def make_policy(config: Config, spec: EnvSpec):
  """The deterministic policy alone: `apply(params, obs) -> action`.

  Builds only the policy network (and from pixels the encoder; no critic
  head, no optimiser), for exported bundles (`roxie.load_policy`); `params`
  is `policy_params(state)` and the action is the one
  `act(state, obs, key, explore=False)` takes: the Gaussian's mean, clipped
  to [-1, 1].
  """
  policy = _policy_network(config, spec)
  encoder = networks.observation_encoder(config, spec)
  return off_policy.standardised_policy(config, lambda params, obs: jnp.clip(
      policy.apply(params['policy'],
                   networks.policy_input(encoder, params, obs)).mode(),
      -1., 1.))


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the MPO recipe for environments of `spec`."""
  c = config
  if c.num_samples < 1:
    raise ValueError(f'num_samples must be >= 1, got {c.num_samples}.')
  if c.dual_transform not in _DUAL_TRANSFORMS:
    raise ValueError(f'dual_transform must be one of '
                     f'{sorted(_DUAL_TRANSFORMS)}, got {c.dual_transform!r}.')
  positive, inverse, (dual_low, dual_high) = _DUAL_TRANSFORMS[
      c.dual_transform]
  policy_opt = optim.adam(c.policy_lr, c.max_grad_norm)
  critic_opt = optim.adam(c.critic_lr, c.max_grad_norm)
  dual_opt = optax.adam(c.dual_lr)

  policy = _policy_network(c, spec)
  encoder = networks.observation_encoder(c, spec)  # Identity if flat.
  q_net = hk.without_apply_rng(hk.transform(
      lambda o, a: networks.QCritic(
          **off_policy.torso_kwargs(c), activation=networks.elu,
          obs_size=encoder.obs_size, action_size=spec.action_size)(o, a)))
  # From pixels the critic encodes observations (networks.encoded_critic);
  # flat, `critic` is `q_net` itself and its helpers are identities.
  critic = networks.encoded_critic(q_net, encoder)
  alpha_shape = (spec.action_size,) if c.per_dimension else ()

  def init(key, env_spec: EnvSpec) -> State:
    check_spec(spec, env_spec)
    k1, k2 = jax.random.split(key)
    obs = encoder.dummy_obs(1)
    act = jnp.zeros((1, spec.action_size))
    critic_params = critic.init(k2, obs, act)
    policy_params = policy.init(k1, critic.actor_input(critic_params, obs))
    raw = lambda x, shape=(): jnp.full(shape, inverse(x), jnp.float32)
    duals = Duals(log_temperature=raw(c.init_temperature),
                  log_alpha_mean=raw(c.init_alpha_mean, alpha_shape),
                  log_alpha_std=raw(c.init_alpha_std, alpha_shape),
                  log_penalty_temperature=raw(c.init_temperature))
    return State(policy=policy_params, target_policy=policy_params,
                 critic=critic_params, target_critic=critic_params,
                 duals=duals, policy_opt=policy_opt.init(policy_params),
                 critic_opt=critic_opt.init(critic_params),
                 dual_opt=dual_opt.init(duals), steps=jnp.zeros((), jnp.int32),
                 obs_stats=off_policy.obs_stats_init(c, spec))

  def act(state: State, obs, key, *, explore: bool = True):
    obs = off_policy.standardise(c, state.obs_stats, obs)
    dist = policy.apply(state.policy, critic.actor_input(state.critic, obs))
    action = dist.sample(key) if explore else dist.mode()
    return jnp.clip(action, -1., 1.), {}

  def update(state: State, batch: Transition, key):
    n = c.num_samples
    obs_stats, batch = off_policy.observe_batch(c, state.obs_stats, batch)
    # DrQ: from pixels obs and next_obs are each randomly shifted.
    (key,), (k_aug,) = critic.split_keys(key, 1)
    batch = critic.augment(k_aug, batch)
    # 1. N pre-clip samples per next state from the target policy, scored by
    # the target critic on the clipped actions: [N, B, A] and [N, B]. From
    # pixels each next observation is encoded once, by the target encoder,
    # and its features are tiled over the N samples.
    next_feats = critic.features(state.target_critic, batch.next_obs)
    target_dist = policy.apply(state.target_policy, next_feats)
    samples = jax.vmap(target_dist.sample)(jax.random.split(key, n))
    tiled = jnp.broadcast_to(next_feats, (n,) + next_feats.shape)
    q_samples = critic.head(state.target_critic, tiled,
                            jnp.clip(samples, -1., 1.))

    # 2. Critic: n-step TD towards the expected target Q under the policy.
    target = jax.vmap(losses.td_target)(batch.reward, batch.discount,
                                        jnp.mean(q_samples, 0))

    def critic_loss(params):
      q = critic.apply(params, batch.obs, batch.action)
      return 0.5 * jnp.mean(jnp.square(q - target)), q

    (c_loss, q), grads = jax.value_and_grad(critic_loss, has_aux=True)(
        state.critic)
    critic_params, critic_opt_state = optim.step(critic_opt, state.critic,
                                                 state.critic_opt, grads)
    # The policy reads the (updated) online encoder's features of s' through
    # a stop-gradient, as `act` will: its loss never reaches the encoder.
    policy_feats = critic.actor_input(critic_params, batch.next_obs)

    # 3-4. E-step and decoupled M-step at each next state; the loss carries
    # gradients to the policy (through the online mean/std) and to the duals.
    # The penalty objective: how far each pre-clip sample is out of bounds.
    penalty = -jnp.linalg.norm(samples - jnp.clip(samples, -1., 1.), axis=-1)

    def one_state(duals: Duals, q_i, p_i, a_i, m, s, tm, ts):
      e_step = losses.mpo_e_step(q_i, duals.log_temperature,
                                 epsilon=c.epsilon, positive_fn=positive)
      weights, loss = e_step.weights, e_step.temperature_loss
      pen_eps = c.action_penalty_epsilon
      if isinstance(pen_eps, jax.core.Tracer) or pen_eps > 0:
        e_pen = losses.mpo_e_step(p_i, duals.log_penalty_temperature,
                                  epsilon=pen_eps, positive_fn=positive)
        # Traced (one per member of a population), a member with 0 adds
        # nothing, as if the penalty were off.
        on = pen_eps > 0
        weights = weights + jnp.where(on, e_pen.weights, 0.)
        loss = loss + jnp.where(on, e_pen.temperature_loss, 0.)
      m_step = losses.mpo_m_step(
          m, s, tm, ts, a_i, weights, duals.log_alpha_mean,
          duals.log_alpha_std, epsilon_mean=c.epsilon_mean,
          epsilon_std=c.epsilon_std, per_dimension=c.per_dimension,
          positive_fn=positive)
      return losses.MpoOutput(loss=loss + m_step.loss, e_step=e_step,
                              m_step=m_step)

    def policy_loss(params, duals: Duals):
      online = policy.apply(params, policy_feats)
      per_state = jax.vmap(lambda *xs: one_state(duals, *xs),
                           in_axes=(1, 1, 1, 0, 0, 0, 0))
      out = per_state(q_samples, penalty, samples, online.mean,
                      online.stddev, target_dist.mean, target_dist.stddev)
      return jnp.mean(out.loss), out

    (p_loss, out), (p_grads, d_grads) = jax.value_and_grad(
        policy_loss, argnums=(0, 1), has_aux=True)(state.policy, state.duals)
    policy_params, policy_opt_state = optim.step(policy_opt, state.policy,
                                                 state.policy_opt, p_grads)
    duals, dual_opt_state = optim.step(dual_opt, state.duals, state.dual_opt,
                                       d_grads)
    duals = jax.tree.map(
        lambda x: jnp.clip(x, dual_low, dual_high), duals)

    # 5. Targets: Polyak averaging (from pixels the target encoder at
    # encoder_tau), or hard copies (the encoder's too) every K updates.
    steps = state.steps + 1
    if c.target_update_period > 0:
      follow = lambda new, old: optax.periodic_update(
          new, old, steps, c.target_update_period)
      follow_critic = follow
    else:
      follow = lambda new, old: optax.incremental_update(new, old, c.tau)
      follow_critic = lambda new, old: critic.polyak(new, old, c.tau,
                                                     c.pixels.encoder_tau)
    new_state = State(
        policy=policy_params, target_policy=follow(policy_params,
                                                   state.target_policy),
        critic=critic_params, target_critic=follow_critic(
            critic_params, state.target_critic),
        duals=duals, policy_opt=policy_opt_state,
        critic_opt=critic_opt_state, dual_opt=dual_opt_state, steps=steps,
        obs_stats=obs_stats)

    weights = out.e_step.weights  # [B, N]
    e_step_kl = jnp.mean(jnp.sum(weights * jnp.log(weights * n + 1e-12), -1))
    metrics = {
        'critic_loss': c_loss, 'policy_loss': p_loss, 'q': jnp.mean(q),
        'temperature': jnp.mean(out.e_step.temperature),
        'alpha_mean': jnp.mean(out.m_step.alpha_mean),
        'alpha_std': jnp.mean(out.m_step.alpha_std),
        'kl_e_step': e_step_kl,
        'kl_mean': jnp.mean(jnp.sum(out.m_step.kl_mean, -1)),
        'kl_std': jnp.mean(jnp.sum(out.m_step.kl_std, -1)),
        'std': jnp.mean(target_dist.stddev),
        'out_of_bounds': jnp.mean(jnp.abs(target_dist.mean) > 1.)}
    return new_state, metrics

  return off_policy.replay_recipe(
      'mpo', c, init, act, update,
      Policy(params=policy_params, apply=make_policy(c, spec)))
