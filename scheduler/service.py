"""``gridshift serve``: APScheduler 3 wiring that keeps planned runs in a SQLite job store.

Wiring only; the decisions come from the ``plan`` callable the caller passes in (built from the
policy, the carbon monitor and :func:`scheduler.decide.decide`), and the run itself is started by a
trigger function named by a textual ``"module:function"`` reference (``flows`` passes one that
creates a Prefect flow run of a deployment, by name, through Prefect's API). This module never
imports ``flows``.

Guarantees:

- **a restart loses no planned run**: each planned run is a date job in a persistent
  ``SQLAlchemyJobStore`` (SQLite) with a generous ``misfire_grace_time``, so a run whose time passed
  while the service was down fires once when it comes back;
- **a run happens exactly once**: job ids are the run keys (``job@nominal``), so re-planning moves
  the existing job instead of adding another; :func:`fire` records the key in a ``fired`` table
  before calling the trigger and refuses a key it has seen; the key also travels to the trigger as
  an idempotency key (Prefect drops a second flow run with the same key);
- **re-plans when forecasts change**: a poll job (in memory, re-added on every start) calls
  ``plan(now)`` every ``poll_interval_s`` and moves a job whose chosen time changed by more than
  ``move_tolerance_s``.
"""

from __future__ import annotations

import importlib
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

__all__ = ["PlannedRun", "PlanningService", "fire", "fired_keys"]

_FIRED_SCHEMA = "CREATE TABLE IF NOT EXISTS gridshift_fired (key TEXT PRIMARY KEY, fired_at TEXT NOT NULL)"


@dataclass(frozen=True)
class PlannedRun:
    """One run to start at ``run_at`` (UTC); ``key`` identifies it across re-plans and restarts."""

    key: str
    run_at: datetime
    kwargs: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


def _connect(db_path: str | Path) -> sqlite3.Connection:
    con = sqlite3.connect(str(db_path), timeout=30)
    con.execute(_FIRED_SCHEMA)
    return con


def fired_keys(db_path: str | Path) -> set[str]:
    """Keys of runs already started from this job store."""
    with _connect(db_path) as con:
        return {row[0] for row in con.execute("SELECT key FROM gridshift_fired")}


def fire(trigger_ref: str, key: str, db_path: str, kwargs: dict[str, Any]) -> bool:
    """The job APScheduler runs: claim ``key`` once, then call the trigger. False if already claimed.

    Module-level so the persistent job store can pickle a reference to it.
    """
    con = _connect(db_path)
    try:
        with con:
            claimed = con.execute("INSERT OR IGNORE INTO gridshift_fired (key, fired_at) VALUES (?, ?)",
                                  (key, datetime.now(timezone.utc).isoformat())).rowcount == 1
    finally:
        con.close()
    if not claimed:
        return False
    module, _, name = trigger_ref.partition(":")
    trigger = getattr(importlib.import_module(module), name)
    trigger(key=key, **kwargs)
    return True


class PlanningService:
    """Keeps APScheduler's persistent jobs in line with ``plan(now)``."""

    def __init__(
        self,
        *,
        scheduler: Any,
        db_path: str | Path,
        plan: Callable[[datetime], list[PlannedRun]],
        trigger_ref: str,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        poll_interval_s: float = 300.0,
        move_tolerance_s: float = 300.0,
        misfire_grace_s: float = 6 * 3600.0,
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.scheduler = scheduler
        self.db_path = str(db_path)
        self.plan = plan
        self.trigger_ref = trigger_ref
        self.now = now
        self.poll_interval_s = poll_interval_s
        self.move_tolerance_s = move_tolerance_s
        self.misfire_grace_s = misfire_grace_s
        self.log = log
        self._lock = threading.Lock()  # the poll job and callers may re-plan at the same time
        # keys seen in the persistent store: one of these gone from it while overdue is firing right now
        self._stored: set[str] = set()

    @staticmethod
    def build_scheduler(db_path: str | Path, *, blocking: bool = False) -> Any:
        """An APScheduler 3 scheduler with a persistent SQLite store ("default") and a memory one ("poll")."""
        from apscheduler.jobstores.memory import MemoryJobStore
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.schedulers.blocking import BlockingScheduler

        cls = BlockingScheduler if blocking else BackgroundScheduler
        return cls(
            jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{Path(db_path).resolve()}"), "poll": MemoryJobStore()},
            job_defaults={"coalesce": True, "max_instances": 1},
            timezone=timezone.utc,
        )

    def start(self) -> None:
        """Start the scheduler (a BlockingScheduler blocks here), re-planning first and then every poll."""
        _connect(self.db_path).close()
        self.scheduler.add_job(self.replan, "interval", seconds=self.poll_interval_s, id="gridshift-replan",
                               jobstore="poll", replace_existing=True, next_run_time=self.now())
        self.scheduler.start()

    def shutdown(self) -> None:
        self.scheduler.shutdown(wait=False)

    def replan(self) -> list[PlannedRun]:
        """Ask ``plan`` for the runs and make the job store match; returns the runs it (re)scheduled."""
        with self._lock:
            return self._replan()

    def _replan(self) -> list[PlannedRun]:
        now = self.now()
        runs = self.plan(now)
        done = fired_keys(self.db_path)
        changed: list[PlannedRun] = []
        for run in runs:
            if run.key in done:
                continue
            job = self.scheduler.get_job(run.key, jobstore="default")
            if job is not None:
                self._stored.add(run.key)
            elif run.run_at <= now and run.key in self._stored:
                # overdue and no longer stored: it is firing right now (or fired); never add it twice.
                # A run never stored whose best start is now is added below and fires at once.
                continue
            if job is not None and job.next_run_time is not None and \
                    abs((job.next_run_time - run.run_at).total_seconds()) <= self.move_tolerance_s:
                continue
            self.scheduler.add_job(fire, "date", run_date=run.run_at, id=run.key, jobstore="default",
                                   replace_existing=True, misfire_grace_time=int(self.misfire_grace_s),
                                   kwargs={"trigger_ref": self.trigger_ref, "key": run.key, "db_path": self.db_path,
                                           "kwargs": run.kwargs})
            self._stored.add(run.key)
            self.log(f"{'moved' if job else 'planned'} {run.key} to {run.run_at:%Y-%m-%d %H:%M} UTC"
                     + (f": {run.reason}" if run.reason else ""))
            changed.append(run)
        return changed

    def planned(self) -> dict[str, datetime]:
        """Job id -> next run time of the runs waiting in the persistent store."""
        return {j.id: j.next_run_time for j in self.scheduler.get_jobs(jobstore="default")}


def nominal_runs(cron: str, now: datetime, *, earliest_start_s: float, deadline_s: float, horizon: timedelta) -> list[datetime]:
    """Nominal times whose window ``[nominal + earliest, nominal + deadline]`` is still open and starts within ``horizon``."""
    from scheduler.cron import cron_occurrences

    lo = now - timedelta(seconds=deadline_s)
    hi = now + horizon - timedelta(seconds=min(earliest_start_s, 0.0))
    return [n for n in cron_occurrences(cron, lo, hi) if n + timedelta(seconds=deadline_s) > now]
