"""The deterministic actor and its exported policy, shared by DDPG-style recipes.

DDPG, TD3, D4PG and TD4 act with the same network: a `DeterministicActor`
on the flat observation, or, from pixels, on the features of the encoder
their critic owns (`encoded_critic`). Their states all hold `actor` and
`critic` parameters, so one `roxie.types.Policy` serves the four:
`deterministic_policy(config, spec)`, which their `Recipe.policy` holds.
"""

from typing import Any, Callable, Dict

import haiku as hk

from roxie.networks import actors
from roxie.networks import pixels
from roxie.types import Policy


def deterministic_actor(config: Any, spec: Any) -> hk.Transformed:
  """The actor of `config` (hidden_sizes, layer_norm) for `spec`.

  On flat observations its input size is checked against `spec.obs_size`;
  from pixels it reads encoder features, whose width it takes as given.
  """
  obs_size = pixels.observation_encoder(config, spec).obs_size
  return hk.without_apply_rng(hk.transform(
      lambda o: actors.DeterministicActor(
          action_size=spec.action_size, hidden_sizes=config.hidden_sizes,
          layer_norm=config.layer_norm, obs_size=obs_size)(o)))


def deterministic_policy_params(state: Any) -> Dict[str, Any]:
  """What acting needs from a state with `actor` and `critic` parameters."""
  return pixels.policy_params_with_encoder({'actor': state.actor},
                                           state.critic)


def make_deterministic_policy(config: Any, spec: Any) -> Callable:
  """The deterministic policy alone: `apply(params, obs) -> action`.

  Builds only the actor (and, from pixels, the encoder): no critic, no
  optimiser. `params` is `deterministic_policy_params(state)`, and the
  action is the one the recipe's `act(state, obs, key, explore=False)` takes
  (no noise).
  """
  actor = deterministic_actor(config, spec)
  encoder = pixels.observation_encoder(config, spec)
  return lambda params, obs: actor.apply(
      params['actor'], pixels.policy_input(encoder, params, obs)).action


def deterministic_policy(config: Any, spec: Any) -> Policy:
  """The `Recipe.policy` of a recipe whose state holds `actor` and `critic`.

  Args:
    config: the recipe's config (hidden_sizes, layer_norm, and the pixel
      fields from pixels).
    spec: the env spec the recipe is built for.

  Returns:
    `Policy(params=deterministic_policy_params,
    apply=make_deterministic_policy(config, spec))`.
  """
  return Policy(params=deterministic_policy_params,
                apply=make_deterministic_policy(config, spec))
