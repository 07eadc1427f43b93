"""How ``gridshift run`` stops on SIGINT (Ctrl-C), SIGTERM and SIGHUP (its terminal or SSH session closed).

The first signal raises in the main thread (``KeyboardInterrupt`` for SIGINT, ``SystemExit(128 + N)``
for SIGTERM and SIGHUP: 143, 129), so the flow unwinds through its ``finally`` blocks: the job is stopped, the settings
restored (the backend's own handler restores at once, then calls this one), the run recorded.

A second signal (an impatient second Ctrl-C) does not raise: an exception landing in those
``finally`` blocks would skip closing the mode span and the window, and the run would be recorded
with no energy. It sets :data:`flows.job.process.KILL_NOW` instead, which cuts short what is being waited
for (the job's grace period before SIGKILL, the temporary server's shutdown), so the exit is
faster than after one signal and keeps what was measured. A third signal raises again, for a
cleanup that hangs somewhere gridshift does not wait itself (the settings were restored by the
first). Once the run is recorded, :meth:`settle` makes further signals only count, so the report is
still printed. Under ``nohup`` SIGHUP is ignored, and stays so.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from types import FrameType
from typing import Any, Iterator

from flows.job.process import KILL_NOW

__all__ = ["StopSignals"]

class StopSignals:
    """Counts SIGINT/SIGTERM/SIGHUP while :meth:`installed`; ``exit_code`` is 128 + the first one's number."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._settled = False

    @property
    def exit_code(self) -> int | None:
        return 128 + self.received[0] if self.received else None

    @property
    def forced(self) -> bool:
        """A second signal came: stop waiting for anything but restoring the settings and recording the run."""
        return len(self.received) > 1

    def settle(self) -> None:
        """From now on a signal is only counted: the run is recorded, what is left is printing it."""
        self._settled = True

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if len(self.received) > 1:
            KILL_NOW.set()
        if self._settled or len(self.received) == 2:
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    @contextmanager
    def installed(self) -> Iterator["StopSignals"]:
        from backends.safety import stop_signals

        KILL_NOW.clear()  # a process runs one `gridshift run`, a test several
        previous: dict[int, Any] = {sig: signal.signal(sig, self.handle) for sig in stop_signals()}
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
