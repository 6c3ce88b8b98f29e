"""Policy networks: deterministic, tanh-Gaussian and Gaussian heads.

Each actor maps observations [..., O] (any number of leading batch axes,
including none) to an action or a distribution over actions in [-1, 1]^A.
"""

from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import chex
import haiku as hk
import jax
import jax.numpy as jnp

from roxie.networks import distributions
from roxie.networks import torsos

Array = chex.Array


class DeterministicActorOutput(NamedTuple):
  """What `DeterministicActor` returns."""
  action: Array  # [..., A] tanh(pre_tanh), in [-1, 1].
  # [..., A] the unsquashed output, e.g. for a DPG saturation penalty.
  pre_tanh: Array


def _soft_bound(x: Array, bounds: Tuple[float, float]) -> Array:
  # Maps R onto (low, high) smoothly, so gradients never vanish at a hard clip.
  low, high = bounds
  return low + 0.5 * (high - low) * (jnp.tanh(x) + 1.)


class DeterministicActor(hk.Module):
  """An MLP policy with a tanh-squashed output, as in DDPG, TD3 and D4PG.

  "Continuous control with deep reinforcement learning", Lillicrap et al.,
  2015 (https://arxiv.org/abs/1509.02971).
  """

  def __init__(self,
               *,
               action_size: int,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.relu,
               layer_norm: bool = False,
               obs_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               name: Optional[str] = None):
    """Builds the actor.

    Args:
      action_size: A, the number of action dimensions.
      hidden_sizes: widths of the torso's layers.
      activation: the torso's nonlinearity.
      layer_norm: whether the torso uses LayerNorm.
      obs_size: if given, observations must have this size (checked).
      output_init_scale: variance scale of the output layer's initialiser.
      name: module name.
    """
    super().__init__(name=name)
    self._action_size = action_size
    self._obs_size = obs_size
    self._torso = torsos.MLP(hidden_sizes, activation=activation,
                             layer_norm=layer_norm, name='torso')
    self._head = hk.Linear(action_size, w_init=torsos.small_init(
        output_init_scale), name='head')

  def __call__(self, obs: Array) -> DeterministicActorOutput:
    """Maps [..., O] observations to actions and their pre-tanh values."""
    torsos.check_last_axis(obs, self._obs_size, 'obs', self.module_name)
    pre_tanh = self._head(self._torso(obs))
    return DeterministicActorOutput(action=jnp.tanh(pre_tanh),
                                    pre_tanh=pre_tanh)


class TanhGaussianActor(hk.Module):
  """An MLP policy giving a `TanhGaussian` with state-dependent std, as in SAC.

  The log standard deviation is squashed smoothly into `log_std_bounds`
  rather than clipped, so its gradient never vanishes.
  "Soft Actor-Critic Algorithms and Applications", Haarnoja et al., 2018
  (https://arxiv.org/abs/1812.05905).
  """

  def __init__(self,
               *,
               action_size: int,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.relu,
               layer_norm: bool = False,
               log_std_bounds: Tuple[float, float] = (-5., 2.),
               obs_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               name: Optional[str] = None):
    """Builds the actor.

    Args:
      action_size: A, the number of action dimensions.
      hidden_sizes: widths of the torso's layers.
      activation: the torso's nonlinearity.
      layer_norm: whether the torso uses LayerNorm.
      log_std_bounds: (low, high) range of the pre-tanh log std.
      obs_size: if given, observations must have this size (checked).
      output_init_scale: variance scale of the output layer's initialiser.
      name: module name.
    """
    super().__init__(name=name)
    low, high = log_std_bounds
    if not low < high:
      raise ValueError(
          f'log_std_bounds must be increasing, got {log_std_bounds}.')
    self._action_size = action_size
    self._obs_size = obs_size
    self._log_std_bounds = (float(low), float(high))
    self._torso = torsos.MLP(hidden_sizes, activation=activation,
                             layer_norm=layer_norm, name='torso')
    self._head = hk.Linear(2 * action_size, w_init=torsos.small_init(
        output_init_scale), name='head')

  def __call__(self, obs: Array) -> distributions.TanhGaussian:
    """Maps [..., O] observations to a distribution over [..., A] actions."""
    torsos.check_last_axis(obs, self._obs_size, 'obs', self.module_name)
    out = self._head(self._torso(obs))
    mean, raw_log_std = jnp.split(out, 2, axis=-1)
    return distributions.TanhGaussian(
        mean=mean, log_std=_soft_bound(raw_log_std, self._log_std_bounds))


class GaussianActor(hk.Module):
  """An MLP policy giving a `DiagGaussian`, for PPO and MPO.

  The standard deviation is either a learned state-independent vector (the
  usual choice for PPO, "Proximal Policy Optimization Algorithms", Schulman et
  al., 2017, https://arxiv.org/abs/1707.06347) or an output of the network,
  softly bounded like `TanhGaussianActor`'s (as MPO uses it, "Maximum a
  Posteriori Policy Optimisation", Abdolmaleki et al., 2018,
  https://arxiv.org/abs/1806.06920). The mean is not squashed: the
  environment clips actions to [-1, 1].
  """

  def __init__(self,
               *,
               action_size: int,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.tanh,
               layer_norm: bool = False,
               state_dependent_std: bool = False,
               init_log_std: float = 0.,
               log_std_bounds: Tuple[float, float] = (-5., 2.),
               obs_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               name: Optional[str] = None):
    """Builds the actor.

    Args:
      action_size: A, the number of action dimensions.
      hidden_sizes: widths of the torso's layers.
      activation: the torso's nonlinearity.
      layer_norm: whether the torso uses LayerNorm.
      state_dependent_std: whether log std is an output of the network (True)
        or a learned vector shared by all states (False).
      init_log_std: initial value of the state-independent log std.
      log_std_bounds: (low, high) range of the state-dependent log std.
      obs_size: if given, observations must have this size (checked).
      output_init_scale: variance scale of the output layer's initialiser.
      name: module name.
    """
    super().__init__(name=name)
    low, high = log_std_bounds
    if state_dependent_std and not low < high:
      raise ValueError(
          f'log_std_bounds must be increasing, got {log_std_bounds}.')
    self._action_size = action_size
    self._obs_size = obs_size
    self._state_dependent_std = state_dependent_std
    self._init_log_std = init_log_std
    self._log_std_bounds = (float(low), float(high))
    self._torso = torsos.MLP(hidden_sizes, activation=activation,
                             layer_norm=layer_norm, name='torso')
    num_outputs = (2 if state_dependent_std else 1) * action_size
    self._head = hk.Linear(num_outputs, w_init=torsos.small_init(
        output_init_scale), name='head')

  def __call__(self, obs: Array) -> distributions.DiagGaussian:
    """Maps [..., O] observations to a distribution over [..., A] actions."""
    torsos.check_last_axis(obs, self._obs_size, 'obs', self.module_name)
    out = self._head(self._torso(obs))
    if self._state_dependent_std:
      mean, raw_log_std = jnp.split(out, 2, axis=-1)
      log_std = _soft_bound(raw_log_std, self._log_std_bounds)
    else:
      mean = out
      log_std = hk.get_parameter(
          'log_std', [self._action_size], out.dtype,
          init=hk.initializers.Constant(self._init_log_std))
      log_std = jnp.broadcast_to(log_std, mean.shape)
    return distributions.DiagGaussian(mean=mean, log_std=log_std)
