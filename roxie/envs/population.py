"""Physics for a population: P members' envs stepped as one batch under vmap.

A population loop (`roxie.loops.make_population_loop`) vmaps one training
run over a leading member axis. Vmapping the env as it is would step each
member's physics separately: on the native backend that is P host callbacks
per env step (or, where `lax.cond` on a per-member predicate turns into a
select, callbacks on both branches), on MJX it runs the termination reset of
every env on every step. Instead the backend builds ONE physics of P x B
simulations and wraps it here: each call below is written for one member's B
envs, and its batching rule (`jax.custom_batching.custom_vmap`) merges the
members' [P, B, ...] arguments into one [P * B, ...] call of that physics
and splits the results again. Everything else about the env (reset
distribution, observation, reward, auto-reset, keys) stays per member, so
member k computes exactly what a single run of B envs computes.

Called outside a vmap over the members (which only a mistake can do), the
physics raises at run time.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from roxie.envs import common


def _refuse(*args):
  del args
  raise RuntimeError('A population physics only runs vmapped over its '
                     'members (roxie.loops.make_population_loop).')


def flatten_members(x: jax.Array) -> jax.Array:
  """[P, B, ...] -> [P * B, ...]."""
  return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def split_members(x: jax.Array, population: int) -> jax.Array:
  """[P * B, ...] -> [P, B, ...] (explicit sizes: some leaves are empty)."""
  return x.reshape((population, x.shape[0] // population) + x.shape[1:])


class PopulationPhysics(common.Physics):
  """One physics of P x B envs, seen by each member as B envs of its own.

  Attributes:
    inner: the physics of all P * B simulations (member k's envs are rows
      k * B ... k * B + B - 1).
    num_members: P.
    num_envs: B, envs per member.
  """

  def __init__(self, inner: common.Physics, population: int,
               merge_state: Callable[[Any], Any],
               split_state: Callable[[Any, int], Any]):
    """Wraps `inner`.

    Args:
      inner: a physics of population * B simulations.
      population: P.
      merge_state: the members' states, batched [P, ...], as `inner`'s
        state (e.g. MJX: [P, B, ...] leaves -> [P * B, ...]).
      split_state: `inner`'s state -> the members' states [P, ...]
        (`split_state(state, P)`).
    """
    if inner.num_envs % population:
      raise ValueError(f'{inner.num_envs} envs do not split into '
                       f'{population} members.')
    self.inner = inner
    self.num_members = int(population)
    self.num_envs = inner.num_envs // self.num_members
    self._merge, self._split = merge_state, split_state
    self._init = self._member_call(self._init_all)
    self._step = self._member_call(self._step_all)
    self._reset = self._member_call(self._reset_all)

  # -- the whole population's calls (arguments [P, B, ...]) --------------------

  def _unflat(self, tree):
    return jax.tree.map(lambda x: split_members(x, self.num_members), tree)

  def _init_all(self, qpos, qvel):
    state, view = self.inner.init(flatten_members(qpos), flatten_members(qvel))
    return self._split(state, self.num_members), self._unflat(view)

  def _step_all(self, state, ctrl, reset_mask, qpos, qvel):
    state, view, reset_view, diverged = self.inner.step(
        self._merge(state), flatten_members(ctrl), flatten_members(reset_mask), flatten_members(qpos),
        flatten_members(qvel))
    return (self._split(state, self.num_members),
            *self._unflat((view, reset_view, diverged)))

  def _reset_all(self, state, mask, qpos, qvel):
    """Resets only if some env of some member asks for it.

    Inside a member's env, the reset sits under a `lax.cond` on that
    member's mask, which vmap turns into a select that evaluates both
    branches; the cond here, on the whole population's mask, keeps the
    physics call to the steps that need it.
    """
    merged = self._merge(state)
    def call(_):
      new, view = self.inner.reset(merged, flatten_members(mask), flatten_members(qpos),
                                   flatten_members(qvel))
      return new, view
    skipped = jax.eval_shape(call, None)
    def skip(_):
      return merged, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                  skipped[1])
    new, view = jax.lax.cond(jnp.any(mask), call, skip, None)
    return self._split(new, self.num_members), self._unflat(view)

  def _member_call(self, whole: Callable):
    """`whole` (over [P, B, ...]) as a per-member function with a vmap rule."""
    p = self.num_members

    def shapes_per_member(*args):
      batched = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
          (p,) + jnp.shape(x), jnp.result_type(x)), args)
      out = jax.eval_shape(whole, *batched)
      return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype),
                          out)

    @custom_vmap
    def member(*args):
      return jax.pure_callback(_refuse, shapes_per_member(*args), *args)

    @member.def_vmap
    def rule(axis_size, in_batched, *args):
      if axis_size != p:
        raise ValueError(f'This population physics has {p} members; it was '
                         f'vmapped over {axis_size}.')
      args = jax.tree.map(
          lambda x, b: x if b else jnp.broadcast_to(x, (p,) + jnp.shape(x)),
          args, tuple(in_batched))
      out = whole(*args)
      return out, jax.tree.map(lambda _: True, out)

    return member

  # -- the Physics interface, per member ---------------------------------------

  def init(self, qpos, qvel):
    return self._init(qpos, qvel)

  def step(self, state, ctrl, reset_mask, qpos, qvel, render=None):
    if render is not None:
      raise ValueError('A population physics has no renderer.')
    return self._step(state, ctrl, reset_mask, qpos, qvel)

  def reset(self, state, mask, qpos, qvel, render=None):
    if render is not None:
      raise ValueError('A population physics has no renderer.')
    return self._reset(state, mask, qpos, qvel)
