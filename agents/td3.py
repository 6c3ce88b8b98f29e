"""TD3: twin delayed deep deterministic policy gradient.

"Addressing Function Approximation Error in Actor-Critic Methods", Fujimoto
et al., 2018 (https://arxiv.org/abs/1802.09477).

DDPG with three fixes against overestimation: two critics whose minimum forms
the target (clipped double Q), clipped Gaussian noise on the target action
(target policy smoothing), and an actor and target networks that move only
every `policy_delay` critic updates. The actor climbs the first critic.

Defaults: the skeleton's (`off_policy.Config`), DrQ's learning rate (1e-3)
on standardised observations since 2026-12-06, chosen with DDPG's, D4PG's
and TD4's evidence; TD3's own is partial (3e-4 on raw observations before:
variant `lr3e-4-noobsnorm` in benchmarks/results/DMC.md). At 100k env
steps, 3 seeds, against that old default: CartpoleSwingup 853 against 641,
ReacherEasy 697 against 590, CheetahRun 340 against 173, FingerSpin 471
against 452, WalkerWalk 684 against 342, BallInCup 638 against 881 (one
seed at 0, which recovers by 200k). At 500k: FingerSpin 786 against 662,
CheetahRun 521 against 425, WalkerWalk 944 against 893, ReacherEasy 957
against 837, CartpoleSwingup 865 against 852, BallInCup 964 against 959.
(These are 3-step figures: the old default of the next paragraph.)

One-step targets (`n_step=1`), not the skeleton's 3 then, since 2026-12-07
(the skeleton's own default since D4PG took them too; the 3-step rows are
variant `n3`; benchmarks/RESULTS.md, "TD3 with one-step targets"). 3 seeds,
against 3-step targets, at 100k: ReacherEasy 815 against 697 and BallInCup
961 against 638 (both meeting CURL's 746), WalkerWalk 816 against 684,
FingerSpin 641 against 471, CheetahRun 392 against 340; return / CURL IQM
0.91 [0.81, 0.99] against 0.81 [0.68, 0.92]; the same CPU per env step
(`run_cost.py`, 1.00x). At 500k: CheetahRun 650 [626, 668] against 521
(every seed above every 3-step seed at 16 of the 17 evaluations from 180k
on), FingerSpin 891 [841, 973] against 786, WalkerWalk 962 against 944 (now
meeting CURL's 948), BallInCup 973 [970, 979] against 964, CartpoleSwingup
861 against 865, ReacherEasy 925 against 957 (one seed missed one evaluation
episode); IQM 0.99 [0.98, 1.01] against 0.98 [0.96, 0.98]. What it costs:
CartpoleSwingup at action repeat 8, whose swing-up the 3-step window carried
back faster: 408 / 842 / 458 at 100k against 843 / 871 / 845 (seeds 0 and 2
read 626 and 706 at 200k and pass 800 by 380k), and 800 at 161k env steps
and 109 CPU s against 90k and 64 (`cartpole_curves.py`, seed 0; the 3-step
figures are docs/PERFORMANCE.md's), inside the 10 minutes issue 13 allows.
Two-step targets (`n2`) keep CartpoleSwingup (839 at 100k) and most of
CheetahRun's gain: 407 at 100k (392 with one step, 340 with three), 533 at
200k (530, 419), 627 [578, 713] at 500k (650, 521). They are not the
default because over the six tasks they are level with one step: return /
CURL IQM 0.92 against 0.91 at 100k (three cells met against two) and 0.99
[0.97, 1.01] against 0.99 [0.98, 1.01] at 500k (two against three), where
FingerSpin reads 917 (891, 786), ReacherEasy 944 (925, 957), BallInCup 966
(973, 964) and WalkerWalk 912 (962, 944; one seed on a slower gait, 814,
with its critic level with its return). With one step the critic
did not gain by sitting closer to its policy's value: on CheetahRun at 500k
its Q is 0.53-0.57 of the discounted value of the return, against 0.71-0.81 with
3-step targets; our guess at the cost is the uncorrected 3-step window,
whose later actions are the behaviour's noisy ones; the metrics do not
separate it. From pixels the skeleton's 3 stays (`PIXEL_DEFAULTS`;
DrQ-v2's), unmeasured here with 1.

This file states only those differences; init, act, the update's skeleton
(the delay is a `lax.cond` on the update counter), exploration, replay and
pixels are `off_policy.make`'s, the shared defaults `off_policy.Config`'s.
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
class Config(off_policy.DelayedConfig):
  """TD3 hyperparameters; the defaults suit a 2-core CPU."""


def make(config: Config, spec: EnvSpec) -> Recipe:
  """Builds the TD3 recipe for environments of `spec`."""
  c = config

  def critic_loss(q, target, batch):  # q: [2, N], both critics.
    del batch
    return 0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0)), q

  return off_policy.make(
      c, spec, name='td3',
      critic=lambda o, a: networks.TwinQCritic(
          **off_policy.critic_kwargs(c, spec))(o, a),
      # r + discount * min(Q1', Q2') at the smoothed target action.
      target=lambda q_next, b, _: jax.vmap(losses.twin_q_target)(
          b.reward, b.discount, q_next[0], q_next[1]),
      critic_loss=critic_loss,
      actor_value=lambda q: q[0],
      smoothing=(c.target_noise, c.target_noise_clip),
      policy_delay=c.policy_delay)
