"""Critics: Q(s, a) as a scalar or a categorical distribution, and V(s).

Inputs may carry any number of leading batch axes (including none); the
observation and the action must share them. Twin critics hold their members
on one leading ensemble axis (see `torsos.ensemble`), so the two critics of
TD3/SAC/TD4 are one module, one set of stacked arrays and one forward pass.
"""

from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import chex
import haiku as hk
import jax
import jax.numpy as jnp

from roxie.networks import normalization
from roxie.networks import torsos

Array = chex.Array


def _critic_input(obs: Array, action: Array, obs_size: Optional[int],
                  action_size: Optional[int], where: str) -> Array:
  torsos.check_last_axis(obs, obs_size, 'obs', where)
  torsos.check_last_axis(action, action_size, 'action', where)
  if jnp.shape(obs)[:-1] != jnp.shape(action)[:-1]:
    raise ValueError(
        f'{where}: obs and action must share their batch axes, got shapes '
        f'{tuple(jnp.shape(obs))} and {tuple(jnp.shape(action))}.')
  return jnp.concatenate([obs, action], axis=-1)


class CategoricalQ(NamedTuple):
  """A distributional Q-value: logits over fixed, evenly spaced atoms.

  "A Distributional Perspective on Reinforcement Learning", Bellemare et al.,
  2017 (https://arxiv.org/abs/1707.06887).
  """
  logits: Array  # [..., K] (with a leading ensemble axis for twin critics).
  atoms: Array  # [K] the support, shared by every batch element.

  def probs(self) -> Array:
    """[..., K] probabilities of the atoms."""
    return jax.nn.softmax(self.logits, axis=-1)

  def mean(self) -> Array:
    """[...] the expected Q-value."""
    return self.probs() @ self.atoms


def _check_training_flag(batch_renorm, is_training, where: str) -> None:
  if batch_renorm is not None and not isinstance(is_training, bool):
    raise ValueError(
        f'{where}: a batch-renormalised critic needs is_training=True (batch '
        'statistics, updating the running ones) or False (running '
        f'statistics), got {is_training!r}.')


class QCritic(hk.Module):
  """An MLP Q-function: (obs [..., O], action [..., A]) -> [...].

  With `batch_renorm` the torso is `normalization.BatchRenormMLP` (as
  CrossQ's critic), which holds running statistics: build it inside
  `hk.transform_with_state` and say `is_training` at every call.
  """

  def __init__(self,
               *,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.relu,
               layer_norm: bool = False,
               obs_size: Optional[int] = None,
               action_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               batch_renorm: Optional[Mapping[str, Any]] = None,
               residual_blocks: int = 0,
               name: Optional[str] = None):
    """Builds the critic.

    Args:
      hidden_sizes: widths of the torso's layers (with residual_blocks, the
        one width: `(width,)`).
      activation: the torso's nonlinearity.
      layer_norm: whether the torso uses LayerNorm (not with batch_renorm).
      obs_size: if given, observations must have this size (checked).
      action_size: if given, actions must have this size (checked).
      output_init_scale: variance scale of the output layer's initialiser.
      batch_renorm: None for the plain MLP torso; else the keyword arguments
        of every `normalization.BatchRenorm` of a batch-renormalised torso
        ({} for the defaults).
      residual_blocks: 0 for the MLP torso; N > 0 for a `torsos.ResidualMLP`
        (BRO's BroNet) of N blocks (see `torsos.critic_torso`).
      name: module name.
    """
    super().__init__(name=name)
    self._obs_size = obs_size
    self._action_size = action_size
    self._batch_renorm = batch_renorm
    if batch_renorm is None:
      self._torso = torsos.critic_torso(
          hidden_sizes, activation=activation, layer_norm=layer_norm,
          residual_blocks=residual_blocks, where='QCritic')
    else:
      if layer_norm:
        raise ValueError('QCritic: choose layer_norm or batch_renorm, not '
                         'both.')
      if residual_blocks:
        raise ValueError('QCritic: choose residual_blocks or batch_renorm, '
                         'not both.')
      self._torso = normalization.BatchRenormMLP(
          hidden_sizes, activation=activation, name='torso', **batch_renorm)
    self._head = hk.Linear(1, w_init=torsos.small_init(output_init_scale),
                           name='head')

  def __call__(self, obs: Array, action: Array,
               is_training: Optional[bool] = None) -> Array:
    """Returns Q(obs, action), shaped like the shared batch axes.

    `is_training` (a Python bool) is required with batch_renorm and ignored
    without.
    """
    x = _critic_input(obs, action, self._obs_size, self._action_size,
                      self.module_name)
    if self._batch_renorm is None:
      return jnp.squeeze(self._head(self._torso(x)), axis=-1)
    _check_training_flag(self._batch_renorm, is_training, self.module_name)
    return jnp.squeeze(self._head(self._torso(x, is_training)), axis=-1)


class TwinQCritic(hk.Module):
  """`num_critics` independent Q-functions on one leading ensemble axis.

  For clipped double Q-learning ("Addressing Function Approximation Error in
  Actor-Critic Methods", Fujimoto et al., 2018,
  https://arxiv.org/abs/1802.09477): (obs [..., O], action [..., A]) ->
  [num_critics, ...].

  With `batch_renorm` every member is batch-renormalised (see `QCritic`),
  each with its own running statistics stacked on the ensemble axis of the
  haiku state: build it inside `hk.transform_with_state`.
  """

  def __init__(self,
               *,
               num_critics: int = 2,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.relu,
               layer_norm: bool = False,
               obs_size: Optional[int] = None,
               action_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               batch_renorm: Optional[Mapping[str, Any]] = None,
               residual_blocks: int = 0,
               name: Optional[str] = None):
    """Builds the critics; arguments as `QCritic`'s, plus `num_critics`."""
    super().__init__(name=name)
    self._obs_size = obs_size
    self._action_size = action_size
    self._batch_renorm = batch_renorm

    def member(obs, action, is_training=None):
      return QCritic(hidden_sizes=hidden_sizes, activation=activation,
                     layer_norm=layer_norm,
                     output_init_scale=output_init_scale,
                     batch_renorm=batch_renorm,
                     residual_blocks=residual_blocks,
                     name='q_critic')(obs, action, is_training)

    # Built once, so that repeated calls share the parameters.
    self._critics = torsos.ensemble(member, size=num_critics,
                                    stateful=batch_renorm is not None)

  def __call__(self, obs: Array, action: Array,
               is_training: Optional[bool] = None) -> Array:
    """Returns [num_critics, ...] Q-values, one row per critic.

    `is_training` (a Python bool) is required with batch_renorm and ignored
    without.
    """
    # Check here so that errors name this module, not the inner one.
    _critic_input(obs, action, self._obs_size, self._action_size,
                  self.module_name)
    if self._batch_renorm is None:
      return self._critics(obs, action)
    _check_training_flag(self._batch_renorm, is_training, self.module_name)
    return self._critics(obs, action, is_training)


def _check_support(v_min, v_max, num_atoms: int) -> None:
  """Raises unless v_min < v_max and num_atoms >= 2.

  Traced bounds (one per member of a population, e.g. from a swept discount)
  are not compared here; the members' configs were checked on the host.
  """
  ordered = v_min < v_max
  if num_atoms < 2 or (not isinstance(ordered, jax.core.Tracer)
                       and not ordered):
    raise ValueError(f'Need v_min < v_max and num_atoms >= 2, got {v_min}, '
                     f'{v_max}, {num_atoms}.')


def categorical_logits_at(value, atoms: Array) -> Array:
  """[K] logits of a distribution over `atoms` whose mass sits near `value`.

  A Gaussian bump one atom spacing wide: logits -((z - value) / dz)^2 / 2.
  Its mean is `value` wherever the bump is not cut by an end of the support
  (within ~2 spacings of an end it moves inwards by at most ~0.4 spacings).
  Softmax cross-entropy's gradient (probs - target) does not vanish on
  small probabilities, so a critic starting here can still move its mass
  anywhere on the support.

  Args:
    value: where the mass sits (a float, or traced per population member).
    atoms: [K] the support, evenly spaced.
  """
  spacing = (atoms[-1] - atoms[0]) / (atoms.shape[0] - 1)
  return -0.5 * jnp.square((atoms - value) / spacing)


class CategoricalCritic(hk.Module):
  """An MLP distributional Q-function over fixed atoms, as in D4PG.

  "Distributed Distributional Deterministic Policy Gradients", Barth-Maron et
  al., 2018 (https://arxiv.org/abs/1804.08617): (obs [..., O],
  action [..., A]) -> `CategoricalQ` with logits [..., K] on
  linspace(v_min, v_max, K).
  """

  def __init__(self,
               *,
               v_min: float,
               v_max: float,
               num_atoms: int = 51,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.relu,
               layer_norm: bool = False,
               obs_size: Optional[int] = None,
               action_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               init_value: Optional[float] = None,
               residual_blocks: int = 0,
               name: Optional[str] = None):
    """Builds the critic.

    Args:
      v_min: the smallest atom.
      v_max: the largest atom.
      num_atoms: K, the number of atoms.
      hidden_sizes: widths of the torso's layers (with residual_blocks, the
        one width: `(width,)`).
      activation: the torso's nonlinearity.
      layer_norm: whether the torso uses LayerNorm.
      obs_size: if given, observations must have this size (checked).
      action_size: if given, actions must have this size (checked).
      output_init_scale: variance scale of the output layer's initialiser
        (near zero: every state-action starts from the head's bias).
      init_value: None starts from a near-uniform distribution, whose mean
        is the support's midpoint; a value starts every Q's mass near it
        (the head's bias is `categorical_logits_at(init_value, atoms)`).
      residual_blocks: 0 for the MLP torso; N > 0 for a `torsos.ResidualMLP`
        (BRO's BroNet) of N blocks (see `torsos.critic_torso`).
      name: module name.
    """
    super().__init__(name=name)
    _check_support(v_min, v_max, num_atoms)
    self._v_min, self._v_max = v_min, v_max
    self._num_atoms = num_atoms
    self._obs_size = obs_size
    self._action_size = action_size
    self._torso = torsos.critic_torso(
        hidden_sizes, activation=activation, layer_norm=layer_norm,
        residual_blocks=residual_blocks, where='CategoricalCritic')
    b_init = None
    if init_value is not None:
      b_init = lambda shape, dtype: jnp.broadcast_to(  # pylint: disable=g-long-lambda
          categorical_logits_at(init_value, self.atoms), shape).astype(dtype)
    self._head = hk.Linear(num_atoms,
                           w_init=torsos.small_init(output_init_scale),
                           b_init=b_init, name='head')

  @property
  def atoms(self) -> Array:
    """[K] the fixed support."""
    return jnp.linspace(self._v_min, self._v_max, self._num_atoms)

  def __call__(self, obs: Array, action: Array) -> CategoricalQ:
    """Returns logits [..., K] and the atoms [K]."""
    x = _critic_input(obs, action, self._obs_size, self._action_size,
                      self.module_name)
    return CategoricalQ(logits=self._head(self._torso(x)), atoms=self.atoms)


class TwinCategoricalCritic(hk.Module):
  """`num_critics` independent `CategoricalCritic`s on one ensemble axis.

  For TD4-style agents (twin distributional critics): (obs [..., O],
  action [..., A]) -> `CategoricalQ` with logits [num_critics, ..., K] and
  atoms [K].
  """

  def __init__(self,
               *,
               v_min: float,
               v_max: float,
               num_atoms: int = 51,
               num_critics: int = 2,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.relu,
               layer_norm: bool = False,
               obs_size: Optional[int] = None,
               action_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               init_value: Optional[float] = None,
               residual_blocks: int = 0,
               name: Optional[str] = None):
    """Builds the critics: `CategoricalCritic`'s arguments + `num_critics`."""
    super().__init__(name=name)
    _check_support(v_min, v_max, num_atoms)
    self._obs_size = obs_size
    self._action_size = action_size
    self._atoms = (v_min, v_max, num_atoms)

    def member(obs, action):
      return CategoricalCritic(
          v_min=v_min, v_max=v_max, num_atoms=num_atoms,
          hidden_sizes=hidden_sizes, activation=activation,
          layer_norm=layer_norm, output_init_scale=output_init_scale,
          init_value=init_value, residual_blocks=residual_blocks,
          name='categorical_critic')(obs, action).logits

    # Built once, so that repeated calls share the parameters.
    self._critics = torsos.ensemble(member, size=num_critics)

  @property
  def atoms(self) -> Array:
    """[K] the fixed support."""
    return jnp.linspace(*self._atoms)

  def __call__(self, obs: Array, action: Array) -> CategoricalQ:
    """Returns logits [num_critics, ..., K] and the atoms [K]."""
    _critic_input(obs, action, self._obs_size, self._action_size,
                  self.module_name)
    return CategoricalQ(logits=self._critics(obs, action), atoms=self.atoms)


class ValueHead(hk.Module):
  """A linear layer to one scalar per example: features [..., D] -> [...]."""

  def __init__(self, *, output_init_scale: float = 1e-4,
               name: Optional[str] = None):
    """Builds the head.

    Args:
      output_init_scale: variance scale of the layer's initialiser.
      name: module name.
    """
    super().__init__(name=name)
    self._linear = hk.Linear(1, w_init=torsos.small_init(output_init_scale),
                             name='linear')

  def __call__(self, features: Array) -> Array:
    """Returns [...] values."""
    torsos.check_last_axis(features, None, 'features', self.module_name)
    return jnp.squeeze(self._linear(features), axis=-1)


class ValueNetwork(hk.Module):
  """An MLP state-value function V(obs [..., O]) -> [...], as PPO uses it."""

  def __init__(self,
               *,
               hidden_sizes: Sequence[int] = (256, 256),
               activation: Callable[[Array], Array] = jax.nn.tanh,
               layer_norm: bool = False,
               obs_size: Optional[int] = None,
               output_init_scale: float = 1e-4,
               name: Optional[str] = None):
    """Builds the network.

    Args:
      hidden_sizes: widths of the torso's layers.
      activation: the torso's nonlinearity.
      layer_norm: whether the torso uses LayerNorm.
      obs_size: if given, observations must have this size (checked).
      output_init_scale: variance scale of the output layer's initialiser.
      name: module name.
    """
    super().__init__(name=name)
    self._obs_size = obs_size
    self._torso = torsos.MLP(hidden_sizes, activation=activation,
                             layer_norm=layer_norm, name='torso')
    self._head = ValueHead(output_init_scale=output_init_scale, name='head')

  def __call__(self, obs: Array) -> Array:
    """Returns [...] values."""
    torsos.check_last_axis(obs, self._obs_size, 'obs', self.module_name)
    return self._head(self._torso(obs))
