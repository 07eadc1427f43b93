"""Restore a backend's settings on normal exit, exception, SIGINT, SIGTERM and SIGHUP.

``with restoring_on_signals(backend): ...`` restores when the block ends, however it ends. While
it is active, SIGINT, SIGTERM and SIGHUP (the terminal or SSH session closed) restore *at once*
inside the handler (before any unwinding that could be slow or blocked; once: a second signal finds
them restored) and then call the handler that was installed before, if it is a Python function,
which decides how to stop (``gridshift run``'s raises on the first signal only), or else raise
``KeyboardInterrupt`` / ``SystemExit(128 + signum)``, so the program's own ``finally`` blocks still
run. The previous handlers come back on exit. A signal the process was told to ignore (SIGHUP
under ``nohup``) stays ignored.

SIGKILL cannot be caught: that case is covered by the journal (:mod:`backends.journal`), replayed
by the next start or ``gridshift gpu restore``. Signal handlers can only be installed from the
main thread; elsewhere only the exit/exception path is covered (``installed`` says which).
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Any, Callable, Iterator

from backends.base import Backend

__all__ = ["install_restore_handlers", "restoring_on_signals", "stop_signals"]


def stop_signals() -> tuple[int, ...]:
    """The signals that stop gridshift cleanly: SIGINT, SIGTERM, and SIGHUP unless it is ignored.

    An ignored SIGHUP is nohup's: the user asked to keep running when the terminal goes. An ignored
    SIGINT is still taken (a background job of a non-interactive shell starts with it ignored, and
    ``kill -INT`` must still restore).
    """
    hup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hup)


def install_restore_handlers(backend: Backend, *, log: Callable[[str], None] | None = None) -> Callable[[], None]:
    """Install SIGINT/SIGTERM/SIGHUP handlers that restore ``backend`` first; returns the uninstaller.

    A no-op (returning a no-op) outside the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}
    restored: list[bool] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not restored:
            try:
                backend.restore()
            except Exception as exc:  # still exit; the journal keeps what could not be restored
                print(f"gridshift: warning: restore on signal failed ({exc}); run `gridshift gpu restore`",
                      file=sys.stderr)
            else:
                restored.append(True)
                if log is not None:
                    log(f"signal {signal.Signals(signum).name}: GPU settings restored")
        before = previous.get(signum)
        if callable(before) and before is not signal.default_int_handler:
            before(signum, frame)  # the program's own handler (e.g. `gridshift run`'s) decides how to stop
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    for sig in stop_signals():
        previous[sig] = signal.signal(sig, handler)

    def uninstall() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    return uninstall


@contextmanager
def restoring_on_signals(backend: Backend, *, log: Callable[[str], None] | None = None) -> Iterator[Backend]:
    """Restore ``backend`` when the block exits (any way) and at once on SIGINT/SIGTERM/SIGHUP."""
    uninstall = install_restore_handlers(backend, log=log)
    try:
        yield backend
    finally:
        try:
            backend.restore()
        finally:
            uninstall()
