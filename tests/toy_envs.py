"""Tiny pure-JAX environments whose every number follows by hand.

Shared by the loop, iteration, population and sharding tests (importable
from any test: tests/conftest.py's folder is on sys.path). Both are 1-D
integrators, obs = [x], truncating after `length` steps, never terminating.
"""

import dataclasses

import jax
import jax.numpy as jnp

from roxie.types import EnvSpec, EnvState, TimeStep


def _spec(length):
  return EnvSpec(task='Integrator', obs_size=1, action_size=1,
                 obs_names=(('x', 1),), control_timestep=0.1,
                 episode_length=length)


@dataclasses.dataclass(frozen=True)
class FixedStartIntegrator:
  """x' = x + 0.1 clip(a), reward -|x'|; every episode starts (and resets) at 1.

  `info['clipped']` counts the action dims outside [-1, 1].
  """
  num_envs: int = 2
  length: int = 4

  @property
  def spec(self):
    return _spec(self.length)

  def reset(self, key):
    b = self.num_envs
    return EnvState(obs=jnp.ones((b, 1)), t=jnp.zeros((b,), jnp.int32),
                    task_state=jnp.zeros((b, 0)), key=key, physics=())

  def step(self, state, action):
    x = state.obs + 0.1 * jnp.clip(action, -1.0, 1.0)
    t = state.t + 1
    truncated = t >= self.length
    obs = jnp.where(truncated[:, None], 1.0, x)
    ts = TimeStep(obs=obs, reward=-jnp.abs(x[:, 0]),
                  terminated=jnp.zeros_like(truncated), truncated=truncated,
                  final_obs=x,
                  info={'clipped': jnp.sum(jnp.abs(action) > 1, -1)})
    return state._replace(obs=obs, t=jnp.where(truncated, 0, t)), ts


@dataclasses.dataclass(frozen=True)
class RandomStartIntegrator:
  """x' = x + 0.2 clip(a), reward 1 - |x'|, starts x ~ U(-1, 1) from the key.

  The best policy drives x to 0 and keeps it there (return ~9 of 10 at
  length 10); random actions score ~4-5.
  """
  num_envs: int = 4
  length: int = 10

  @property
  def spec(self):
    return _spec(self.length)

  def reset(self, key):
    b = self.num_envs
    key, k = jax.random.split(key)
    x = jax.random.uniform(k, (b, 1), minval=-1.0, maxval=1.0)
    return EnvState(obs=x, t=jnp.zeros((b,), jnp.int32),
                    task_state=jnp.zeros((b, 0)), key=key, physics=())

  def step(self, state, action):
    key, k = jax.random.split(state.key)
    x = state.obs + 0.2 * jnp.clip(action, -1.0, 1.0)
    t = state.t + 1
    truncated = t >= self.length
    fresh = jax.random.uniform(k, x.shape, minval=-1.0, maxval=1.0)
    obs = jnp.where(truncated[:, None], fresh, x)
    ts = TimeStep(obs=obs, reward=1.0 - jnp.abs(x[:, 0]),
                  terminated=jnp.zeros_like(truncated), truncated=truncated,
                  final_obs=x, info={})
    return state._replace(obs=obs, t=jnp.where(truncated, 0, t), key=key), ts
