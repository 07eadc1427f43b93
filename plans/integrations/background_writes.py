"""The training session's periodic file writes (progress, the result file), on a thread of their own.

A training step must not wait for a disk: replacing a small file (write, rename) takes 0.1-0.7 ms
and, on a busy or network file system, several ms now and then (p90 4 ms, max 12 ms on a shared VM
disk while a job trained). The training thread hands over what to write
(:meth:`BackgroundWriter.submit`: a lock and a wake-up, once per poll interval); the writer thread
writes the newest hand-over (one not yet written is replaced: each write replaces whole files);
:meth:`BackgroundWriter.flush` waits until it is written, which the session does before writing
the same files itself (start, pause, finish), so a late periodic write never overtakes those.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundWriter"]

_NOTHING = object()


class BackgroundWriter:
    """Calls ``write(item)`` on a daemon thread (started at the first :meth:`submit`) with the newest
    item submitted; ``on_error(exc)`` when a write fails (the thread goes on)."""

    def __init__(self, write: Callable[[Any], None], on_error: Callable[[Exception], None], *,
                 name: str = "gridshift-writes") -> None:
        self._write = write
        self._on_error = on_error
        self._name = name
        self._cond = threading.Condition()
        self._item: Any = _NOTHING
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, item: Any) -> None:
        """Write ``item`` soon, instead of any item still waiting; after :meth:`close`, now."""
        with self._cond:
            if not self._closed:
                self._item = item
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                self._cond.notify_all()
                return
        self._write_now(item)

    def flush(self) -> None:
        """Wait until the items submitted so far are written (or the thread is gone)."""
        with self._cond:
            while (self._item is not _NOTHING or self._busy) and self._thread is not None and self._thread.is_alive():
                self._cond.wait(0.5)

    def close(self) -> None:
        """Write what is waiting, then stop the thread. Idempotent."""
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _write_now(self, item: Any) -> None:
        try:
            self._write(item)
        except Exception as exc:  # a failed write must never end the thread (nor training)
            self._on_error(exc)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._item is _NOTHING and not self._closed:
                    self._cond.wait()
                if self._item is _NOTHING:
                    return
                item, self._item = self._item, _NOTHING
                self._busy = True
            try:
                self._write_now(item)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
