"""D4PG: distributional deterministic policy gradient with n-step returns.

"Distributed Distributional Deterministic Policy Gradients", Barth-Maron et
al., 2018 (https://arxiv.org/abs/1804.08617).

DDPG whose critic is a categorical distribution over fixed atoms on
[v_min, v_max]. The critic is trained by cross-entropy to the n-step
distributional Bellman target, projected back onto the atoms; the replay
already folds each n-step window into `Transition(reward, discount,
next_obs)`, so the target is the target critic's distribution at
(s', mu'(s')) shifted by `reward` and scaled by `discount`. The actor climbs
the critic's mean. (The paper's distributed actors and prioritised replay
are not part of this recipe.)

Support: by default the atoms span the suite's discounted values with
margins, scaled by the env's action repeat: the published [-5, 120] at
discount 0.99 without one (`off_policy.CategoricalConfig`). The published large-scale settings are
`off_policy.Config`'s, plus num_atoms=101, v_min=-5.0, v_max=120.0.

Defaults (since 2026-12-06): DrQ's learning rate for the DeepMind Control
tasks, 1e-3 for actor and critic (the skeleton's 3e-4 before, as SAC and
MPO moved), and standardised observations (`normalize_observations`, as
SAC's; `off_policy.observe_batch`). Chosen on all six tasks, 3 seeds each,
against the old default (its rows are variant `lr3e-4-noobsnorm` in
DMC.md; standardising alone at 3e-4 is variant `lr3e-4`): at 100k it leads
on every task, CartpoleSwingup 852 against 747, ReacherEasy 865 against
541, FingerSpin 730 against 396 (`lr3e-4`: 650), CheetahRun 332 against
140 (`lr3e-4`: 236), WalkerWalk 718 against 461, BallInCup 948 against
924; return / CURL IQM 0.98 [0.93, 1.01] against 0.65 [0.55, 0.73].
At 500k it leads or is level on five: FingerSpin 928 against 742
(meeting CURL's 923), CheetahRun 691 against 476, WalkerWalk 964 against
913 (meeting 948), BallInCup 967 against 964, CartpoleSwingup 860 against
856, and trails on ReacherEasy, 925 against 957 (one seed at 871; both
meet 923); return / CURL IQM 1.00 [0.98, 1.01] against 0.96 [0.92, 0.98]
(benchmarks/RESULTS.md, "D4PG at DrQ's learning rate on standardised
observations").
The critic keeps up with its faster policy (on CheetahRun at 100k its mean
Q is 0.80-0.96 of the discounted value of the evaluation return,
`benchmarks/dmc_metrics.py`). Neither change adds work to an update
(standardising cost SAC nothing `benchmarks/run_cost.py` could measure).
(These are 3-step figures: the old default of the next paragraph.)

One-step targets (`n_step=1`) since 2026-12-07, as TD3 and DDPG took the
same day; with D4PG's they became the skeleton's default. The 3-step rows
are variant `n3` (benchmarks/RESULTS.md, "D4PG takes one-step targets"). 3
seeds, against 3-step targets, at 500k it leads on all six: ReacherEasy 972
against 925, FingerSpin 952 against 928, CheetahRun 728 [662, 798] against
691 (67 short of 795, the interval reaching it), WalkerWalk 972 against 964,
BallInCup 977 against 967 (now meeting CURL's 974), CartpoleSwingup 881
against 860; 5 of 6 cells met against 4, return / CURL IQM 1.03 [1.01, 1.03]
against 1.00 [0.98, 1.01]. At 100k WalkerWalk gains most (954 against 718,
now meeting 891), CheetahRun 429 against 332, BallInCup 958 against 948,
CartpoleSwingup 857 against 852 (kept, where TD3, DDPG and TD4 lost it); it
trails on FingerSpin (630 against 730, both short of 811) and ReacherEasy,
whose cell it loses: over 5 seeds 490 / 908 / 352 / 330 / 400 (IQM 414 [337,
769]) against 909 / 883 / 802 / 832 / 678 (839 [720, 892]), the slow seeds
climbing later (seeds 0 and 2 at 826 and 832 by 200k, 969-977 by 500k). IQM
at 100k 0.91 [0.82, 1.01] against 0.98 [0.93, 1.02]: at 100k one-step
targets give up return for the same cells met, at 500k they gain both.
CartpoleSwingup reaches 800 at 50k env steps and 44 CPU s
(`cartpole_curves.py`, seed 0). The critic sits at 0.88-0.96 of its policy's
value on CheetahRun at 500k.

This file states only the critic, its target and loss; init, act, the
update's skeleton, exploration, replay and pixels are `off_policy.make`'s.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from roxie import losses, networks
from roxie.agents import off_policy
from roxie.types import EnvSpec, Recipe

# The state, the run defaults (also from pixels, which keep observations
# raw) and the export hooks are the skeleton's.
from roxie.agents.off_policy import (  # pylint: disable=unused-import
    PIXEL_DEFAULTS, RUN_DEFAULTS, State, make_policy, policy_params)


@dataclasses.dataclass(frozen=True)
class Config(off_policy.CategoricalConfig):
  """D4PG hyperparameters; the defaults suit a 2-core CPU.

  The fields and defaults of `off_policy.CategoricalConfig` (DrQ's learning
  rate and standardised observations are the skeleton's defaults; the
  module docstring has D4PG's evidence for them).
  """


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the D4PG recipe for environments of `spec`."""
  c = config
  critic_kwargs = off_policy.categorical_critic_kwargs(c, spec)  # Checked.

  def critic_loss(dist, target, batch):
    # Cross-entropy to the target critic's distribution at (s', mu'(s')),
    # shifted by the n-step reward, scaled by the discount and projected.
    probs_next, atoms = target
    loss = jax.vmap(functools.partial(losses.categorical_td_loss,
                                      atoms=atoms))(
        dist.logits, batch.reward, batch.discount, probs_next)
    return jnp.mean(loss), dist.mean()

  return off_policy.make(
      c, spec, name='d4pg',
      critic=lambda o, a: networks.CategoricalCritic(**critic_kwargs)(o, a),
      target=lambda dist, b, _: (dist.probs(), dist.atoms),  # [N, K], [K]
      critic_loss=critic_loss,
      actor_value=lambda dist: dist.mean())
