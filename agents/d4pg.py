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

# The state, the run defaults (also from pixels) and the export hooks are the
# skeleton's.
from roxie.agents.off_policy import (  # pylint: disable=unused-import
    PIXEL_DEFAULTS, RUN_DEFAULTS, State, make_policy, policy_params)


@dataclasses.dataclass(frozen=True)
class Config(off_policy.CategoricalConfig):
  """D4PG hyperparameters; the defaults suit a 2-core CPU."""


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
