"""Batch-size trials: concurrent processes on one history, v1 migration, stale pending trials,
outcomes, the early-stop bound and the cost watch (injected clock, fake job handle)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.job.trials import CostWatchedJob, trial_outcome
from plans.batch_size import BatchSizeConfig, Trial
from plans.integrations.protocol import JobResult
from scheduler.store.batch_size_history import BatchSizeHistory, early_stop_cost

CFG = BatchSizeConfig((16, 32, 64, 128), 64)
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _recurrences(db: str, worker: int, runs: int, start: multiprocessing.synchronize.Barrier, out) -> None:
    start.wait()  # all processes hit the table at once
    done = []
    with BatchSizeHistory(db) as h:
        for i in range(runs):
            tid, p = h.begin("job", CFG, np.random.default_rng([worker, i]), fingerprint="fp", run_id=f"w{worker}-{i}")
            h.finish(tid, cost=100.0 * p.batch_size / 64, reached=True)
            done.append((tid, p.batch_size, p.phase))
    out.put(done)


def test_concurrent_processes_keep_the_history_whole(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite3")
    ctx = multiprocessing.get_context("spawn")  # real, separate interpreters with their own connections
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_recurrences, args=(db, w, 6, start, out)) for w in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    ids = [tid for r in results for tid, _, _ in r]
    assert len(ids) == len(set(ids)) == 24
    with BatchSizeHistory(db) as h:
        rows = h.rows("job", "fp")
        assert len(rows) == 24 and all(r["status"] == "done" and r["outcome"] == "reached" for r in rows)
        assert sorted(r["run_id"] for r in rows) == sorted(f"w{w}-{i}" for w in range(4) for i in range(6))
        assert len(h.history("job", "fp")) == 24
    # every explore of a size happened once: begin is serialised, so no two runs explored the same size together
    explores = [b for r in results for _, b, phase in r if phase == "explore"]
    assert len(explores) == len(set(explores))
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_version_1_table_is_migrated_and_keeps_its_trials(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite3"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE bso_schema_version (version INTEGER NOT NULL);
        INSERT INTO bso_schema_version VALUES (1);
        CREATE TABLE bso_trials (trial_id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL,
            batch_size INTEGER NOT NULL, status TEXT NOT NULL CHECK (status IN ('pending', 'done')),
            cost REAL, reached INTEGER, steady_cost REAL);
        INSERT INTO bso_trials (job, batch_size, status, cost, reached) VALUES ('old', 64, 'done', 90.0, 1);
    """)
    con.close()
    with BatchSizeHistory(db) as h:
        assert h.history("old") == [Trial(64, cost=90.0, reached=True)]
        tid, p = h.begin("old", CFG, np.random.default_rng(0))
        assert p.batch_size == 32  # learnt from the version-1 trial
    assert sqlite3.connect(db).execute("SELECT version FROM bso_schema_version").fetchall() == [(2,)]


def test_a_stale_pending_trial_stops_blocking_exploration(tmp_path: Path) -> None:
    with BatchSizeHistory(tmp_path / "l.sqlite3") as h:
        tid, _ = h.begin("j", CFG, np.random.default_rng(0), now=T0)
        h.finish(tid, cost=100.0, reached=True)
        _, p = h.begin("j", CFG, np.random.default_rng(0), now=T0)  # its run is killed without a word
        assert p.batch_size == 32
        _, fresh = h.begin("j", CFG, np.random.default_rng(0), now=T0 + timedelta(hours=1), stale_after_s=86400)
        assert fresh.phase == "concurrent"
        _, later = h.begin("j", CFG, np.random.default_rng(0), now=T0 + timedelta(days=2), stale_after_s=86400)
        assert (later.batch_size, later.phase) == (32, "explore")


def test_outcomes_that_are_not_trials_are_kept_but_not_learnt(tmp_path: Path) -> None:
    with BatchSizeHistory(tmp_path / "l.sqlite3") as h:
        tid, _ = h.begin("j", CFG, np.random.default_rng(0))
        h.finish(tid, cost=5.0, reached=False, outcome="no_result", note="no result file")
        assert h.history("j") == [] and h.rows("j")[0]["outcome"] == "no_result"
        tid, _ = h.begin("j", CFG, np.random.default_rng(0))
        with pytest.raises(ValueError, match="unknown trial outcome"):
            h.finish(tid, cost=1.0, reached=True, outcome="great")


@pytest.mark.parametrize(("result", "rc", "stopped", "mixed", "outcome"), [
    (JobResult(reached=True), 0, "", False, "reached"),
    (JobResult(reached=False), 1, "", False, "missed"),
    (JobResult(reached=True), 0, "stopped: cost", False, "stopped"),
    (None, -15, "stopped: cost", False, "stopped"),
    (JobResult(reached=True), 0, "", True, "mixed"),
    (None, 0, "", False, "no_result"),
    (JobResult(), 0, "", False, "no_result"),
    (None, 2, "", False, "failed"),
    (JobResult(reached=True), 3, "", False, "failed"),
])
def test_trial_outcome(result, rc, stopped, mixed, outcome) -> None:
    got, reached, note = trial_outcome(result, rc, stopped=stopped, mixed=mixed)
    assert got == outcome and reached == (outcome == "reached") and (note == "") == (outcome == "reached")


@given(st.lists(st.tuples(st.floats(1, 1e6), st.booleans(), st.booleans()), max_size=8), st.floats(1.01, 10))
def test_the_bound_is_beta_times_the_cheapest_reached_trial(specs, beta) -> None:
    trials = [Trial(64, pending=True) if pending else Trial(64, cost=c, reached=r) for c, r, pending in specs]
    reached = [t.cost for t in trials if t.reached and not t.pending]
    bound = early_stop_cost(trials, beta)
    assert bound == (beta * min(reached) if reached else float("inf"))
    assert early_stop_cost(trials, None) == float("inf")


class _Job:
    """Runs for ``run_s`` of the injected clock; ``wait`` advances the clock by its timeout."""

    def __init__(self, clock: list[float], run_s: float) -> None:
        self.clock, self.run_s, self.killed_at = clock, run_s, None

    def wait(self, timeout_s: float | None = None) -> int | None:
        if self.killed_at is not None:
            return -15
        step = min(float(timeout_s or 0), self.run_s - self.clock[0])
        self.clock[0] += max(step, 0.0)
        return 0 if self.clock[0] >= self.run_s else None

    def kill(self) -> None:
        self.killed_at = self.clock[0]

    tail: list[str] = []


def _watched(run_s: float, bound: float) -> tuple[CostWatchedJob, _Job]:
    clock = [0.0]
    job = _Job(clock, run_s)
    watt = 300.0  # a constant draw: the energy counter grows 300 J per clock second
    watched = CostWatchedJob(job, energy_mj=lambda: {0: watt * clock[0] * 1000}, cost=lambda e, t: e + 100 * t,
                             bound=bound, clock=lambda: clock[0], poll_s=1.0)
    return watched, job


def test_the_watch_stops_the_job_where_its_cost_passes_the_bound() -> None:
    watched, job = _watched(run_s=100.0, bound=4000.0)  # 400 J/s: the bound falls at 10 s
    assert watched.wait(600) == -15
    assert job.killed_at == pytest.approx(10.0, abs=0.05)
    energy_j, time_s = watched.totals()
    assert energy_j + 100 * time_s >= 4000.0 and time_s == pytest.approx(10.0, abs=0.05)
    assert watched.stopped.startswith("batch-size trial stopped: its cost 400")


def test_the_watch_lets_a_cheap_job_finish_and_returns_on_the_callers_interval() -> None:
    watched, job = _watched(run_s=5.0, bound=4000.0)
    assert watched.wait(2.0) is None  # the supervisor's interval, as before
    assert watched.wait(600) == 0 and job.killed_at is None and not watched.stopped
    assert watched.totals() == (pytest.approx(1500.0), pytest.approx(5.0))


def _policy_yaml(tmp_path: Path, mode: str, job_extra: str = "") -> Path:
    p = tmp_path / "p.yaml"
    p.write_text("carbon: {provider: trace}\nmodes:\n  speed: {batch_size: auto}\n"
                 f"  efficiency: {{batch_size: {mode}}}\n"
                 "rules: {kind: absolute, clean_below_g_per_kwh: 1, dirty_above_g_per_kwh: 2}\n"
                 f"job: {{expected_duration_s: 5{job_extra}}}\n")
    return p


@pytest.mark.parametrize(("mode", "job_extra", "message"), [
    ("64", "", "p.yaml:1:1: (top level): mode 'speed' says batch_size: auto: give job.batch_size_search"),
    ("0", ", batch_size_search: {sizes: [32, 64], default: 64}",
     "p.yaml:4:28: modes.efficiency.batch_size: batch_size must be a positive integer or 'auto'"),
    ("64", ", batch_size_search: {sizes: [32, 64], default: 128}", "default 128 is not one of sizes [32, 64]"),
])
def test_bad_batch_size_policies_are_one_clear_line(tmp_path: Path, mode: str, job_extra: str, message: str) -> None:
    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy

    with pytest.raises(PolicyError) as err:
        load_policy(_policy_yaml(tmp_path, mode, job_extra))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_malformed_result_file_is_one_line_and_ignored(tmp_path: Path) -> None:
    from flows.job.mode_file import ModeFileChannel

    channel = ModeFileChannel(tmp_path, {"speed": 64})
    (tmp_path / "result.json").write_text('{"version": 1, "reachd": true}')
    result, warning = channel.result()
    assert result is None and warning == f"job result ignored: {tmp_path / 'result.json'}: reachd: Extra inputs are not permitted"
    (tmp_path / "result.json").write_text('{"version": 1,')
    assert channel.result()[1].startswith(f"job result ignored: {tmp_path / 'result.json'}:1: not JSON")
