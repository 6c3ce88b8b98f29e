"""SIGINT/SIGTERM during training: stop at the next call boundary, with a checkpoint.

`StopRequest` is a context manager a training loop holds for its duration;
`set_early_signals` registers the recorder of signals that arrived before
(see `roxie.cli`).
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Optional

from roxie import checkpoint as ckpt_lib
from roxie.run.errors import Interrupted


def _signal_name(signum: int) -> str:
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f'signal {signum}'


# An object whose `signum` records a SIGINT/SIGTERM that arrived before
# training took the signals over (`roxie train` installs one at start-up,
# see roxie.cli); `_StopRequest` stops at once if one is pending.
_early_signals = None


def set_early_signals(recorder) -> None:
  """Registers the recorder of signals received before training started."""
  global _early_signals
  _early_signals = recorder


class StopRequest:
  """SIGINT/SIGTERM handlers for a training loop (see `Interrupted`).

  The first signal only records itself: the loop checks `signum` between
  compiled calls. The second raises `Interrupted` wherever the main thread
  is. Used as a `with` block; restores the previous handlers on exit.
  Inactive (handlers untouched) off the main thread or when not `enabled`.
  """

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self, out: Optional[str], enabled: bool):
    self.out = out
    self.enabled = enabled and threading.current_thread() is threading.main_thread()
    self.signum: Optional[int] = None
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    if self.signum is None:
      self.signum = signum
      print(f'\nroxie: {_signal_name(signum)} received: stopping after the '
            'current training call, with a checkpoint (send it again to stop '
            'at once; the last checkpoint stays).', file=sys.stderr,
            flush=True)
      return
    committed = ckpt_lib.latest(self.out) if self.out else None
    where = (f'the last complete checkpoint is {committed}'
             if committed else 'no checkpoint was written')
    raise Interrupted(
        f'stopped at once by a second {_signal_name(signum)}; {where}. '
        f'Resume with: roxie train --resume {self.out}', signum=signum,
        out=self.out)

  def __enter__(self):
    if self.enabled:
      for s in self.SIGNALS:
        self._previous[s] = signal.signal(s, self._handle)
      early = _early_signals
      if early is not None and early.signum is not None:
        signum, early.signum = early.signum, None
        self.__exit__(None, None, None)  # A `with` does not exit a failed enter.
        raise Interrupted(
            f'stopped by {_signal_name(signum)} before training started '
            '(no checkpoint was written). Resume with: roxie train --resume '
            f'{self.out}', signum=signum, out=self.out)
    return self

  def __exit__(self, *exc):
    for s, h in self._previous.items():
      signal.signal(s, h)
    self._previous = {}
    return False


_StopRequest = StopRequest  # The name before roxie.run became a package.
