"""Open the SQLite files gridshift shares between processes (forecast archive, ledger, batch-size history, serve table).

It lives in the bottom room, carbon, so the forecast archive and everything above share one opener."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

BUSY_TIMEOUT_S = 30.0


def connect_wal(path: str | Path, *, isolation_level: str | None = "", timeout_s: float = BUSY_TIMEOUT_S,
                check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode, waiting up to ``timeout_s`` for other processes.

    SQLite answers ``PRAGMA journal_mode=WAL`` with "database is locked" at once, without its busy
    handler, while another process is switching the same new file; so that one statement is retried
    until the timeout. ``isolation_level`` is passed to :func:`sqlite3.connect` (None: autocommit), and
    so is ``check_same_thread`` (False for a connection whose owner serialises threads itself).
    """
    con = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=isolation_level, check_same_thread=check_same_thread)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return con
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                con.close()
                raise
            time.sleep(0.02)
