"""Which program drives an env's host physics: training or evaluation.

On the native backend an env's simulations live on the host and follow only
the latest EnvState (see `roxie.envs.native`). An evaluator resets its env on
every call; built on the training env it would move the training
simulations under the training loop's state, whose next call then fails
inside XLA (an INTERNAL runtime error, the `StaleStateError` only at the end
of its traceback). So an env with host physics serves one role: the first
program built on it claims it, and a program of the other role is refused
with a plain Python error before anything is compiled.
"""

from __future__ import annotations

import weakref

from roxie import distributed

TRAINING = 'training (make_compiled_loop)'
EVALUATION = 'evaluation (make_evaluator)'

# Host physics object -> the role that claimed it.
_ROLES: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()


class HostPhysicsInUse(ValueError):
  """An env's host physics is already driven by a program of another role."""


def host_physics(env):
  """The object holding `env`'s host simulations, or None for pure-JAX state.

  An env keeps physics on the host when it offers `get_host_state` (the
  native backend, through its wrappers and shards).
  """
  if isinstance(env, distributed.ShardedEnv):
    env = env.local
  if not callable(getattr(env, 'get_host_state', None)):
    return None
  return getattr(env, 'physics', None)


def claim(env, role: str) -> None:
  """Records that a program of `role` drives `env`'s host physics.

  Raises:
    HostPhysicsInUse: a program of the other role already drives it.
  """
  physics = host_physics(env)
  if physics is None:
    return
  owner = _ROLES.get(physics)
  if owner is not None and owner != role:
    raise HostPhysicsInUse(
        f'This env keeps its physics on the host (native backend) and is '
        f'already used for {owner}; it cannot also serve {role}: the two '
        f'programs would step the same simulations, and the training loop '
        f'would fail on its next call (StaleStateError). Make a separate env '
        f'for evaluation, e.g. roxie.envs.make(task, backend="cpu", '
        f'num_envs=...).')
  _ROLES[physics] = role
