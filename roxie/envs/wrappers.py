"""Environment wrappers that keep the `roxie.types.Env` protocol."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from roxie.envs.common import select
from roxie.types import EnvSpec, EnvState, TimeStep


@dataclasses.dataclass(frozen=True, eq=False)
class ActionRepeat:
  """Repeats each action `repeat` control steps and sums their rewards.

  The standard device of the DeepMind Control benchmarks (PlaNet, DrQ): the
  agent decides every `repeat` control steps, while returns still add up the
  reward of every control step, so they stay comparable with the suite's
  (a 1000-step episode is 1000 / repeat decisions). The episode length must
  be a multiple of `repeat`, so time-limit truncations fall exactly on a
  decision boundary. An episode that ends inside a repeat (a termination, or
  diverged physics) stops accumulating reward there and reports its terminal
  observation as `final_obs`; the remaining repeats of that env run on its
  freshly reset episode, which then starts a few control steps in.

  Attributes:
    env: the wrapped batch of environments.
    repeat: control steps per decision (>= 1).
  """
  env: Any
  repeat: int

  def __post_init__(self):
    if self.repeat < 1:
      raise ValueError(f'action repeat must be >= 1, got {self.repeat}.')
    length = self.env.spec.episode_length
    if length % self.repeat:
      raise ValueError(
          f'action repeat {self.repeat} does not divide the episode length '
          f'{length} of {self.env.spec.task}.')

  @property
  def num_envs(self) -> int:
    return self.env.num_envs

  @property
  def spec(self) -> EnvSpec:
    s = self.env.spec
    return s._replace(control_timestep=s.control_timestep * self.repeat,
                      episode_length=s.episode_length // self.repeat,
                      action_repeat=s.action_repeat * self.repeat)

  def __getattr__(self, name):  # Backend extras (host state access, ...).
    return getattr(self.env, name)

  def reset(self, key) -> EnvState:
    return self.env.reset(key)

  def step(self, state: EnvState, action):
    if self.repeat == 1:
      return self.env.step(state, action)
    state, first = self.env.step(state, action)

    def body(carry, _):
      state, acc = carry
      state, ts = self.env.step(state, action)
      ended = jnp.logical_or(acc.terminated, acc.truncated)
      live = jnp.logical_not(ended)
      acc = TimeStep(
          obs=ts.obs,
          reward=acc.reward + jnp.where(live, ts.reward, 0.0),
          terminated=jnp.logical_or(acc.terminated,
                                    jnp.logical_and(live, ts.terminated)),
          truncated=jnp.logical_or(acc.truncated,
                                   jnp.logical_and(live, ts.truncated)),
          final_obs=select(live, ts.final_obs, acc.final_obs),
          info=jax.tree.map(lambda a, b: a + b, acc.info, ts.info))
      return (state, acc), None

    (state, ts), _ = jax.lax.scan(body, (state, first), None,
                                  length=self.repeat - 1)
    return state, ts
