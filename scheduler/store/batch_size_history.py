"""Batch-size trials of recurring jobs, in a table of the SQLite ledger file (no server).

:class:`plans.batch_size.BatchSizeOptimizer` is a pure fold over a job's trials; this module stores
them, keyed by job name and workload fingerprint (:func:`scheduler.settings.auto_power.job_fingerprint`).
``begin`` reads the history, asks the optimiser and records a *pending* trial inside one
``BEGIN IMMEDIATE`` transaction, so runs of the same job starting together (threads or processes)
are serialised: the second sees the first's pending trial and does not duplicate its exploration.
``finish`` records the outcome, once; the optimiser learns from the outcomes ``reached``,
``missed`` and ``stopped`` (early-stopped at beta x the best cost: a miss at the cost it ran up).
The others (``no_result``, ``failed``, ``mixed``) are kept as evidence but not learnt from. A
pending trial older than ``stale_after_s`` (its run was killed without a word) no longer blocks
exploration.

The table has its own version row (``bso_schema_version``) so it can live beside the ledger's runs;
version 1 tables are migrated on open by adding the new columns.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from carbon.sqlite_file import connect_wal
from plans.batch_size import BatchSizeConfig, BatchSizeOptimizer, Proposal, Trial
from scheduler.errors import LedgerError
from scheduler.store.ledger import gridshift_home, private_dir, private_file
from scheduler.policy.types import BatchSizeSearch

__all__ = ["BatchSizeHistory", "BSO_SCHEMA_VERSION", "LEARNT_OUTCOMES", "OUTCOMES", "batch_size_config",
           "early_stop_cost"]

BSO_SCHEMA_VERSION = 2

#: outcomes the optimiser learns from, and the rest (kept in the table as evidence)
LEARNT_OUTCOMES = ("reached", "missed", "stopped")
OUTCOMES = LEARNT_OUTCOMES + ("no_result", "failed", "mixed")

_SCHEMA_V1 = """
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
# version 2: the workload fingerprint in the key, the outcome and the evidence of each trial
_V2_COLUMNS = {
    "fingerprint": "TEXT NOT NULL DEFAULT ''",
    "outcome": "TEXT",
    "run_id": "TEXT",
    "started_at": "TEXT",
    "ended_at": "TEXT",
    "phase": "TEXT",
    "energy_j": "REAL",
    "time_s": "REAL",
    "epochs": "REAL",
    "metric": "REAL",
    "note": "TEXT",
}
_COLUMNS = ("trial_id", "job", "fingerprint", "batch_size", "status", "outcome", "cost", "reached", "steady_cost",
            "run_id", "started_at", "ended_at", "phase", "energy_j", "time_s", "epochs", "metric", "note")


def batch_size_config(search: BatchSizeSearch) -> BatchSizeConfig:
    """The optimiser's configuration for a policy's ``job.batch_size_search``: the same optimiser,
    priors and horizon as ``gridshift bench zeus-trace`` measures; ``beta`` is the policy's (None:
    runs are never stopped)."""
    return BatchSizeConfig(batch_sizes=search.sizes, default_batch_size=search.default,
                           beta=math.inf if search.beta is None else search.beta)


def early_stop_cost(history: Sequence[Trial], beta: float | None) -> float:
    """Zeus's early-stop bound: ``beta`` x the cheapest cost of a finished trial that reached the
    target (inf without one, or when ``beta`` is None). Pure."""
    costs = [t.cost for t in history if t.reached and not t.pending]
    return beta * min(costs) if costs and beta is not None else math.inf


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class BatchSizeHistory:
    """Trials per (job, fingerprint) in ``path`` (default: the ledger file). Use as a context manager or ``close()``."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else gridshift_home() / "ledger.sqlite3"
        try:
            private_dir(self.path.parent)
            self._db = connect_wal(private_file(self.path), isolation_level=None)  # the ledger's file: 0600
            self._migrate()
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot open the batch-size history: {exc}") from None
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot create the batch-size history: {exc}") from None

    def _migrate(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")  # two processes opening a v1 file must not both migrate it
        try:
            for statement in filter(str.strip, _SCHEMA_V1.split(";")):  # executescript would commit early
                self._db.execute(statement)
            row = self._db.execute("SELECT version FROM bso_schema_version").fetchone()
            if row is not None and row[0] > BSO_SCHEMA_VERSION:
                raise LedgerError(f"{self.path}: batch-size table version {row[0]} is newer than this gridshift "
                                  f"understands ({BSO_SCHEMA_VERSION}); upgrade gridshift")
            have = {r[1] for r in self._db.execute("PRAGMA table_info(bso_trials)")}
            for name, decl in _V2_COLUMNS.items():
                if name not in have:
                    self._db.execute(f"ALTER TABLE bso_trials ADD COLUMN {name} {decl}")
            self._db.execute("CREATE INDEX IF NOT EXISTS bso_trials_key ON bso_trials(job, fingerprint, trial_id)")
            if row is None:
                self._db.execute("INSERT INTO bso_schema_version VALUES (?)", (BSO_SCHEMA_VERSION,))
            else:
                self._db.execute("UPDATE bso_schema_version SET version = ?", (BSO_SCHEMA_VERSION,))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _trials(self, job: str, fingerprint: str, now: datetime, stale_after_s: float | None) -> list[Trial]:
        rows = self._db.execute(
            "SELECT batch_size, status, outcome, cost, reached, steady_cost, started_at FROM bso_trials "
            "WHERE job = ? AND fingerprint = ? ORDER BY trial_id", (job, fingerprint),
        ).fetchall()
        out: list[Trial] = []
        for b, status, outcome, cost, reached, steady, started_at in rows:
            if status == "pending":
                if stale_after_s is None or (
                    started_at is not None
                    and (now - datetime.fromisoformat(started_at)).total_seconds() <= stale_after_s
                ):
                    out.append(Trial(b, pending=True))
            elif outcome is None or outcome in LEARNT_OUTCOMES:  # outcome None: a version-1 row
                out.append(Trial(b, cost=float(cost), reached=bool(reached), steady_cost=steady))
        return out

    def history(self, job: str, fingerprint: str = "", *, now: datetime | None = None,
                stale_after_s: float | None = None) -> list[Trial]:
        """The trials the optimiser learns from, oldest first, with the pending ones marked pending
        (those started more than ``stale_after_s`` before ``now`` left out)."""
        try:
            return self._trials(job, fingerprint, now or _utcnow(), stale_after_s)
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot read the batch-size history: {exc}") from None

    def rows(self, job: str, fingerprint: str = "") -> list[dict[str, Any]]:
        """Every stored trial of the job (evidence included), oldest first, as plain dicts."""
        try:
            cur = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM bso_trials WHERE job = ? AND fingerprint = ? "
                                   "ORDER BY trial_id", (job, fingerprint))
            return [dict(zip(_COLUMNS, r)) for r in cur.fetchall()]
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot read the batch-size history: {exc}") from None

    def begin(self, job: str, config: BatchSizeConfig, rng: np.random.Generator, *, fingerprint: str = "",
              run_id: str = "", now: datetime | None = None,
              stale_after_s: float | None = None) -> tuple[int, Proposal]:
        """Choose the batch size for a new run of ``job`` and record it as pending, atomically."""
        now = now or _utcnow()
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                trials = self._trials(job, fingerprint, now, stale_after_s)
                proposal = BatchSizeOptimizer.from_history(config, trials).propose(rng)
                cur = self._db.execute(
                    "INSERT INTO bso_trials (job, fingerprint, batch_size, status, run_id, started_at, phase) "
                    "VALUES (?, ?, ?, 'pending', ?, ?, ?)",
                    (job, fingerprint, proposal.batch_size, run_id, now.isoformat(), proposal.phase),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot begin a batch-size trial: {exc}") from None
        return int(cur.lastrowid or 0), proposal

    def finish(self, trial_id: int, *, cost: float, reached: bool, steady_cost: float | None = None,
               outcome: str | None = None, energy_j: float | None = None, time_s: float | None = None,
               epochs: float | None = None, metric: float | None = None, note: str = "",
               now: datetime | None = None) -> None:
        """Record the outcome of a pending trial (default outcome: ``reached`` or ``missed``)."""
        outcome = outcome or ("reached" if reached else "missed")
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown trial outcome {outcome!r} (one of {', '.join(OUTCOMES)})")
        try:
            cur = self._db.execute(
                "UPDATE bso_trials SET status = 'done', outcome = ?, cost = ?, reached = ?, steady_cost = ?, "
                "energy_j = ?, time_s = ?, epochs = ?, metric = ?, note = ?, ended_at = ? "
                "WHERE trial_id = ? AND status = 'pending'",
                (outcome, cost, int(reached), steady_cost, energy_j, time_s, epochs, metric, note,
                 (now or _utcnow()).isoformat(), trial_id),
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
