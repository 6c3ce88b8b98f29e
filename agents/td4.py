"""TD4: twin delayed distributional deterministic policy gradient.

D4PG ("Distributed Distributional Deterministic Policy Gradients",
Barth-Maron et al., 2018, https://arxiv.org/abs/1804.08617) with TD3's fixes
("Addressing Function Approximation Error in Actor-Critic Methods", Fujimoto
et al., 2018, https://arxiv.org/abs/1802.09477): two categorical critics,
clipped noise on the target action (target policy smoothing), and an actor and
target networks that move only every `policy_delay` critic updates.

Clipped double Q for distributions: a per-atom minimum of two distributions is
not a distribution, so per sample the target takes the WHOLE next-state
distribution of the target head with the lower mean
(`losses.twin_categorical_target`); both heads are trained by cross-entropy to
that one projected n-step target. The actor climbs the first head's mean, as
TD3's actor climbs its first critic.

The skeleton's defaults apply (DrQ's learning rate on standardised
observations since 2026-12-06). At 100k env steps, 3 seeds, they lead the
old ones (`lr3e-4-noobsnorm`) on ReacherEasy (790 against 169), WalkerWalk
(795 against 327), CheetahRun (310 against 104), FingerSpin (467 against
270) and CartpoleSwingup (845 against 625), and trail on BallInCup (739
against 811: one seed at 298, the others 971 and 949). At 500k, return /
CURL IQM 0.96 against 0.93: CheetahRun 673 against 413, WalkerWalk 902
against 870, CartpoleSwingup 861 against 858, BallInCup 963 against 964,
FingerSpin 677 against 701 (two seeds settle near 600) and ReacherEasy
936 against 963 (one seed's last evaluation missed the target once in 10
episodes). The twin minimum's underestimate shows in Q: 0.73-0.85 of the
discounted value of the return on CheetahRun and FingerSpin at 500k,
where DDPG's single critic sits at 0.94-0.99 on CheetahRun.

(These are 3-step figures: the old default of the next paragraph.)

One-step targets (`n_step=1`), the skeleton's default, since 2026-12-07,
the day TD3, DDPG and D4PG took them; the 3-step rows are variant `n3`
(benchmarks/RESULTS.md, "TD4 takes one-step targets"). 3 seeds, against
3-step targets, at 500k: CheetahRun 759 [733, 777] against 673, WalkerWalk
964 [955, 977] against 902 (meeting CURL's 948), FingerSpin 911 [829, 969]
against 677 (its interval reaching 923), BallInCup 976 against 963 (meeting
974), CartpoleSwingup 866 against 861, and ReacherEasy 897 against 936
(below its 923: two seeds missed in one of their 10 evaluation episodes,
having read 948 at 400k; `benchmarks/reacher_misses.py` finds such misses
the policy's, every target within reach). Three cells met against two,
return / CURL IQM 1.00 [0.98, 1.01] against 0.96 [0.92, 0.98]. At 100k two
cells against two, IQM 0.84 against 0.85: BallInCup gains most (960 against
739), CheetahRun 373 against 310, FingerSpin 362 against 467, WalkerWalk 756
against 795, ReacherEasy 757 against 790, and CartpoleSwingup 639 against
845 loses its cell, as TD3's and DDPG's did. The critic sits lower against
its policy's value with one step (Q at 0.65-0.69 of the return's value on
CheetahRun at 500k, against 0.73-0.76). Two-step targets (`n2`) keep
CartpoleSwingup's 100k cell (857) and read 850 on ReacherEasy there; at
500k they are unmeasured for TD4.

Support and the published large-scale settings are D4PG's. This file states
only the differences; init, act, the update's skeleton, exploration, replay
and pixels are `off_policy.make`'s.
"""

from __future__ import annotations

import dataclasses
import functools

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
class Config(off_policy.CategoricalConfig, off_policy.DelayedConfig):
  """TD4 hyperparameters; the defaults suit a 2-core CPU.

  The fields and defaults of `off_policy.CategoricalConfig` and
  `off_policy.DelayedConfig`, one-step targets included (the module
  docstring has TD4's evidence for them).
  """


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the TD4 recipe for environments of `spec`."""
  c = config
  critic_kwargs = off_policy.categorical_critic_kwargs(c, spec)  # Checked.

  def target(dist, batch, key):
    # Per sample, the target heads' distribution with the lower mean at the
    # smoothed target action (shifted and projected by the loss).
    del batch, key
    logits1, logits2 = dist.logits  # [N, K] each
    return jax.vmap(functools.partial(losses.twin_categorical_target,
                                      atoms=dist.atoms))(
        logits1, logits2), dist.atoms

  def critic_loss(dist, target, batch):  # dist.logits: [2, N, K]
    probs_next, atoms = target
    # Per sample (inner vmap), per head (outer vmap, target shared): [2, N].
    td_loss = jax.vmap(jax.vmap(functools.partial(losses.categorical_td_loss,
                                                  atoms=atoms)),
                       in_axes=(0, None, None, None))
    loss = td_loss(dist.logits, batch.reward, batch.discount, probs_next)
    return jnp.mean(jnp.sum(loss, 0)), dist.mean()

  return off_policy.make(
      c, spec, name='td4',
      critic=lambda o, a: networks.TwinCategoricalCritic(**critic_kwargs)(
          o, a),
      target=target, critic_loss=critic_loss,
      actor_value=lambda dist: dist.mean()[0],
      smoothing=(c.target_noise, c.target_noise_clip),
      policy_delay=c.policy_delay)
