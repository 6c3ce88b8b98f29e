"""A new off-policy agent in a page: REDQ's critics on roxie's skeleton.

"Randomized Ensembled Double Q-Learning: Learning Fast Without a Model",
Chen et al., 2021 (https://arxiv.org/abs/2101.05982): N critics; each target
takes the minimum over a random subset of M of the N target critics (fewer
than two of ten keeps the estimate from being as pessimistic as the min of
all), the actor climbs the ensemble's mean, and the agent makes many
gradient steps per environment step. REDQ itself pairs this with SAC's
stochastic actor; here it sits on the deterministic actor of
`roxie.agents.off_policy` (the skeleton DDPG, TD3, D4PG and TD4 are built
from), so the file states only the critic, the target and the loss (the
state, acting and the exported policy, `Recipe.policy`, are the skeleton's):

    roxie train --agent examples/redq.py:make --task CartpoleSwingup

or from Python, `make(Config(), env.spec)` with `roxie.loops`.
"""

import dataclasses

import jax
import jax.numpy as jnp

from roxie import losses, networks
from roxie.types import EnvSpec, Recipe
from roxie.agents import off_policy


@dataclasses.dataclass(frozen=True)
class Config(off_policy.Config):
  num_critics: int = 10  # N.
  subset_size: int = 2  # M: the target's minimum is over M random critics.
  updates_per_iteration: int = 8  # REDQ's high update-to-data ratio.


def make(config: Config, spec: EnvSpec) -> Recipe:
  c = config

  def critic_loss(q, target, batch):  # q: [N critics, B].
    del batch
    return 0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0)), q

  def target(q_next, batch, key):  # q_next: [N, B] from the target critics.
    # One subset per update, shared by the batch (REDQ's choice).
    per_sample = lambda r, d, q: losses.ensemble_q_target(
        r, d, q, subset_size=c.subset_size, key=key)
    return jax.vmap(per_sample, in_axes=(0, 0, 1))(
        batch.reward, batch.discount, q_next)

  return off_policy.make(
      c, spec, name='redq',
      critic=lambda o, a: networks.TwinQCritic(
          num_critics=c.num_critics, **off_policy.critic_kwargs(c, spec))(o, a),
      target=target,
      critic_loss=critic_loss,
      actor_value=lambda q: jnp.mean(q, axis=0))
