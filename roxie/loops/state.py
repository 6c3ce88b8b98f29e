"""What the compiled loop carries between calls, and what a call reports."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from roxie.loops import collect
from roxie.types import Array, EnvState, PRNGKey


class LoopState(NamedTuple):
  """Everything the compiled loop carries from one call to the next."""
  agent: Any  # The recipe's state.
  env: EnvState
  replay: Any  # Replay state (off-policy) or an empty tuple (on-policy).
  stats: collect.EpisodeStats
  key: PRNGKey
  iteration: Array  # [] int32 iterations run so far.


class LoopOutput(NamedTuple):
  """What one call reports back (host-side logging only)."""
  # Recipe metrics, averaged over the iterations that learned.
  metrics: Mapping[str, Array]
  # [] int32 iterations of this call that learned: off-policy, those that ran
  # their `updates_per_iteration` gradient steps (none during warm-up or
  # while replay cannot sample yet), so gradient steps = updates *
  # updates_per_iteration; on-policy, every iteration (one `update` call each).
  updates: Array
  stats: collect.EpisodeStats  # Episode statistics gathered during the call.
