"""DDPG: deep deterministic policy gradient with target networks.

"Continuous control with deep reinforcement learning", Lillicrap et al., 2015
(https://arxiv.org/abs/1509.02971).

A deterministic tanh actor mu(s) climbs a Q critic; the critic regresses to
r + discount * Q'(s', mu'(s')) with slowly moving (Polyak) target copies of
both networks. Exploration adds Gaussian noise whose scale decays linearly
with the agent's update count; `act(..., explore=False)` is the
deterministic policy. An optional penalty keeps the actor's pre-tanh
outputs out of tanh's flat tails.

Its defaults are the skeleton's; DrQ's learning rate on standardised
observations since 2026-12-06 (`off_policy.Config` says why). Against the
old ones (DMC.md's `lr3e-4-noobsnorm`), 3 seeds, at 100k: ReacherEasy 842
against 564, WalkerWalk 808 against 471, CheetahRun 283 against 172,
FingerSpin 521 against 431, CartpoleSwingup 849 against 847, and BallInCup
633 against 913, one seed never catching the ball (99.6; the others 847
and 953); return / CURL IQM 0.86 [0.73, 0.99] against 0.72 [0.64, 0.78].
At 500k: ReacherEasy 960 against 881, CheetahRun 581 against 379,
FingerSpin 659 against 628 (seeds 431, 822, 725), CartpoleSwingup 856
against 828, WalkerWalk 916 against 949 (seeds 828, 961, 958) and
BallInCup 959 against 965 (seed 0 at 912 by 180k, 958 at 500k); return /
CURL IQM 0.95 [0.92, 0.98] against 0.90 [0.85, 0.95], meeting DDPG's
target (CURL's less 10%) on four of six (FingerSpin -171, CheetahRun -134).
FingerSpin's stuck seed is the exploration schedule's: with the noise
decayed over 125k updates (the whole 500k run there; variant
`noisedecay125k`) the seeds read 819, 830 and 818 (822, 8 short). It is
level or better on the other tasks at 500k but CheetahRun (552 against
581); at 100k BallInCup gains (963 against 633) where WalkerWalk
loses (580 against 808). A candidate default, not yet adopted
(benchmarks/RESULTS.md; off_policy.Config's noise fields).

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

# The state, the run defaults (also from pixels) and the export hooks are the
# skeleton's.
from roxie.agents.off_policy import (  # pylint: disable=unused-import
    PIXEL_DEFAULTS, RUN_DEFAULTS, State, make_policy, policy_params)


@dataclasses.dataclass(frozen=True)
class Config(off_policy.Config):
  """DDPG hyperparameters; the defaults suit a 2-core CPU."""
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
