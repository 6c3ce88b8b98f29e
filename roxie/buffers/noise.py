"""Exploration noise for deterministic policies, and schedules for its scale.

A noise process is an optax-style pair of pure functions over a NamedTuple
state, bundled as `ExplorationNoise(init, sample, reset)`:

  state = noise.init((B, A))
  eps, state = noise.sample(state, key)      # [B, A], added to the actions
  state = noise.reset(state, episode_ended)  # [B] bool, at auto-resets

Scales may be constants or schedules (functions of the number of `sample`
calls so far, e.g. `linear_schedule`), so decaying exploration lives in the
noise state and needs nothing from the loop.
"""

from typing import Callable, NamedTuple, Sequence, Tuple, Union

import chex
import jax
import jax.numpy as jnp
import optax

Array = chex.Array
PRNGKey = chex.PRNGKey
Schedule = Callable[[Array], Array]
ScalarOrSchedule = Union[float, Schedule]


class NoiseState(NamedTuple):
  """State of a noise process."""
  noise: Array  # [B, A] the current value (OU); zeros for Gaussian noise.
  count: Array  # [] int32 `sample` calls so far: the schedules' step.


class ExplorationNoise(NamedTuple):
  """A noise process as pure functions (see the module docstring)."""
  init: Callable[[Sequence[int]], NoiseState]
  sample: Callable[[NoiseState, PRNGKey], Tuple[Array, NoiseState]]
  reset: Callable[[NoiseState, Array], NoiseState]


def linear_schedule(init_value: float, end_value: float,
                    transition_steps: int, *,
                    transition_begin: int = 0) -> Schedule:
  """Interpolates linearly from init_value to end_value, then holds.

  A thin wrapper of `optax.linear_schedule`: the value is init_value until
  `transition_begin`, reaches end_value `transition_steps` later, and stays.

  Args:
    init_value: value at step 0.
    end_value: value from step transition_begin + transition_steps on.
    transition_steps: length of the ramp (<= 0 means a constant init_value).
    transition_begin: steps before the ramp starts.

  Returns:
    A function of the (integer) step.
  """
  return optax.linear_schedule(init_value=init_value, end_value=end_value,
                               transition_steps=transition_steps,
                               transition_begin=transition_begin)


def _value_at(value: ScalarOrSchedule, count: Array) -> Array:
  return jnp.asarray(value(count) if callable(value) else value, jnp.float32)


def _init(shape: Sequence[int]) -> NoiseState:
  return NoiseState(noise=jnp.zeros(tuple(shape), jnp.float32),
                    count=jnp.zeros((), jnp.int32))


def _reset(state: NoiseState, mask: Array) -> NoiseState:
  chex.assert_shape(mask, state.noise.shape[:1])
  mask = jnp.reshape(mask, mask.shape + (1,) * (state.noise.ndim - 1))
  return state._replace(
      noise=jnp.where(mask, jnp.zeros_like(state.noise), state.noise))


def gaussian_noise(*, stddev: ScalarOrSchedule) -> ExplorationNoise:
  """Independent Gaussian noise, as TD3 uses it.

  "Addressing Function Approximation Error in Actor-Critic Methods", Fujimoto
  et al., 2018 (https://arxiv.org/abs/1802.09477).

  Args:
    stddev: the standard deviation, or a schedule of it.

  Returns:
    An `ExplorationNoise`; `reset` does nothing (the noise has no memory).
  """

  def sample(state, key):
    scale = _value_at(stddev, state.count)
    eps = scale * jax.random.normal(key, state.noise.shape, jnp.float32)
    return eps, state._replace(count=state.count + 1)

  return ExplorationNoise(init=_init, sample=sample, reset=lambda s, m: s)


def ornstein_uhlenbeck_noise(*,
                             theta: float = 0.15,
                             sigma: ScalarOrSchedule = 0.2,
                             dt: float = 1e-2) -> ExplorationNoise:
  """Temporally correlated Ornstein-Uhlenbeck noise, as DDPG uses it.

  The Euler-Maruyama step of dx = -theta x dt + sigma dW:

    x' = (1 - theta dt) x + sigma sqrt(dt) eps,   eps ~ N(0, 1),

  whose stationary standard deviation is sigma / sqrt(theta (2 - theta dt))
  (sigma / sqrt(2 theta) as dt -> 0). `reset` restarts it at 0.
  "Continuous control with deep reinforcement learning", Lillicrap et al.,
  2015 (https://arxiv.org/abs/1509.02971).

  Args:
    theta: mean-reversion rate (> 0, with theta * dt < 2 for stability).
    sigma: diffusion scale, or a schedule of it.
    dt: time step.

  Returns:
    An `ExplorationNoise`.
  """
  if not 0. < theta * dt < 2.:
    raise ValueError(f'Need 0 < theta * dt < 2, got {theta} * {dt}.')

  def sample(state, key):
    scale = _value_at(sigma, state.count) * jnp.sqrt(jnp.float32(dt))
    eps = jax.random.normal(key, state.noise.shape, jnp.float32)
    x = (1. - theta * dt) * state.noise + scale * eps
    return x, NoiseState(noise=x, count=state.count + 1)

  return ExplorationNoise(init=_init, sample=sample, reset=_reset)


def ou_stationary_stddev(*, theta: float, sigma: float, dt: float) -> float:
  """The stationary standard deviation of `ornstein_uhlenbeck_noise`."""
  return sigma / (theta * (2. - theta * dt))**0.5
