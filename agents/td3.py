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
steps, 3 seeds, against the old default: CartpoleSwingup 853 against 641,
ReacherEasy 697 against 590, CheetahRun 340 against 173, FingerSpin 471
against 452, WalkerWalk 684 against 342, and BallInCup 638 against 881,
one seed at 0 (the others 961 and 954); return / CURL IQM 0.81 [0.68,
0.92] against 0.62 [0.57, 0.70]. At 500k: FingerSpin 786 against 662,
CheetahRun 521 against 425, WalkerWalk 944 against 893, ReacherEasy 957
against 837, CartpoleSwingup 865 against 852 and BallInCup 964 against
959 (seed 0 recovers: 906 by 200k, 963.5 at 500k); return / CURL IQM
0.98 [0.96, 0.98] against 0.89 [0.84, 0.93], meeting CURL on
CartpoleSwingup and ReacherEasy (WalkerWalk -4 and BallInCup -10 short,
FingerSpin -137, CheetahRun -274).

n-step targets (`n_step`, the skeleton's 3). One-step targets (variant
`n1`, `--set n_step=1`; benchmarks/RESULTS.md, "TD3 with one-step
targets") lead on five of the six tasks at 100k, 3 seeds: ReacherEasy
815 against 697 and BallInCup 961 against 638 (both meeting CURL's 746),
WalkerWalk 816 against 684, FingerSpin 641 against 471, CheetahRun 392
against 340 (return / CURL IQM 0.91 [0.81, 0.99] against 0.81 [0.68,
0.92]). At 500k FingerSpin reads 891 [841, 973] against 786 (the
interval reaching CURL's 923), BallInCup 973 [970, 979] against 964, and
CheetahRun 650 [626, 668] against 521, every seed above every default
seed at 16 of the 17 evaluations from 180k on, its critic further below
its policy's value (Q at 0.53-0.57 of the discounted value of the return,
against 0.71-0.81). But CartpoleSwingup,
at action repeat 8, learns slowly without them: 408 / 842 / 458 at 100k
against 843 / 871 / 845 (the default passes 800 by 60k; n1's seeds read
293 / 623 / 266 there). Two-step targets (`n2`) keep CartpoleSwingup (860
at 100k) and take part of CheetahRun's gain (470 at 200k, between the
default's 419 and n1's 530). The default stays 3 until the 500k column
(three of six tasks so far) says which serves the six.

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

# The state, the run defaults (also from pixels) and the export hooks are the
# skeleton's.
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
