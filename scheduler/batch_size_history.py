"""Batch-size trials of recurring jobs, in a table of the SQLite ledger file (no server).

:class:`plans.batch_size.BatchSizeOptimizer` is a pure fold over a job's trials; this module stores
them. ``begin`` reads the history, asks the optimiser and records a *pending* trial inside one
``BEGIN IMMEDIATE`` transaction, so two runs of the same job starting together are serialised:
the second sees the first's pending trial and does not duplicate its exploration. ``finish`` records
the outcome; ``abandon`` drops a trial whose run died without a result.

The table has its own version row (``bso_schema_version``) so it can live beside the ledger's runs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from plans.batch_size import BatchSizeConfig, BatchSizeOptimizer, Proposal, Trial
from scheduler.errors import LedgerError
from scheduler.ledger import gridshift_home

__all__ = ["BatchSizeHistory", "BSO_SCHEMA_VERSION"]

BSO_SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bso_schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bso_trials (
    trial_id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'done')),
    cost REAL,
    reached INTEGER,
    steady_cost REAL
);
CREATE INDEX IF NOT EXISTS bso_trials_job ON bso_trials(job, trial_id);
"""


class BatchSizeHistory:
    """Trials per job in ``path`` (default: the ledger file). Use as a context manager or ``close()``."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else gridshift_home() / "ledger.sqlite3"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT version FROM bso_schema_version").fetchone()
            if row is None:
                self._db.execute("INSERT INTO bso_schema_version VALUES (?)", (BSO_SCHEMA_VERSION,))
            elif row[0] > BSO_SCHEMA_VERSION:
                raise LedgerError(f"{self.path}: batch-size table version {row[0]} is newer than this gridshift understands ({BSO_SCHEMA_VERSION})")
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot open the batch-size history: {exc}") from None
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot create the batch-size history: {exc}") from None

    def _trials(self, job: str) -> list[Trial]:
        rows = self._db.execute(
            "SELECT batch_size, status, cost, reached, steady_cost FROM bso_trials WHERE job = ? ORDER BY trial_id", (job,)
        ).fetchall()
        return [
            Trial(b, pending=True) if status == "pending" else Trial(b, cost=float(cost), reached=bool(reached), steady_cost=steady)
            for b, status, cost, reached, steady in rows
        ]

    def history(self, job: str) -> list[Trial]:
        """The job's trials, oldest first (pending ones included, marked pending)."""
        try:
            return self._trials(job)
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot read the batch-size history: {exc}") from None

    def begin(self, job: str, config: BatchSizeConfig, rng: np.random.Generator) -> tuple[int, Proposal]:
        """Choose the batch size for a new run of ``job`` and record it as pending, atomically."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                proposal = BatchSizeOptimizer.from_history(config, self._trials(job)).propose(rng)
                cur = self._db.execute(
                    "INSERT INTO bso_trials (job, batch_size, status) VALUES (?, ?, 'pending')", (job, proposal.batch_size)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot begin a batch-size trial: {exc}") from None
        return int(cur.lastrowid or 0), proposal

    def finish(self, trial_id: int, *, cost: float, reached: bool, steady_cost: float | None = None) -> None:
        """Record the outcome of a pending trial."""
        try:
            cur = self._db.execute(
                "UPDATE bso_trials SET status = 'done', cost = ?, reached = ?, steady_cost = ? WHERE trial_id = ? AND status = 'pending'",
                (cost, int(reached), steady_cost, trial_id),
            )
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot finish trial {trial_id}: {exc}") from None
        if cur.rowcount != 1:
            raise LedgerError(f"{self.path}: trial {trial_id} is not pending")

    def abandon(self, trial_id: int) -> None:
        """Forget a pending trial whose run ended without a result."""
        try:
            self._db.execute("DELETE FROM bso_trials WHERE trial_id = ? AND status = 'pending'", (trial_id,))
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot abandon trial {trial_id}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "BatchSizeHistory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
