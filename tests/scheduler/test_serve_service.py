"""`gridshift serve`'s machinery (scheduler.service.serve) on an injected clock: nothing lost, nothing doubled."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scheduler.service.serve import Backoff, PlannedRun, PlanningService, ServeStore, latest_start
from tests.fakes.fake_prefect import FakeDeployments

T0 = datetime(2026, 6, 1, 18, 0, tzinfo=timezone.utc)
START = T0 + timedelta(hours=8)  # 02:00 next night
KEY = "nightly@20260602T0100Z"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


def _service(db: Path, clock: Clock, prefect: FakeDeployments, plan=None, log=None, **kw) -> PlanningService:
    if plan is None:
        plan = lambda now: [PlannedRun(key=KEY, run_at=START, kwargs={"deployment": "d/n"},  # noqa: E731
                                       latest_start=START + timedelta(hours=4))]
    return PlanningService(db_path=db, plan=plan, trigger=prefect.trigger, now=clock, poll_interval_s=3600,
                           backoff=Backoff(base_s=60, max_s=600), log=(log.append if log is not None else print), **kw)


def test_restart_between_planning_and_start_runs_once(tmp_path):
    clock, prefect, db = Clock(T0), FakeDeployments(), tmp_path / "serve.sqlite"
    first = _service(db, clock, prefect)
    assert first.tick().planned == [KEY]
    assert first.planned() == {KEY: START}
    # the process goes away before the start time; another comes back after it
    clock.now = START + timedelta(minutes=5)
    second = _service(db, clock, prefect)
    assert second.tick().fired == [KEY]
    clock.advance(minutes=10)
    assert second.tick().fired == []
    third = _service(db, clock, prefect)
    assert third.tick().fired == [] and third.planned() == {}
    assert prefect.created == {KEY: 1} and prefect.calls == {KEY: 1}
    assert prefect.runs[KEY]["deployment"] == "d/n"
    (row,) = ServeStore(db).runs()
    assert (row.state, row.outcome, row.attempts) == ("fired", "run-1", 1)


def test_a_trigger_that_raises_once_is_released_and_retried_after_the_backoff(tmp_path):
    clock, prefect, log = Clock(T0), FakeDeployments(fail_next=1), []
    svc = _service(tmp_path / "s.sqlite", clock, prefect, log=log)
    svc.tick()
    clock.now = START
    assert svc.tick().failed == [KEY]
    row = svc.store.get(KEY)
    assert (row.state, row.attempts) == ("planned", 1)  # the claim is released, the attempt counted
    assert row.next_try == START + timedelta(seconds=60) and "Server disconnected" in row.last_error
    assert svc.next_wakeup() == START + timedelta(seconds=60)
    clock.advance(seconds=30)
    assert svc.tick().fired == []  # still backing off
    clock.advance(seconds=30)
    assert svc.tick().fired == [KEY]
    assert prefect.created == {KEY: 1} and prefect.calls == {KEY: 2}
    assert any(m.startswith(f"trigger of {KEY} failed (attempt 1): PrefectDown: Server disconnected") for m in log)
    assert any(m.startswith(f"fired {KEY} (planned for 2026-06-02 02:00 UTC, 60 s late): flow run run-1") for m in log)


def test_a_lost_answer_is_retried_and_the_idempotency_key_keeps_one_flow_run(tmp_path):
    clock, prefect = Clock(START), FakeDeployments(lose_answer_rate=1.0)
    svc = _service(tmp_path / "s.sqlite", clock, prefect)
    assert svc.tick().failed == [KEY]
    prefect.lose_answer_rate = 0.0
    clock.advance(minutes=1)
    assert svc.tick().fired == [KEY]
    assert prefect.created == {KEY: 1} and prefect.calls == {KEY: 2}


def test_prefect_down_past_the_latest_start_records_the_run_as_missed_with_the_reason(tmp_path):
    clock, prefect, log = Clock(START), FakeDeployments(down=True), []
    svc = _service(tmp_path / "s.sqlite", clock, prefect, log=log)
    tries = []
    while clock.now <= START + timedelta(hours=5):
        result = svc.tick()
        tries += result.failed
        if result.missed:
            break
        clock.now = svc.next_wakeup() if svc.next_wakeup() > clock.now else clock.now + timedelta(seconds=1)
    assert result.missed == [KEY]
    row = svc.store.get(KEY)
    assert row.state == "missed"
    # backoff 60 s doubling to 600 s over 4 h, plus one last try at the latest start
    assert 20 < len(tries) == row.attempts < 40 and prefect.calls[KEY] == row.attempts
    assert row.outcome.startswith("not triggered by its latest start 2026-06-02 06:00 UTC (planned for 2026-06-02 02:00 UTC): ")
    assert "attempt(s) failed, the last with: PrefectDown: All connection attempts failed" in row.outcome
    assert log[-1] == f"missed {KEY}: {row.outcome}"
    prefect.down = False
    clock.advance(hours=1)
    assert svc.tick().fired == [] and prefect.created == {}


def test_a_run_due_during_an_outage_fires_when_prefect_is_back_if_its_deadline_allows(tmp_path):
    clock, prefect = Clock(START), FakeDeployments(down=True)
    svc = _service(tmp_path / "s.sqlite", clock, prefect)
    svc.tick()
    clock.advance(hours=2)
    svc.tick()
    prefect.down = False
    clock.now = svc.next_wakeup()
    assert svc.tick().fired == [KEY] and prefect.created == {KEY: 1}


def test_a_service_down_past_the_latest_start_records_why(tmp_path):
    clock, prefect = Clock(T0), FakeDeployments()
    _service(tmp_path / "s.sqlite", clock, prefect).tick()
    clock.now = START + timedelta(hours=5)  # back after the latest start (06:00)
    svc = _service(tmp_path / "s.sqlite", clock, prefect, plan=lambda now: [])
    assert svc.tick().missed == [KEY]
    assert svc.store.get(KEY).outcome.endswith("the service was not running between the planned time and the latest start")
    assert prefect.calls == {}


def test_a_claim_left_by_a_killed_service_is_released_and_triggered_once(tmp_path):
    clock, prefect, log = Clock(START), FakeDeployments(), []
    db = tmp_path / "s.sqlite"
    svc = _service(db, clock, prefect)
    svc.replan()
    assert svc.store.claim(KEY, clock())  # the service dies right here, mid-trigger
    restarted = _service(db, clock, prefect, log=log)
    assert log == [f"released {KEY}: the previous service stopped while triggering it; it is tried again"]
    assert restarted.tick().fired == [KEY] and prefect.created == {KEY: 1}


def test_two_services_on_one_store_claim_a_run_once(tmp_path):
    clock, prefect = Clock(START), FakeDeployments()
    db = tmp_path / "s.sqlite"
    a, b = _service(db, clock, prefect), _service(db, clock, prefect)
    a.replan()
    assert a.store.claim(KEY, clock()) and not b.store.claim(KEY, clock())


def test_replan_moves_a_waiting_run_when_the_forecast_changes(tmp_path):
    clock, prefect, when = Clock(T0), FakeDeployments(), {"at": START}
    svc = _service(tmp_path / "s.sqlite", clock, prefect, plan=lambda now: [PlannedRun(key="k", run_at=when["at"], kwargs={"deployment": "d/n"})])
    assert svc.replan().planned == ["k"]
    when["at"] = START + timedelta(minutes=2)  # within tolerance: left alone
    assert svc.replan().moved == []
    when["at"] = START + timedelta(hours=1)
    assert svc.replan().moved == ["k"] and svc.planned() == {"k": START + timedelta(hours=1)}
    clock.now = START + timedelta(hours=1)
    svc.tick()
    when["at"] = START + timedelta(hours=3)  # a fired run is never moved or added again
    assert svc.replan().moved == [] and svc.replan().planned == []


def test_a_run_first_planned_for_now_fires_at_once(tmp_path):
    clock, prefect = Clock(START), FakeDeployments()
    svc = _service(tmp_path / "s.sqlite", clock, prefect, plan=lambda now: [PlannedRun(key="k", run_at=now, kwargs={"deployment": "d/n"})])
    result = svc.tick()
    assert (result.planned, result.fired) == (["k"], ["k"])


def test_planning_that_fails_keeps_the_stored_plan(tmp_path):
    clock, prefect, log = Clock(T0), FakeDeployments(), []
    db = tmp_path / "s.sqlite"
    _service(db, clock, prefect).tick()

    def broken(now):
        raise RuntimeError("no carbon source answered")

    svc = _service(db, clock, prefect, plan=broken, log=log)
    svc.tick()
    assert svc.planned() == {KEY: START}
    assert log == ["planning failed, keeping the stored plan: RuntimeError: no carbon source answered"]
    clock.now = START
    assert svc.tick().fired == [KEY]


def test_run_forever_sleeps_until_the_next_thing_to_do_and_stops(tmp_path):
    clock, prefect, naps = Clock(T0), FakeDeployments(), []
    svc = _service(tmp_path / "s.sqlite", clock, prefect)

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        clock.advance(seconds=seconds)
        if prefect.created:
            svc.stop()

    svc.sleep = sleep
    svc.run_forever()
    assert prefect.created == {KEY: 1}
    assert all(0 <= s <= 3600 for s in naps) and clock.now <= START + timedelta(hours=1)


def test_latest_start_leaves_room_for_the_work():
    nominal = datetime(2026, 6, 2, 1, 0, tzinfo=timezone.utc)
    assert latest_start(nominal, deadline_s=8 * 3600, work_s=3600) == nominal + timedelta(hours=7)
    assert latest_start(nominal, deadline_s=None, work_s=3600) is None


@pytest.fixture
def nightly_policy():
    from scheduler.policy.loader import load_policy

    return load_policy(Path(__file__).resolve().parents[2] / "examples" / "nightly.yaml")


def test_plan_runs_shifts_into_the_clean_hours(nightly_policy):
    from carbon.series import IntensityPoint, IntensitySeries
    from scheduler.planner.inputs import plan_runs

    now = datetime(2024, 3, 1, 20, 0, tzinfo=timezone.utc)
    step = timedelta(minutes=15)
    # dirty all evening, clean 03:00-07:00
    pts = [IntensityPoint(start=now + i * step, duration=step,
                          g_per_kwh=120.0 if 7 * 4 <= i < 11 * 4 else 600.0) for i in range(16 * 4)]
    runs = plan_runs(nightly_policy, IntensitySeries.of(pts), now=now)
    assert [r.key for r in runs] == ["nightly-retrain@20240302T0100Z"]
    assert runs[0].run_at == datetime(2024, 3, 2, 3, 0, tzinfo=timezone.utc)
    assert runs[0].kwargs["nominal_start"] == "2024-03-02T01:00:00+00:00"


def test_the_start_summary_is_one_line_per_job_and_day() -> None:
    """Issue 32: a 4-minute cron planned 363 runs at start, one line each; now one line per job and day."""
    from datetime import datetime, timedelta, timezone

    from scheduler.service.serve import PlannedRun, plan_summary

    t0 = datetime(2026, 12, 6, 22, 0, tzinfo=timezone.utc)
    runs = [PlannedRun(key=f"often@{t0 + timedelta(minutes=4 * i):%Y%m%dT%H%MZ}", run_at=t0 + timedelta(minutes=4 * i),
                       reason="the deadline cannot be met" if i % 3 else "cleanest start in the window")
            for i in range(60)]
    assert plan_summary("planned", runs) == [
        "planned 30 run(s) of often on 2026-12-06, 22:00-23:56 UTC: 20 x the deadline cannot be met; "
        "10 x cleanest start in the window",
        "planned 30 run(s) of often on 2026-12-07, 00:00-01:56 UTC: 20 x the deadline cannot be met; "
        "10 x cleanest start in the window"]
