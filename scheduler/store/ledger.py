"""The run ledger: one SQLite row per run holding the whole report as JSON.

Location: ``$GRIDSHIFT_HOME/ledger.sqlite3`` (default ``~/.local/share/gridshift``). The schema is
versioned; migrations are explicit and run on open.

The ledger says what ran where, when and how it ended (a failed job's error includes its last output
line, which is what makes the error actionable in ``gridshift runs`` and usually names the
exception; the rest of the job's output is in the run's log file, not here). Both can name paths,
hosts and whatever a job prints, so the home folder is created 0700 and the ledger (with SQLite's
``-wal``/``-shm`` files, which take the database's mode) and the logs are 0600: see
:func:`private_dir` and :func:`private_file`.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from carbon.paths import gridshift_home  # re-exported: every room reads the home folder alike
from carbon.sqlite_file import connect_wal
from scheduler.errors import LedgerError

__all__ = ["gridshift_home", "Ledger", "LEDGER_SCHEMA_VERSION", "private_dir", "private_file"]

LEDGER_SCHEMA_VERSION = 1


def private_dir(path: Path) -> Path:
    """``path``, created 0700 when missing (with its missing parents); an existing folder keeps its
    mode: its owner may share it on purpose."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def private_file(path: Path) -> Path:
    """``path``, created 0600 when missing, before SQLite or logging create it with the umask's mode
    (0644 by default); an existing file readable by others (an older gridshift's) is made 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path


_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        policy TEXT NOT NULL,
        job TEXT NOT NULL,
        status TEXT NOT NULL,
        backend TEXT NOT NULL,
        energy_j REAL,
        carbon_g REAL,
        duration_s REAL,
        report TEXT NOT NULL
    );
    CREATE INDEX runs_job ON runs(job, created_at);
    """,
}


class Ledger:
    """Append and list run reports. Use as a context manager or call ``close()``."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else gridshift_home() / "ledger.sqlite3"
        try:
            private_dir(self.path.parent)
            self._db = connect_wal(private_file(self.path))
            self._migrate()
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot open the run ledger: {exc}") from None
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot create the run ledger: {exc}") from None

    def _migrate(self) -> None:
        with self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
            current = row[0] if row else 0
            if current > LEDGER_SCHEMA_VERSION:
                raise LedgerError(
                    f"{self.path}: ledger schema version {current} is newer than this gridshift understands "
                    f"({LEDGER_SCHEMA_VERSION}); upgrade gridshift"
                )
            for version in range(current + 1, LEDGER_SCHEMA_VERSION + 1):
                self._db.executescript(_MIGRATIONS[version])
            if row is None:
                self._db.execute("INSERT INTO schema_version VALUES (?)", (LEDGER_SCHEMA_VERSION,))
            else:
                self._db.execute("UPDATE schema_version SET version = ?", (LEDGER_SCHEMA_VERSION,))

    def record(self, report: dict[str, Any]) -> None:
        """Insert (or replace) one run report (the dict from ``RunReport.to_json()``)."""
        try:
            with self._db:
                self._db.execute(
                    "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        report["run_id"], report["started_at"], report["policy"], report["job"], report["status"],
                        report["backend"], report.get("energy_j"), report.get("carbon_g"), report.get("duration_s"),
                        json.dumps(report, sort_keys=True),
                    ),
                )
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot record run: {exc}") from None

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The report of run ``run_id``, or None when it was never recorded."""
        try:
            row = self._db.execute("SELECT report FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot read run {run_id}: {exc}") from None
        return json.loads(row[0]) if row else None

    def runs(self, *, job: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Reports, newest first."""
        sql = "SELECT report FROM runs"
        args: list[Any] = []
        if job is not None:
            sql += " WHERE job = ?"
            args.append(job)
        sql += " ORDER BY created_at DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        try:
            return [json.loads(r[0]) for r in self._db.execute(sql, args)]
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot read runs: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
