"""A running run under grid events (issue 34), on an injected clock: it hears an event within its watch's
poll, re-plans at once under the cap (mode switches, power limits; the dwell waived), returns to its
plan when the event ends, and says which run is late and why when the cap leaves no way to be on time."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from backends.simulated import SimulatedBackend
from carbon.events import EventStore, GridEvent
from flows.cap_watch import CapWatch, MachineRuns, booked_windows, cap_summary
from flows.supervise import supervise
from scheduler.planner import ModeFigures
from scheduler.policy.types import Policy
from tests.flows.test_supervise_plan import FIGURES, _monitor, _series
from tests.flows.test_supervise_timeline import T0, FakeClock, FakeJob

H = 3600.0
CAP_MODE = ModeFigures("cap_300w", 300.0, 0.6, "test figures", False, only_under_cap=True)


def _policy(work_h: float, deadline_h: float) -> Policy:
    return Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.6}},
        "rules": {"kind": "plan", "min_dwell_s": 1800, "interval_s": 600, "deadline_margin_s": 0, "slot_s": 300},
        "objective": {"time_value_g_per_h": 100000},   # flat out whenever the cap lets it
        "job": {"name": "capped", "expected_duration_s": work_h * H, "deadline_s": deadline_h * H},
        "backend": {"name": "simulated"},
    })


class _Announcing(FakeJob):
    """A fake job that, as the clock passes ``at``, has someone run ``gridshift curtail`` (writes the store)."""

    def __init__(self, *args, store: EventStore, events: list[tuple[datetime, GridEvent]], **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.store, self.pending = store, sorted(events, key=lambda e: e[0])

    def wait(self, timeout_s: float | None = None) -> int | None:
        rc = super().wait(timeout_s)
        while self.pending and self.clock.t >= self.pending[0][0]:
            self.store.add(self.pending.pop(0)[1], now=self.clock.t)
        return rc


def _run(tmp_path: Path, policy: Policy, events: list[tuple[datetime, GridEvent]], *, cap_figures=()):  # type: ignore[no-untyped-def]
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    store = EventStore(tmp_path / "events.json")
    monitor = _monitor(_series(lambda minute: 300.0))
    job = _Announcing(clock, backend, policy.job.expected_duration_s, 1.25, store=store, events=events)
    watch = CapWatch(store=store, clock=clock.monotonic, runs=MachineRuns(tmp_path / "running"), run_id="r1")
    watch.runs.join("r1", 1)  # type: ignore[union-attr]
    logs: list[str] = []
    run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                    first_reading=monitor.read(clock()), start_job=lambda env: job, now=clock, log=logs.append,
                    deadline=T0 + timedelta(seconds=policy.job.deadline_s or 0), figures=FIGURES,
                    sleep=lambda s: None, progress=job.progress, cap_watch=watch, cap_figures=cap_figures)
    return run, clock.t, logs


def _event(a_min: float, b_min: float | None, **limit: float) -> GridEvent:
    return GridEvent(start=T0 + timedelta(minutes=a_min), end=T0 + timedelta(minutes=b_min) if b_min else None,
                     id="evt-test", **limit)


def test_an_event_is_answered_within_the_poll_and_the_plan_resumes_when_it_ends(tmp_path: Path) -> None:
    event = _event(60, 90, cap_w=500.0)
    run, end, logs = _run(tmp_path, _policy(3, 4), [(event.start, event)])
    assert run.exit_code == 0 and end <= T0 + timedelta(hours=4)
    modes = [(s.mode, s.start, s.end, s.power_w, s.cap_w) for s in run.spans]
    assert modes[0][0] == "speed"
    before = [m for m in modes if m[1] < event.start]
    # the speed span ends within the watch's poll (2 s) of the event, whatever the dwell (30 min)
    assert before[-1][0] == "speed" and (before[-1][2] - event.start).total_seconds() <= 2.0 + 1e-6
    under = [m for m in modes if event.start <= m[1] < event.end]
    assert under and all(m[3] <= 500.0 + 1e-6 for m in under) and under[0][4] == 500.0
    after = [m for m in modes if m[1] >= event.end]
    assert after and after[0][0] == "speed" and after[0][1] == event.end    # back to the plan at once
    summary = run.extra["power_cap"]
    assert summary["held"] and summary["events"][0]["response_s"] <= 2.0 + 1e-6
    assert any("power cap now" in line for line in logs)


def test_a_reduction_is_taken_from_the_power_drawn_when_heard(tmp_path: Path) -> None:
    event = _event(30, 60, reduce_pct=30.0)                       # 700 W drawn: at most 490 W
    run, _, _ = _run(tmp_path, _policy(3, 4), [(event.start, event)])
    summary = run.extra["power_cap"]["events"][0]
    assert summary["cap_w_for_this_run"] == pytest.approx(490.0)
    during = [s for s in run.spans if event.start <= s.start < event.end]
    assert during and all(s.power_w <= 490.0 + 1e-6 for s in during)


def test_a_cap_below_every_mode_lowers_the_power_limit_and_the_late_run_says_why(tmp_path: Path) -> None:
    event = _event(10, None, cap_w=350.0)                         # below efficiency (420 W), until cancelled
    run, end, _ = _run(tmp_path, _policy(2, 2.2), [(event.start, event)], cap_figures=[CAP_MODE])
    assert run.exit_code == 0 and end > T0 + timedelta(hours=2.2)   # late: the cap allows no faster way
    capped = [s for s in run.spans if s.start >= event.start]
    assert capped and {s.mode for s in capped} == {"cap_300w"}
    assert all(s.power_w <= 350.0 + 1e-6 for s in capped)
    late = [w for w in run.warnings if "cannot be met under the power cap" in w]
    assert late and "350 W" in late[0] and "evt-test" in late[0]


def test_the_machine_cap_is_shared_by_the_runs_on_it(tmp_path: Path) -> None:
    runs = MachineRuns(tmp_path / "running")
    store = EventStore(tmp_path / "events.json")
    watch = CapWatch(store=store, gpus=1, machine_cap_w=1000.0, runs=runs, clock=lambda: 0.0, run_id="a")
    runs.join("a", 1)
    assert watch.cap(T0).at(T0) == 1000.0
    runs.join("b", 3)                                             # this process stands for both runs here
    watch._next_s = float("-inf")
    assert watch.poll() is True and watch.cap(T0).at(T0) == 250.0
    runs.leave("b")
    watch.close()
    assert runs.gpus() == 0


def test_a_placed_run_keeps_to_its_booking_and_to_its_share_outside_it() -> None:
    a, b = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    windows = booked_windows({"site": "de", "power_cap_w": 1200.0, "power_share_w": 600.0,
                              "power": [[a.isoformat(), b.isoformat(), 700.0]]})
    from scheduler.planner.power_cap import PowerCap

    cap = PowerCap(windows)
    assert cap.at(T0) == 600.0 and cap.at(a) == 700.0 and cap.at(b) == 600.0


def test_no_cap_no_event_no_summary() -> None:
    assert cap_summary([], None) is None
