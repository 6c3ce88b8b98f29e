"""Compiled evaluation: the deterministic policy over whole episodes."""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from roxie.loops import host
from roxie.types import Array, PRNGKey, Recipe


class EvalResult(NamedTuple):
  returns: Array  # [B] return of each env's first episode.
  lengths: Array  # [B] int32 its length.
  mean: Array  # [] mean return.
  std: Array  # [] standard deviation of the returns.


def make_evaluator(recipe: Recipe, env, *, explore: bool = False,
                   max_steps: int | None = None
                   ) -> Callable[[object, PRNGKey], EvalResult]:
  """Returns a jitted `evaluate(agent_state, key) -> EvalResult`.

  Every one of `env.num_envs` environments runs one whole episode from a fresh
  reset with the recipe's deterministic action (`explore=False`); steps after
  an env's first episode ends are not counted. The program runs
  `episode_length` steps (an episode cannot be longer).

  Args:
    recipe: the recipe whose `act` to evaluate.
    env: an environment batch used only for evaluation (its state is reset on
      every call, so it must not be the training env on a host backend).
    explore: evaluate the exploring policy instead.
    max_steps: run at most this many steps (default: the episode length).

  Raises:
    roxie.loops.host.HostPhysicsInUse (a ValueError): `env` keeps its physics
      on the host (native backend) and a training loop already drives it.
  """
  host.claim(env, host.EVALUATION)
  steps = int(max_steps or env.spec.episode_length)

  def evaluate(agent_state, key: PRNGKey) -> EvalResult:
    k_reset, k_steps = jax.random.split(key)
    env_state = env.reset(k_reset)
    b = env.num_envs

    def body(carry, k):
      env_state, ret, length, alive = carry
      action, _ = recipe.act(agent_state, env_state.obs, k, explore=explore)
      env_state, ts = env.step(env_state, action)
      ret = ret + jnp.where(alive, ts.reward, 0.0)
      length = length + alive.astype(jnp.int32)
      alive = jnp.logical_and(
          alive, jnp.logical_not(jnp.logical_or(ts.terminated, ts.truncated)))
      return (env_state, ret, length, alive), None

    init = (env_state, jnp.zeros((b,), jnp.float32), jnp.zeros((b,), jnp.int32),
            jnp.ones((b,), bool))
    (_, ret, length, _), _ = jax.lax.scan(body, init,
                                          jax.random.split(k_steps, steps))
    return EvalResult(returns=ret, lengths=length, mean=jnp.mean(ret),
                      std=jnp.std(ret))

  return jax.jit(evaluate)
