"""The few types shared across roxie's layers, and the recipe protocol.

Everything here is data: NamedTuples of arrays (pytrees, so they pass through
`jax.jit`, `jax.vmap` and `lax.scan`) and NamedTuples of pure functions. There
is no class hierarchy; a recipe is a value, and recipes share code by calling
the primitives in `roxie.losses`, `roxie.networks` and `roxie.buffers`.

Shape conventions: `B` is the number of parallel environments, `O` the
observation size, `A` the action size, `T` a time length, `N` a batch of
sampled transitions.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple, Optional, Protocol, Tuple

import chex

Array = chex.Array
PRNGKey = chex.PRNGKey
Params = Any
AgentState = Any
Metrics = Mapping[str, Array]


class EnvSpec(NamedTuple):
  """What a learner needs to know about an environment.

  Actions are always in [-1, 1]^A on roxie's side; the environment maps them
  onto the actuators' control ranges.
  """
  task: str  # Task name, e.g. 'CartpoleSwingup'.
  obs_size: int  # O: length of the flat float32 observation.
  action_size: int  # A.
  obs_names: Tuple[Tuple[str, int], ...]  # (name, size) of each part, in order.
  control_timestep: float  # Seconds per environment step.
  episode_length: int  # Steps before a time-limit truncation.
  # Dict observations (pixels, depth, sensors besides the state vector):
  # ((key, per-env shape, dtype name), ...) in key order, e.g.
  # (('pixels', (64, 64, 9), 'uint8'), ('state', (5,), 'float32')).
  # None for a flat [O] float32 observation, the default. With a dict,
  # `obs_size` is the size of its 'state' entry (0 without one).
  obs_shapes: Optional[Tuple[Tuple[str, Tuple[int, ...], str], ...]] = None
  # Image entries ('pixels', 'depth') stack this many frames along their
  # last (channel) axis, oldest first, newest last.
  frame_stack: int = 1
  # Control steps per step of this env (`roxie.envs.wrappers.ActionRepeat`):
  # its reward is the sum of that many control steps' rewards, so a
  # per-control-step reward bound (the suite's [0, 1]) scales by it.
  action_repeat: int = 1


class TimeStep(NamedTuple):
  """What one batched environment step returns.

  Episodes reset automatically inside `step`. Where an episode ended on this
  step, `obs` is already the first observation of the next episode and
  `final_obs` is the observation the step actually reached, which is what a
  learner bootstraps from on truncation. Elsewhere `final_obs == obs`.
  """
  obs: Array  # [B, O] float32: the observation to act on next.
  reward: Array  # [B] float32.
  terminated: Array  # [B] bool: the episode ended in a terminal state (no bootstrap).
  truncated: Array  # [B] bool: the episode hit its time limit (bootstrap).
  final_obs: Array  # [B, O] float32: the observation this step reached.
  info: Mapping[str, Array]  # [B] per-env counters, e.g. 'clipped', 'diverged'.


class EnvState(NamedTuple):
  """The state of a batch of environments, whatever the backend."""
  obs: Array  # [B, O] float32: the current observation.
  t: Array  # [B] int32: steps taken in the current episode.
  task_state: Array  # [B, K] float32: per-episode task parameters (targets, ...).
  key: PRNGKey  # For the reset distribution.
  physics: Any  # Backend-specific: an mjx.Data batch, or a host handle.


class Transition(NamedTuple):
  """An (n-step) transition, as replay hands it to an off-policy update.

  `reward` is the discounted sum of the n rewards and `discount` the product of
  the discounts over the window (gamma^k, and 0 after a termination), so a
  one-step TD target is always `reward + discount * v(next_obs)`.
  """
  obs: Array  # [..., O] observation at the start of the window.
  action: Array  # [..., A] action taken there.
  reward: Array  # [...] discounted n-step return.
  discount: Array  # [...] bootstrap weight for `next_obs`.
  next_obs: Array  # [..., O] observation to bootstrap from.


class Rollout(NamedTuple):
  """A [T, B] on-policy trajectory chunk, as PPO-style updates consume it.

  `obs[t]` is acted on with `action[t]`; the step's reward, flags and the true
  next observation (`final_obs[t]`, which differs from `obs[t + 1]` exactly
  where an episode ended) follow. `last_obs` is the observation after the
  chunk, to bootstrap the final step.
  """
  obs: Array  # [T, B, O]
  action: Array  # [T, B, A]
  reward: Array  # [T, B]
  terminated: Array  # [T, B] bool
  truncated: Array  # [T, B] bool
  final_obs: Array  # [T, B, O]
  extras: Mapping[str, Array]  # [T, B, ...] what `act` returned, e.g. log_prob.
  last_obs: Array  # [B, O]


class ReplaySpec(NamedTuple):
  """How an off-policy recipe wants its replay sampled."""
  capacity: int  # Stored transitions (all envs together).
  batch_size: int  # N transitions per gradient step.
  n_step: int  # Window length of the returns.
  discount: float  # Per-step gamma.


class Policy(NamedTuple):
  """The deterministic policy a recipe exports: what acting needs, and how.

  params(agent_state) -> nested dict of arrays
      The part of the agent state that acting needs (e.g. {'actor': ...},
      plus observation statistics where the recipe normalises): nothing of
      critics or optimisers. Keys are strings without ':'.
  apply(params, obs [..., O]) -> action [..., A] in [-1, 1]
      Pure and jittable; the action `act(agent_state, obs, key,
      explore=False)` takes, for `params = params(agent_state)`. From pixels
      `obs` is the dict observation.

  A recipe builds it in `make` (from the same networks as `act`), so
  `roxie export`, `roxie.load_policy`, `roxie play` and `roxie eval --policy`
  need nothing but the recipe; `roxie.loops.check_recipe` and export check
  that `apply` agrees with `act`. Not to be confused with
  `roxie.export.Policy`, a loaded bundle: these functions with the trained
  parameters bound.
  """
  params: Callable[[AgentState], Mapping[str, Any]]
  apply: Callable[[Params, Any], Array]


class Recipe(NamedTuple):
  """An agent, as data: pure functions plus what the loop must know.

  A recipe module's `make(config, env_spec) -> Recipe` builds one for an
  environment's observation and action sizes (networks need them).

  init(key, env_spec) -> agent_state
  act(agent_state, obs [B, O], key, *, explore: bool) -> (action [B, A], extras)
      `extras` is a dict of [B, ...] arrays (e.g. PPO's log-probabilities and
      values), stored in rollouts for on-policy recipes.
  update(agent_state, data, key) -> (agent_state, metrics)
      Off-policy: `data` is a `Transition` batch of [N, ...] from replay, and
      the loop calls update `updates_per_iteration` times per iteration.
      On-policy: `data` is a whole `Rollout`; epochs and minibatches happen
      inside update.
  policy: the deterministic policy to export (see `Policy`), or None for a
      recipe that cannot be exported.
  """
  name: str
  config: Any
  init: Callable[[PRNGKey, EnvSpec], AgentState]
  act: Callable[..., Tuple[Array, Mapping[str, Array]]]
  update: Callable[[AgentState, Any, PRNGKey], Tuple[AgentState, Metrics]]
  on_policy: bool
  replay: Optional[ReplaySpec] = None  # Off-policy recipes only.
  rollout_length: int = 0  # On-policy recipes only: T steps per update.
  updates_per_iteration: int = 1  # Gradient steps per collected chunk (off-policy).
  steps_per_iteration: int = 1  # Env steps per env per chunk (off-policy).
  warmup_steps: int = 0  # Env steps (all envs together) of uniform random actions first.
  policy: Optional[Policy] = None  # What export, play and eval act with.


@dataclasses.dataclass(frozen=True)
class RunDefaults:
  """How a recipe is run unless told otherwise: run settings, not its Config.

  A recipe module's `RUN_DEFAULTS` (this type) sits beside its `Config`:
  `make` never reads these, the run layer does (`roxie train`, `roxie.run`).
  `--set num_envs=16`, `--set total_steps=1e6` and `--set action_repeat=2`
  change them as `--set` changes a Config field; `--num-envs` and `--steps`
  too. On the DeepMind Control tasks of `roxie.envs.tasks.ACTION_REPEAT`
  the task's action repeat replaces this one unless it is set.
  """
  num_envs: int = 8  # Parallel training environments.
  total_steps: int = 200_000  # Environment (control) steps to train.
  action_repeat: int = 1  # Control steps per agent decision.


# RunDefaults' field names: the `--set` keys that are run settings. roxie's
# Configs declared them as fields before they became run settings, so
# config.json files and policy bundles written then still record them.
RUN_SETTINGS = ('num_envs', 'total_steps', 'action_repeat')


def check_spec(built_for: EnvSpec, given: EnvSpec) -> None:
  """Raises if a recipe built for one spec is initialised for another."""
  if (built_for.obs_size, built_for.action_size) != (given.obs_size,
                                                      given.action_size):
    raise ValueError(
        f'This recipe was built for observations of size '
        f'{built_for.obs_size} and actions of size {built_for.action_size} '
        f'({built_for.task}), but the environment has '
        f'{given.obs_size} and {given.action_size} ({given.task}).')
  built_shapes = _shapes_key(built_for.obs_shapes)
  given_shapes = _shapes_key(given.obs_shapes)
  if built_shapes != given_shapes:
    describe = lambda s: ('flat observations' if s is None else
                          'observations ' + ', '.join(
                              f'{k} {list(shape)} {t}' for k, shape, t in s))
    raise ValueError(
        f'This recipe was built for {describe(built_shapes)} '
        f'({built_for.task}), but the environment has '
        f'{describe(given_shapes)} ({given.task}).')


def _shapes_key(obs_shapes):
  """obs_shapes as nested tuples (specs read back from JSON have lists)."""
  if obs_shapes is None:
    return None
  return tuple((str(k), tuple(int(d) for d in s), str(t))
               for k, s, t in obs_shapes)


class Env(Protocol):
  """A batch of `num_envs` environments of one task, functional.

  `reset` and `step` are pure functions of their arguments (the native CPU
  backend reaches host physics through a callback, but its state and results
  flow through the returned values in program order), so they compose with
  `jax.jit`, `lax.scan` and `lax.cond`.
  """
  spec: EnvSpec
  num_envs: int

  def reset(self, key: PRNGKey) -> EnvState:
    ...

  def step(self, state: EnvState, action: Array) -> Tuple[EnvState, TimeStep]:
    ...
