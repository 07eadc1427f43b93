"""The grid events of this machine and its sites, in one JSON file: ``gridshift curtail`` writes it,
every running run watches it.

One file (``$GRIDSHIFT_HOME/grid-events.json``, or ``GRIDSHIFT_EVENTS_FILE``), written whole and
atomically (a temporary file renamed over it) under an exclusive ``flock``, so a reader never sees
half a file and two writers never lose each other's event. A run checks the file's modification
stamp (one ``stat``) every second or two and reads it only when that changed: a new event reaches
every run on the machine within a couple of seconds, with no server to run.

Events that ended more than a day ago are dropped when the file is written.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Iterator

from carbon.events.event import BadEvent, GridEvent, end_event, utcnow
from carbon.paths import gridshift_home

__all__ = ["EVENTS_FILE_ENV", "EventStore", "default_store"]

#: a file other than ``$GRIDSHIFT_HOME/grid-events.json`` (tests, or several stores on one machine)
EVENTS_FILE_ENV = "GRIDSHIFT_EVENTS_FILE"
#: how long an ended event stays in the file (so runs and reports can still name it)
_KEEP = timedelta(days=1)


def default_store() -> "EventStore":
    """The machine's event file (``GRIDSHIFT_EVENTS_FILE``, else ``$GRIDSHIFT_HOME/grid-events.json``)."""
    path = os.environ.get(EVENTS_FILE_ENV)
    return EventStore(Path(path) if path else gridshift_home() / "grid-events.json")


class EventStore:
    """The events in one file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def stamp(self) -> tuple[int, int, int] | None:
        """(inode, modification time in ns, size) of the file, or None when there is none: every write
        renames a new file over it, so the inode alone changes with each."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def load(self) -> list[GridEvent]:
        """Every event in the file (none when it does not exist); BadEvent naming the file when it is unreadable."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise BadEvent(f"{self.path}: cannot read the grid events: {exc}") from None
        try:
            data = json.loads(text) if text.strip() else {"events": []}
        except json.JSONDecodeError as exc:
            raise BadEvent(f"{self.path}:{exc.lineno}: not JSON: {exc.msg}") from None
        rows = data.get("events") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise BadEvent(f"{self.path}: expected {{\"events\": [...]}}")
        return [GridEvent.from_json(r, where=f"{self.path}: event {i + 1}") for i, r in enumerate(rows)]

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def update(self, change: Callable[[list[GridEvent]], list[GridEvent]], *, now: datetime | None = None) -> list[GridEvent]:
        """Read, ``change`` and write the events under the lock; returns what was written."""
        at = now or utcnow()
        with self._locked():
            events = [e for e in change(self.load()) if e.end is None or e.end > at - _KEEP]
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"events": [e.to_json() for e in events]}, indent=1), encoding="utf-8")
            os.replace(tmp, self.path)
        return events

    def add(self, event: GridEvent, *, now: datetime | None = None) -> None:
        """Add ``event`` (replacing one with the same id: an OpenADR event sent again, or modified)."""
        self.update(lambda evs: [e for e in evs if e.id != event.id] + [event], now=now)

    def cancel(self, event_id: str, *, now: datetime | None = None) -> GridEvent | None:
        """End the event ``event_id`` now (kept, so runs see it end); None when there is no such event."""
        at = now or utcnow()
        found: list[GridEvent | None] = [None]

        def cut(evs: list[GridEvent]) -> list[GridEvent]:
            out, found[0] = end_event(evs, event_id, at)
            return out

        self.update(cut, now=at)
        return found[0]
