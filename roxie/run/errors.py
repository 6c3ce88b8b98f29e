"""The exceptions a run raises: RunError, TrainingFault and Interrupted."""

from __future__ import annotations

from typing import Optional



class RunError(ValueError):
  """A run that cannot be started or resumed as asked, and why."""


class TrainingFault(RuntimeError):
  """Training cannot go on: non-finite parameters, or a failed write.

  Nothing after the last checkpoint is saved (that checkpoint is kept as
  it was); `roxie train` prints the message and exits with status 1.
  """


class Interrupted(KeyboardInterrupt):
  """Training stopped by SIGINT (Ctrl-C) or SIGTERM.

  On the first signal the run finishes the compiled call in progress, saves
  a checkpoint at that iteration boundary and raises this with
  `checkpoint` set; a second signal stops at once (even mid-checkpoint,
  which the atomic write makes safe: the previous checkpoint stays) and
  raises it with `checkpoint` None. A KeyboardInterrupt, so callers that
  catch Ctrl-C keep working.

  Attributes:
    signum: the signal's number.
    env_steps: env steps of the checkpoint written (None without one).
    checkpoint: its path, or None.
    out: the run directory.
    exit_code: the shell's convention for a death by that signal, 128 +
      signum (130 for SIGINT, 143 for SIGTERM).
  """

  def __init__(self, message: str, *, signum: int,
               env_steps: Optional[int] = None,
               checkpoint: Optional[str] = None, out: Optional[str] = None):
    super().__init__(message)
    self.signum = int(signum)
    self.env_steps = env_steps
    self.checkpoint = checkpoint
    self.out = out
    self.exit_code = 128 + self.signum
