"""``gridshift serve``'s machinery: a durable table of planned runs, fired at least once, exactly once.

Wiring only; the decisions come from the ``plan`` callable the caller passes in (``plan(now)`` ->
the coming :class:`PlannedRun` s, built from the policy, the carbon monitor and the planner), and the
run itself is started by a ``trigger`` callable (``flows`` passes one that creates a Prefect flow
run of a deployment, through Prefect's API, with the run key as its idempotency key). This module
never imports ``flows``. Time is passed in (``now``/``sleep``), so an outage of a week is a test.

Guarantees (one row per run key in the SQLite table ``gridshift_serve_runs``):

- **a restart loses no planned run**: the row is on disk before the run is due; a service that
  comes back after the due time fires it then, if the run can still start by its ``latest_start``;
- **at least once**: a run is *claimed* (``planned -> firing``, one atomic UPDATE) before the
  trigger is called; a trigger that raises *releases* the claim (``-> planned``), and the run is tried
  again after a backoff (``Backoff``: doubling, capped) until it fires or its ``latest_start`` passes;
  a claim left by a service that died mid-trigger is released when the next one starts;
- **exactly once**: the run key travels to the trigger as an idempotency key, so a repeated trigger
  (a retry after a lost answer, a restart mid-trigger) finds the flow run Prefect already has;
- **nothing is lost silently**: a run that could not be triggered by its ``latest_start`` is
  recorded ``missed`` with the reason (every failed attempt's error and count), and logged;
- **re-plans when forecasts change**: every ``poll_interval_s`` ``plan(now)`` runs again, and a run
  not yet due whose chosen time moved by more than ``move_tolerance_s`` is moved (a due run that is
  waiting for Prefect keeps its time: it fires as soon as the trigger gets through).

Why not APScheduler's job store (what this used to be): its scheduler reads the wall clock itself,
drops a date job from the store when it *submits* it (a crash before the trigger lost the night),
and its misfire grace is one fixed span rather than each run's own deadline. Its ``CronTrigger`` also
reads day-of-week numbers from Monday = 0, where Prefect's deployment reads Sunday = 0; the nominal
times come from :mod:`scheduler.policy.cron`, which reads ``job.cron`` (in ``job.timezone``) as Prefect does.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Literal

__all__ = ["Backoff", "PlannedRun", "default_store_path", "PlanningService", "RunState", "ServeRun", "ServeStore", "TickResult",
           "latest_start", "nominal_runs"]

RunState = Literal["planned", "firing", "fired", "missed"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS gridshift_serve_runs (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    run_at TEXT NOT NULL,
    latest_start TEXT,
    kwargs TEXT NOT NULL,
    reason TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_try TEXT,
    last_error TEXT NOT NULL DEFAULT '',
    outcome TEXT NOT NULL DEFAULT '',
    updated_at TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class PlannedRun:
    """One run to start at ``run_at`` (UTC); ``key`` identifies it across re-plans and restarts.

    ``latest_start``: the last moment a start still makes sense (e.g. the deadline minus the work);
    a run not triggered by then is recorded as missed. None: the service's ``missed_after_s``.
    """

    key: str
    run_at: datetime
    kwargs: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    latest_start: datetime | None = None


@dataclass(frozen=True)
class ServeRun:
    """A row of the store: a planned run and where it stands."""

    key: str
    state: RunState
    run_at: datetime
    latest_start: datetime | None
    kwargs: dict[str, Any]
    reason: str
    attempts: int
    next_try: datetime | None
    last_error: str
    outcome: str  # fired: what the trigger returned (the flow run id); missed: why


@dataclass(frozen=True)
class Backoff:
    """Wait ``base_s * 2**(attempt - 1)`` seconds, at most ``max_s``, before trying a failed trigger again."""

    base_s: float = 15.0
    max_s: float = 300.0

    def delay(self, attempts: int) -> timedelta:
        return timedelta(seconds=min(self.base_s * 2 ** max(attempts - 1, 0), self.max_s))


def _iso(t: datetime | None) -> str | None:
    return t.astimezone(timezone.utc).isoformat() if t is not None else None


def _time(s: str | None) -> datetime | None:
    return datetime.fromisoformat(s) if s else None


def default_store_path() -> Path:
    """Where ``gridshift serve`` keeps its planned runs unless told otherwise: ``$GRIDSHIFT_HOME/serve.sqlite``."""
    from scheduler.store.ledger import gridshift_home

    return gridshift_home() / "serve.sqlite"


class ServeStore:
    """The SQLite table of planned runs; every state change is one transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(str(self.path), timeout=30)

    def _write(self, sql: str, args: tuple[Any, ...]) -> int:
        con = self._connect()
        try:
            with con:
                return con.execute(sql, args).rowcount
        finally:
            con.close()

    def runs(self, *, state: RunState | None = None) -> list[ServeRun]:
        """Rows, earliest run first (optionally only those in ``state``)."""
        sql = "SELECT key, state, run_at, latest_start, kwargs, reason, attempts, next_try, last_error, outcome " \
              "FROM gridshift_serve_runs" + (" WHERE state = ?" if state else "") + " ORDER BY run_at, key"
        con = self._connect()
        try:
            rows = con.execute(sql, (state,) if state else ()).fetchall()
        finally:
            con.close()
        return [ServeRun(key=r[0], state=r[1], run_at=_time(r[2]), latest_start=_time(r[3]),  # type: ignore[arg-type]
                         kwargs=json.loads(r[4]), reason=r[5], attempts=r[6], next_try=_time(r[7]), last_error=r[8],
                         outcome=r[9]) for r in rows]

    def get(self, key: str) -> ServeRun | None:
        return next((r for r in self.runs() if r.key == key), None)

    def add(self, run: PlannedRun, now: datetime) -> bool:
        """Store a new run as planned; False when the key is already there (in any state)."""
        return self._write("INSERT OR IGNORE INTO gridshift_serve_runs (key, state, run_at, latest_start, kwargs, reason, "
                           "updated_at) VALUES (?, 'planned', ?, ?, ?, ?, ?)",
                           (run.key, _iso(run.run_at), _iso(run.latest_start), json.dumps(run.kwargs), run.reason,
                            _iso(now))) == 1

    def move(self, run: PlannedRun, now: datetime) -> bool:
        """Re-plan a run that is still waiting; False when it has been claimed, fired or missed meanwhile."""
        return self._write("UPDATE gridshift_serve_runs SET run_at = ?, latest_start = ?, kwargs = ?, reason = ?, "
                           "updated_at = ? WHERE key = ? AND state = 'planned'",
                           (_iso(run.run_at), _iso(run.latest_start), json.dumps(run.kwargs), run.reason, _iso(now),
                            run.key)) == 1

    def claim(self, key: str, now: datetime) -> bool:
        """``planned -> firing``; True for exactly one caller, however many services share the store."""
        return self._write("UPDATE gridshift_serve_runs SET state = 'firing', updated_at = ? "
                           "WHERE key = ? AND state = 'planned'", (_iso(now), key)) == 1

    def release(self, key: str, now: datetime, error: str, next_try: datetime) -> None:
        """``firing -> planned`` after a failed trigger, counting the attempt."""
        self._write("UPDATE gridshift_serve_runs SET state = 'planned', attempts = attempts + 1, next_try = ?, "
                    "last_error = ?, updated_at = ? WHERE key = ? AND state = 'firing'",
                    (_iso(next_try), error, _iso(now), key))

    def fired(self, key: str, now: datetime, outcome: str) -> None:
        self._write("UPDATE gridshift_serve_runs SET state = 'fired', attempts = attempts + 1, outcome = ?, "
                    "updated_at = ? WHERE key = ? AND state = 'firing'", (outcome, _iso(now), key))

    def missed(self, key: str, now: datetime, reason: str) -> bool:
        return self._write("UPDATE gridshift_serve_runs SET state = 'missed', outcome = ?, updated_at = ? "
                           "WHERE key = ? AND state = 'planned'", (reason, _iso(now), key)) == 1

    def release_stale_claims(self, now: datetime) -> list[str]:
        """Claims left by a service that stopped mid-trigger go back to planned (the idempotency key
        makes the repeated trigger harmless); returns their keys."""
        keys = [r.key for r in self.runs(state="firing")]
        for key in keys:
            self._write("UPDATE gridshift_serve_runs SET state = 'planned', last_error = ?, updated_at = ? "
                        "WHERE key = ? AND state = 'firing'",
                        ("the previous service stopped while triggering it", _iso(now), key))
        return keys


@dataclass
class TickResult:
    """What one :meth:`PlanningService.tick` did, by run key."""

    planned: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


def plan_summary(verb: str, runs: list[PlannedRun]) -> list[str]:
    """One line per job and UTC day: how many runs were ``verb`` (planned, moved), from when to when, and why
    (the two commonest reasons, counted). A short cron planned hundreds of runs at start, one line each."""
    groups: dict[tuple[str, str], list[PlannedRun]] = {}
    for run in runs:
        groups.setdefault((run.key.split("@", 1)[0], f"{run.run_at:%Y-%m-%d}"), []).append(run)
    lines = []
    for (job, day), mine in sorted(groups.items()):
        times = sorted(r.run_at for r in mine)
        reasons: dict[str, int] = {}
        for r in mine:
            if r.reason:
                reasons[r.reason] = reasons.get(r.reason, 0) + 1
        why = "; ".join(f"{n} x {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:2])
        more = len(reasons) - 2
        lines.append(f"{verb} {len(mine)} run(s) of {job} on {day}, {times[0]:%H:%M}-{times[-1]:%H:%M} UTC"
                     + (f": {why}" if why else "") + (f" (and {more} other reason(s); -v lists every run)" if more > 0 else ""))
    return lines


def _hhmm(t: datetime) -> str:
    return f"{t:%Y-%m-%d %H:%M} UTC"


class PlanningService:
    """Keeps the store in line with ``plan(now)`` and triggers each due run (see the module docstring)."""

    def __init__(
        self,
        *,
        db_path: str | Path,
        plan: Callable[[datetime], list[PlannedRun]],
        trigger: Callable[..., Any],
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        sleep: Callable[[float], Any] | None = None,
        poll_interval_s: float = 900.0,
        move_tolerance_s: float = 300.0,
        missed_after_s: float = 6 * 3600.0,
        backoff: Backoff = Backoff(),
        log: Callable[[str], None] = lambda _msg: None,
        verbose: bool = False,
    ) -> None:
        self.store = ServeStore(db_path)
        self.plan = plan
        self.trigger = trigger
        self.now = now
        self._stopping = False
        self.sleep = sleep if sleep is not None else self._sleep_unless_stopped
        self.poll_interval_s = poll_interval_s
        self.move_tolerance_s = move_tolerance_s
        self.missed_after_s = missed_after_s
        self.backoff = backoff
        self.log = log
        #: one line per planned or moved run; else one line per job and day (:func:`plan_summary`)
        self.verbose = verbose
        self._next_plan: datetime | None = None
        for key in self.store.release_stale_claims(self.now()):
            self.log(f"released {key}: the previous service stopped while triggering it; it is tried again")

    # -- one step ------------------------------------------------------------------------------
    def tick(self) -> TickResult:
        """Re-plan when the poll interval has passed, then trigger (or record as missed) every due run."""
        now = self.now()
        result = TickResult()
        if self._next_plan is None or now >= self._next_plan:
            self._replan(now, result)
            self._next_plan = now + timedelta(seconds=self.poll_interval_s)
        for run in self.store.runs(state="planned"):
            if run.run_at <= now and (run.next_try is None or run.next_try <= now):
                self._fire_or_miss(run, now, result)
        return result

    def replan(self) -> TickResult:
        """Ask ``plan`` for the runs now and make the store match (new runs added, moved runs moved)."""
        result = TickResult()
        self._replan(self.now(), result)
        return result

    def _replan(self, now: datetime, result: TickResult) -> None:
        try:
            runs = self.plan(now)
        except Exception as exc:  # the signal or the planner is down: keep what is stored
            self.log(f"planning failed, keeping the stored plan: {type(exc).__name__}: {exc}")
            return
        planned: list[PlannedRun] = []
        moved: list[PlannedRun] = []
        for run in runs:
            stored = self.store.get(run.key)
            if stored is None:
                if self.store.add(run, now):
                    result.planned.append(run.key)
                    planned.append(run)
                    if self.verbose:
                        self.log(f"planned {run.key} for {_hhmm(run.run_at)}" + (f": {run.reason}" if run.reason else ""))
            elif stored.state == "planned" and stored.run_at > now and \
                    abs((stored.run_at - run.run_at).total_seconds()) > self.move_tolerance_s and self.store.move(run, now):
                # a run already due is not moved: it fires as soon as the trigger gets through
                result.moved.append(run.key)
                moved.append(run)
                if self.verbose:
                    self.log(f"moved {run.key} from {_hhmm(stored.run_at)} to {_hhmm(run.run_at)}"
                             + (f": {run.reason}" if run.reason else ""))
        if not self.verbose:
            for line in plan_summary("planned", planned) + plan_summary("moved", moved):
                self.log(line)

    def _latest(self, run: ServeRun) -> datetime:
        return run.latest_start or run.run_at + timedelta(seconds=self.missed_after_s)

    def _fire_or_miss(self, run: ServeRun, now: datetime, result: TickResult) -> None:
        latest = self._latest(run)
        if now > latest:
            why = (f"not triggered by its latest start {_hhmm(latest)} (planned for {_hhmm(run.run_at)}): "
                   + (f"{run.attempts} attempt(s) failed, the last with: {run.last_error}" if run.attempts
                      else "the service was not running between the planned time and the latest start"))
            if self.store.missed(run.key, now, why):
                result.missed.append(run.key)
                self.log(f"missed {run.key}: {why}")
            return
        if not self.store.claim(run.key, now):
            return  # another service sharing the store has it
        try:
            outcome = self.trigger(key=run.key, **run.kwargs)
        except Exception as exc:  # Prefect down, refused, timed out: release the claim, try again later
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            retry_at = now + self.backoff.delay(run.attempts + 1)
            if now < latest < retry_at:  # one last try at the latest start, then it is missed
                retry_at = latest
            self.store.release(run.key, now, error, retry_at)
            result.failed.append(run.key)
            self.log(f"trigger of {run.key} failed (attempt {run.attempts + 1}): {error}; next try {retry_at:%H:%M:%S} UTC")
            return
        self.store.fired(run.key, now, "" if outcome is None else str(outcome))
        result.fired.append(run.key)
        late = (now - run.run_at).total_seconds()
        self.log(f"fired {run.key} (planned for {_hhmm(run.run_at)}" + (f", {late:.0f} s late" if late >= 60 else "")
                 + f")" + (f": flow run {outcome}" if outcome else ""))

    # -- the loop ------------------------------------------------------------------------------
    def next_wakeup(self) -> datetime:
        """When :meth:`tick` next has something to do: a poll, a due run, a retry or a latest start."""
        now = self.now()
        times = [self._next_plan or now]
        for run in self.store.runs(state="planned"):
            times.append(max(run.run_at, run.next_try or run.run_at))
        return max(min(times), now)

    def run_forever(self) -> None:
        """Tick, sleep until the next thing to do, repeat until :meth:`stop`."""
        while not self._stopping:
            self.tick()
            if self._stopping:
                break
            wait_s = (self.next_wakeup() - self.now()).total_seconds()
            self.sleep(min(max(wait_s, 0.0), self.poll_interval_s))

    def stop(self) -> None:
        """End :meth:`run_forever` after the current tick. Only sets a flag: safe from a signal handler
        (a trigger in flight completes, so its claim is settled)."""
        self._stopping = True

    def _sleep_unless_stopped(self, seconds: float) -> None:
        # short naps: a signal handler's stop() is seen within half a second
        end = time.monotonic() + seconds
        while not self._stopping and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))

    def planned(self) -> dict[str, datetime]:
        """Key -> planned time of the runs still waiting to fire."""
        return {r.key: r.run_at for r in self.store.runs(state="planned")}


def latest_start(nominal: datetime, *, deadline_s: float | None, work_s: float) -> datetime | None:
    """The last start that still finishes ``work_s`` by ``nominal + deadline_s`` (None without a deadline)."""
    if deadline_s is None:
        return None
    return nominal + timedelta(seconds=deadline_s - work_s)


def nominal_runs(cron: str, now: datetime, *, earliest_start_s: float, deadline_s: float, horizon: timedelta,
                 tz: str = "UTC") -> list[datetime]:
    """Nominal times (``cron`` read in time zone ``tz``, as Prefect reads it) whose window
    ``[nominal + earliest, nominal + deadline]`` is still open and starts within ``horizon``."""
    from scheduler.policy.cron import cron_occurrences

    lo = now - timedelta(seconds=deadline_s)
    hi = now + horizon - timedelta(seconds=min(earliest_start_s, 0.0))
    return [n for n in cron_occurrences(cron, lo, hi, tz=tz) if n + timedelta(seconds=deadline_s) > now]
