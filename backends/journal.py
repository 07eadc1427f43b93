"""The on-disk journal of GPU settings found before gridshift changed them.

One JSON file per physical GPU (``$GRIDSHIFT_HOME/gpu-journal/<uuid>.json``), written atomically
(temp file, fsync, rename) *before* the first change to that GPU and updated before each further
kind of change. It is deleted once the prior settings are back. A file left behind means a process
died without restoring (SIGKILL, OOM killer, power loss); the next gridshift start or
``gridshift gpu restore`` replays it.

Format (``version`` 1)::

    {"version": 1, "uuid": "GPU-...", "index": 0, "name": "NVIDIA H200",
     "owner": {"pid": 123, "start_ticks": 456, "host": "node1", "boot_id": "..."},
     "written_at": "2026-11-30T14:00:00+00:00",
     "prior": {"power_limit_mw": 700000},
     "touched": ["power_limit", "sm_locked_clocks"]}

``touched`` lists what gridshift changed (or was about to change); restore puts back
``prior.power_limit_mw`` and resets locked clocks that gridshift locked (NVML has no getter for
locked clocks, so "reset" is the prior state gridshift can vouch for; see docs/nvidia.md). A newer
``version`` is refused with a message naming both numbers.

A file that cannot be read (corrupt, truncated, a newer format) is *skipped* by ``entries()`` with
a :class:`JournalWarning`, left on disk, and listed by ``unreadable()``: one bad file must not stop
the other GPUs from recovering. The NVIDIA backend keeps the GPU it names measure-only.
"""

from __future__ import annotations

import json
import os
import socket
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from backends.errors import BackendError

__all__ = ["JOURNAL_VERSION", "Journal", "JournalEntry", "Owner", "JournalError", "JournalWarning",
           "default_journal_dir"]

JOURNAL_VERSION = 1


class JournalError(BackendError):
    """The journal cannot be read or written (corrupt file, newer format, unwritable directory)."""


class JournalWarning(UserWarning):
    """A journal file was skipped because it cannot be read; it stays on disk."""


def default_journal_dir() -> Path:
    """``$GRIDSHIFT_HOME/gpu-journal`` (default ``~/.local/share/gridshift/gpu-journal``)."""
    home = os.environ.get("GRIDSHIFT_HOME")
    base = Path(home) if home else Path.home() / ".local" / "share" / "gridshift"
    return base / "gpu-journal"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """Process start time in clock ticks since boot (guards against PID reuse)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


@dataclass(frozen=True)
class Owner:
    pid: int
    start_ticks: int | None
    host: str
    boot_id: str

    @classmethod
    def current(cls) -> "Owner":
        pid = os.getpid()
        return cls(pid=pid, start_ticks=_start_ticks(pid), host=socket.gethostname(), boot_id=_boot_id())

    def is_alive(self) -> bool:
        """True when the owning process still runs (same host, same boot, same start time)."""
        if self.host != socket.gethostname() or (self.boot_id and self.boot_id != _boot_id()):
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, owned by someone else
            pass
        ticks = _start_ticks(self.pid)
        return self.start_ticks is None or ticks is None or ticks == self.start_ticks

    def same_boot(self) -> bool:
        return not self.boot_id or self.boot_id == _boot_id()


@dataclass(frozen=True)
class JournalEntry:
    uuid: str
    index: int
    name: str
    owner: Owner
    prior: dict[str, Any]
    touched: tuple[str, ...] = ()
    written_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": JOURNAL_VERSION,
            "uuid": self.uuid,
            "index": self.index,
            "name": self.name,
            "owner": {"pid": self.owner.pid, "start_ticks": self.owner.start_ticks, "host": self.owner.host,
                      "boot_id": self.owner.boot_id},
            "written_at": self.written_at,
            "prior": dict(self.prior),
            "touched": list(self.touched),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "journal") -> "JournalEntry":
        if not isinstance(data, dict):
            raise JournalError(f"{source}: malformed journal entry (not a JSON object)")
        version = data.get("version")
        if not isinstance(version, int) or version > JOURNAL_VERSION:
            raise JournalError(f"{source}: journal version {version!r} is newer than this gridshift reads "
                               f"({JOURNAL_VERSION}); upgrade gridshift to restore it")
        try:
            o = data["owner"]
            return cls(uuid=data["uuid"], index=int(data["index"]), name=data.get("name", ""),
                       owner=Owner(pid=int(o["pid"]), start_ticks=o.get("start_ticks"), host=o.get("host", ""),
                                   boot_id=o.get("boot_id", "")),
                       prior=dict(data["prior"]), touched=tuple(data.get("touched", ())),
                       written_at=data.get("written_at", ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"{source}: malformed journal entry ({exc!r})") from None


class Journal:
    """The journal directory. All writes are atomic; readers never see half a file."""

    def __init__(self, directory: Path | str | None = None, *, owner: Callable[[], Owner] = Owner.current) -> None:
        self.directory = Path(directory) if directory else default_journal_dir()
        self._owner = owner

    def path_for(self, uuid: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in uuid)
        return self.directory / f"{safe}.json"

    def new_entry(self, *, uuid: str, index: int, name: str, prior: dict[str, Any]) -> JournalEntry:
        return JournalEntry(uuid=uuid, index=index, name=name, owner=self._owner(), prior=prior)

    def write(self, entry: JournalEntry, *, exclusive: bool = False) -> None:
        """Write (or replace) ``entry`` durably before the change it protects.

        ``exclusive`` claims the GPU: it fails with FileExistsError when an entry is already there,
        atomically (a hard link never replaces), so two processes starting at once cannot both
        record "the prior settings".
        """
        path = self.path_for(entry.uuid)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp.{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(entry.to_json(), f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            if exclusive:
                try:
                    os.link(tmp, path)
                finally:
                    tmp.unlink()
            else:
                os.replace(tmp, path)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except FileExistsError:
            raise
        except OSError as exc:
            raise JournalError(f"cannot write the GPU settings journal {path}: {exc}") from None

    def read(self, uuid: str) -> JournalEntry | None:
        path = self.path_for(uuid)
        if not path.exists():
            return None
        return self._load(path)

    def _load(self, path: Path) -> JournalEntry:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # ValueError: bad JSON, or bytes that are not UTF-8
            raise JournalError(f"{path}: unreadable journal ({exc})") from None
        return JournalEntry.from_json(data, source=str(path))

    def scan(self) -> tuple[list[JournalEntry], list[tuple[Path, str]]]:
        """Every readable entry, and ``(path, reason)`` for each file that cannot be read."""
        good: list[JournalEntry] = []
        bad: list[tuple[Path, str]] = []
        if not self.directory.is_dir():
            return good, bad
        for path in sorted(self.directory.glob("*.json")):
            try:
                good.append(self._load(path))
            except JournalError as exc:
                bad.append((path, str(exc)))
        return good, bad

    def entries(self) -> list[JournalEntry]:
        """The readable entries; an unreadable file is skipped with a :class:`JournalWarning` (and kept)."""
        good, bad = self.scan()
        for path, reason in bad:
            warnings.warn(f"skipping GPU settings journal file {path} (kept on disk): {reason}", JournalWarning,
                          stacklevel=2)
        return good

    def unreadable(self) -> list[tuple[Path, str]]:
        """``(path, reason)`` for each journal file that cannot be read (corrupt or a newer format)."""
        return self.scan()[1]

    def remove(self, uuid: str) -> None:
        try:
            self.path_for(uuid).unlink()
        except FileNotFoundError:
            pass
