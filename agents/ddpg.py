"""DDPG: deep deterministic policy gradient with target networks.

"Continuous control with deep reinforcement learning", Lillicrap et al., 2015
(https://arxiv.org/abs/1509.02971).

A deterministic tanh actor mu(s) climbs a Q critic; the critic regresses to
r + discount * Q'(s', mu'(s')) with slowly moving (Polyak) target copies of
both networks. Exploration adds Gaussian noise whose scale decays linearly
with the agent's update count; `act(..., explore=False)` is the
deterministic policy. An optional penalty keeps the actor's pre-tanh
outputs out of tanh's flat tails.

Its defaults are the skeleton's (DrQ's learning rate on standardised
observations since 2026-12-06; `off_policy.Config` says why) but two: the
targets are one-step (below), and the exploration noise decays over 125k
updates, not 50k (since 2026-12-06; the old default's rows are DMC.md's
variant `noisedecay50k`). Counted in updates, 50k ended the decay at 200k
env steps on FingerSpin, where seeds then settled on their own levels (431,
822, 725) with critics level with their policies (Q at 0.91-1.01 of the
value of the return): what held the stuck seeds was exploration that
narrowed too soon. With 125k (the whole 500k run at action repeat 2), 3
seeds at 500k: FingerSpin 819 / 830 / 818 (822 against 659, 8 short of
DDPG's 830.7), BallInCup 968 against 959, ReacherEasy 970 against 960,
WalkerWalk 917 against 916, CartpoleSwingup 854 against 856, CheetahRun 552
against 581; return / CURL IQM over the six 0.97 [0.95, 0.98] against 0.95
[0.92, 0.98]. At 100k BallInCup's seed 0 now catches the ball (964 against
633) and WalkerWalk trails (IQM over 5 seeds 685 against 813; 424-939
against 591-924), 0.90 [0.79, 1.00] against 0.88 [0.76, 0.98] over the six.
A higher floor alone (`noise_end=0.2`) left one FingerSpin seed at 578. TD3
did not gain from the longer decay (FingerSpin 635 against 786) and TD4's
seeds split (870, 3 and 821 at 500k against 610, 596 and 826), so it stays
DDPG's (benchmarks/RESULTS.md, "FingerSpin's stuck seeds and the exploration
schedule"; docs/BASELINES.md). These are 3-step figures, measured before
the next paragraph's change.

One-step targets (`n_step=1`), not the skeleton's 3 then, since 2026-12-07,
as TD3 took the same day (the skeleton's own default since D4PG took them
too; the 3-step rows are variant `n3`; benchmarks/RESULTS.md, "DDPG takes
one-step targets"). 3 seeds, against 3-step targets, at 500k: FingerSpin 898
[843, 971] against 822 (now meeting DDPG's 831), CheetahRun 615 against 552
(still 101 short), WalkerWalk 961 against 917, BallInCup 976 against 968,
CartpoleSwingup 874 against 854, ReacherEasy 933 against 970 (one seed at
877); five of the six cells meet their target, against four; return / CURL
IQM 1.00 [0.98, 1.02] against 0.97 [0.95, 0.98]. At 100k: CheetahRun 396
against 281, FingerSpin 711 against 628, WalkerWalk 909 against 685 (IQM
over 5 seeds a side), ReacherEasy 844 against 825, BallInCup 957 against
964; IQM 0.94 [0.87, 0.98] against 0.90 [0.79, 1.00], three cells met either
way. The cost is CartpoleSwingup at 100k, as for TD3: 566 / 637 / 742
against 859 / 840 / 846, with 800 reached at 131k env steps and 73 CPU s
against 40k and 30 (`cartpole_curves.py`, seed 0), inside issue 13's 10
minutes; by 500k it is ahead. The metrics do not single out the critic
there: on CartpoleSwingup at 100k the one-step critic's Q is 0.23-0.27 of
the discounted value of the return, the 3-step one's 0.23-0.45 with all
three of its seeds past 840 already. On FingerSpin at 500k it sits level
(1.02-1.08 against 0.89-0.95), on CheetahRun a little lower (0.85-0.86
against 0.88-0.93) for 63 more return, as TD3's did. From pixels the
skeleton's 3 stays (`PIXEL_DEFAULTS`; DrQ-v2's), unmeasured here with 1.

This file states only DDPG's critic (one Q-function), its target and loss;
init, act, the update's skeleton, replay and pixels (a shared conv encoder in
the critic, DrQ shifts) are `off_policy.make`'s, the defaults and their
large-scale settings `off_policy.Config`'s.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from roxie import losses, networks
from roxie.agents import off_policy
from roxie.types import EnvSpec, Recipe

# The state, the run defaults (from pixels with 3-step targets) and the
# export hooks are the skeleton's.
from roxie.agents.off_policy import (  # pylint: disable=unused-import
    PIXEL_DEFAULTS, RUN_DEFAULTS, State, make_policy, policy_params)


@dataclasses.dataclass(frozen=True)
class Config(off_policy.Config):
  """DDPG hyperparameters; the defaults suit a 2-core CPU."""
  # The noise decays over 125k updates, not the skeleton's 50k: at 8 envs
  # and 4 updates a burst, 500k env steps at action repeat 2 (FingerSpin,
  # WalkerWalk), 1M at 4 (the module docstring gives the evidence). From
  # pixels PIXEL_DEFAULTS' 10k holds.
  noise_decay_updates: int = 125_000
  # Actor pre-tanh saturation penalty (0 turns it off).
  saturation_weight: float = 0.
  saturation_threshold: float = 2.


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the DDPG recipe for environments of `spec`."""
  c = config

  def critic_loss(q, target, batch):
    del batch
    return 0.5 * jnp.mean(jnp.square(q - target)), q

  return off_policy.make(
      c, spec, name='ddpg',
      critic=lambda o, a: networks.QCritic(
          **off_policy.critic_kwargs(c, spec))(o, a),
      # r + discount * Q'(s', mu'(s')).
      target=lambda q_next, b, _: jax.vmap(losses.td_target)(
          b.reward, b.discount, q_next),
      critic_loss=critic_loss,
      saturation_weight=c.saturation_weight,
      saturation_threshold=c.saturation_threshold)
