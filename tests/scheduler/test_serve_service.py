"""`gridshift serve` wiring: a restart between planning and start time still runs the job once."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scheduler.service import PlannedRun, PlanningService, fire, fired_keys

time_machine = pytest.importorskip("time_machine")

TRIGGER = "serve_trigger_probe:record"


@pytest.fixture(autouse=True)
def _probe_importable(monkeypatch):
    """The trigger is found by its text reference, as `gridshift serve` finds flows.deploy's."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))


@pytest.fixture
def nightly_policy():
    from scheduler.policy_io import load_policy

    return load_policy(Path(__file__).resolve().parents[2] / "examples" / "nightly.yaml")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _service(db: Path, plan) -> PlanningService:
    return PlanningService(scheduler=PlanningService.build_scheduler(db), db_path=db, plan=plan, trigger_ref=TRIGGER,
                           poll_interval_s=3600)


def test_restart_between_planning_and_start_runs_once(tmp_path, monkeypatch):
    probe = tmp_path / "fired.jsonl"
    monkeypatch.setenv("GRIDSHIFT_PROBE_FILE", str(probe))
    import serve_trigger_probe as trigger_probe

    trigger_probe.FIRED.clear()
    db = tmp_path / "jobs.sqlite"
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=2)
    plan = lambda now: [PlannedRun(key="nightly@20240301T0100Z", run_at=start, kwargs={"deployment": "d/n"})]  # noqa: E731

    first = _service(db, plan)
    first.start()  # plans at once (the poll job's first run is now)
    first.replan()
    assert set(first.planned()) == {"nightly@20240301T0100Z"}
    first.shutdown()  # the process goes away before the start time
    assert _lines(probe) == []

    with time_machine.travel(start + timedelta(minutes=5), tick=True):
        second = _service(db, plan)
        second.start()  # the stored job is overdue but inside the misfire grace: it fires once
        assert trigger_probe.FIRED.wait(timeout=30)
        second.replan()  # the same plan again must not schedule it a second time
        second.replan()
        assert second.planned() == {}
        second.shutdown()

    third = _service(db, plan)
    third.start()
    third.replan()
    assert third.planned() == {}
    third.shutdown()
    fired = _lines(probe)
    assert [f["key"] for f in fired] == ["nightly@20240301T0100Z"]
    assert fired[0]["deployment"] == "d/n"
    assert fired_keys(db) == {"nightly@20240301T0100Z"}


def test_replan_moves_a_run_when_the_forecast_changes(tmp_path):
    db = tmp_path / "jobs.sqlite"
    base = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=3)
    when = {"at": base}
    svc = _service(db, lambda now: [PlannedRun(key="k", run_at=when["at"])])
    svc.scheduler.start(paused=True)
    svc.replan()
    assert svc.planned()["k"] == base
    when["at"] = base + timedelta(minutes=2)  # within tolerance: left alone
    assert svc.replan() == []
    when["at"] = base + timedelta(hours=1)
    assert [r.key for r in svc.replan()] == ["k"]
    assert svc.planned()["k"] == base + timedelta(hours=1)
    svc.shutdown()


def _clocked_service(db: Path, plan, clock: dict) -> PlanningService:
    return PlanningService(scheduler=PlanningService.build_scheduler(db), db_path=db, plan=plan, trigger_ref=TRIGGER,
                           poll_interval_s=3600, now=lambda: clock["now"])


def test_a_run_first_planned_for_now_is_scheduled(tmp_path):
    """Regression: a run whose best start is the planning instant (serve started inside a clean window)
    was taken for one already firing and skipped at every poll, so it never ran."""
    db = tmp_path / "jobs.sqlite"
    # the injected clock runs a day ahead of the real one, so the paused scheduler finds nothing due
    clock = {"now": datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)}
    svc = _clocked_service(db, lambda now: [PlannedRun(key="nightly@tomorrow", run_at=now)], clock)
    svc.scheduler.start(paused=True)
    assert [r.key for r in svc.replan()] == ["nightly@tomorrow"]
    assert svc.planned() == {"nightly@tomorrow": clock["now"]}
    svc.shutdown()


def test_a_stored_run_gone_from_the_store_while_due_is_not_added_again(tmp_path):
    """APScheduler drops a date job from the store when it submits it, before fire() claims the key."""
    db = tmp_path / "jobs.sqlite"
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    clock = {"now": start - timedelta(hours=2)}
    svc = _clocked_service(db, lambda now: [PlannedRun(key="k", run_at=max(now, start))], clock)
    svc.scheduler.start(paused=True)
    svc.replan()
    assert set(svc.planned()) == {"k"}
    svc.scheduler.remove_job("k", jobstore="default")  # what APScheduler does when the run is submitted
    clock["now"] = start + timedelta(seconds=30)
    assert svc.replan() == []
    assert svc.planned() == {}
    svc.shutdown()


def test_fire_claims_a_key_once(tmp_path, monkeypatch):
    probe = tmp_path / "fired.jsonl"
    monkeypatch.setenv("GRIDSHIFT_PROBE_FILE", str(probe))
    db = str(tmp_path / "jobs.sqlite")
    assert fire(TRIGGER, "k1", db, {}) is True
    assert fire(TRIGGER, "k1", db, {}) is False
    assert len(_lines(probe)) == 1


def test_plan_runs_shifts_into_the_clean_hours(nightly_policy):
    from carbon.series import IntensityPoint, IntensitySeries
    from scheduler.planning import plan_runs

    now = datetime(2024, 3, 1, 20, 0, tzinfo=timezone.utc)
    step = timedelta(minutes=15)
    # dirty all evening, clean 03:00-07:00
    pts = [IntensityPoint(start=now + i * step, duration=step,
                          g_per_kwh=120.0 if 7 * 4 <= i < 11 * 4 else 600.0) for i in range(16 * 4)]
    runs = plan_runs(nightly_policy, IntensitySeries.of(pts), now=now)
    assert [r.key for r in runs] == ["nightly-retrain@20240302T0100Z"]
    assert runs[0].run_at == datetime(2024, 3, 2, 3, 0, tzinfo=timezone.utc)
    assert runs[0].kwargs["nominal_start"] == "2024-03-02T01:00:00+00:00"


def test_serve_cli_plans_into_its_job_store_and_stops_on_sigterm(tmp_path):
    """`gridshift serve` end to end (no Prefect needed until a run is due): it plans the next night."""
    import os
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    db = tmp_path / "serve.sqlite"
    env = {**os.environ, "GRIDSHIFT_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "gridshift"), "serve", str(repo / "examples" / "nightly.yaml"),
                             "--db", str(db), "--poll-s", "3600"], cwd=repo, env=env, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "planned nightly-retrain@" in line:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert any("planned nightly-retrain@" in line for line in lines), "".join(lines)
    svc = _service(db, lambda now: [])
    svc.scheduler.start(paused=True)
    planned = svc.planned()
    svc.shutdown()
    assert len(planned) >= 1 and all(k.startswith("nightly-retrain@") for k in planned)
