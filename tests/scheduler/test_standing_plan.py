"""A re-plan with nothing new to plan on keeps the plan in force; anything new is planned anew."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import scheduler.planner.deciders as deciders
import scheduler.planner.standing_plan as standing_plan
from backends.simulated import SimulatedBackend
from scheduler.loop.gate import ForecastChoice
from scheduler.loop.loop import SignalReading
from scheduler.planner import RunPlan, Segment
from scheduler.planner.grid import GridSignal
from scheduler.planner.standing_plan import planned_state
from scheduler.policy.types import Policy
from scheduler.run_spec import resolve_run
from simulation.trace_run import TraceDriver, run_job_on_trace

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
STEP = 900.0


def _values(days: int = 2) -> np.ndarray:
    h = np.arange(int(days * 86400 / STEP)) * STEP / 3600.0
    return 300 + 150 * np.cos((h % 24 - 19) / 24 * 2 * math.pi) + 60 * np.sin(h * 1.7)


def _spec():  # type: ignore[no-untyped-def]
    policy = Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.7, "max_slowdown": 0.3}},
        "rules": {"kind": "plan", "slot_s": 900, "interval_s": 900, "min_dwell_s": 1800, "deadline_margin_s": 900},
        "job": {"name": "j", "command": ["true"], "expected_duration_s": 3 * 3600, "deadline_s": 4 * 3600},
        "backend": {"name": "simulated"},
    })
    spec = resolve_run(policy)
    return spec, spec.mode_figures(backend=SimulatedBackend())


@pytest.fixture
def solves(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """The times the decider solved (called the planner) rather than keeping its plan."""
    seen: list[datetime] = []
    real = deciders.plan_work

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs["now"])
        return real(*args, **kwargs)

    monkeypatch.setattr(deciders, "plan_work", counting)
    return seen


def _decider(start: datetime):  # type: ignore[no-untyped-def]
    spec, figures = _spec()
    return deciders.make_decider(spec, figures, deadline=start + timedelta(hours=4), pausable=False, explain=False)


def _follow(decider, signal: GridSignal, start: datetime, steps: int, *, fraction_off: float = 0.0,
            last: GridSignal | None = None, last_after_s: float = STEP) -> list[RunPlan]:  # type: ignore[no-untyped-def]
    """The run loop's questions for ``steps`` intervals, the job doing what each plan says; the last
    question on ``last`` (else ``signal``), ``last_after_s`` after the one before."""
    plans = [decider.decide(start, signal, running=None, since=None, started_before=False)]
    mode, since, t = plans[0].mode_at(start), start, start
    for k in range(1, steps + 1):
        wall = last_after_s if k == steps else STEP
        t += timedelta(seconds=wall)
        done = decider.done_s + wall * decider.tracker.speed(mode)
        decider.advance(mode, wall, done / decider.tracker.total_s * (1.0 - fraction_off))
        plans.append(decider.decide(t, last if k == steps and last is not None else signal, running=mode,
                                    since=since, started_before=False))
        want = plans[-1].mode_at(t)
        if want is not None and want != mode:
            mode, since = want, t
    return plans


def test_a_replan_on_the_same_forecast_keeps_the_plan(monkeypatch: pytest.MonkeyPatch, solves: list[datetime]) -> None:
    monkeypatch.setattr(standing_plan, "REFINE_RATIO", math.inf)  # however coarse: here only "nothing new" counts
    start = T0 + timedelta(hours=18)
    plans = _follow(_decider(start), GridSignal(_values(), STEP, 0.0, epoch=T0), start, 6)
    # the opening plan started the job now (a dwell taken as served), so the next one is solved anew;
    # from then on the job is where the plan said and the forecast is the same: the plan stands
    assert solves == [start, start + timedelta(seconds=STEP)]
    assert all(p is plans[1] for p in plans[2:])


def test_a_plan_counted_much_coarser_than_a_replan_would_count_is_solved_again(solves: list[datetime]) -> None:
    start = T0 + timedelta(hours=18)
    plans = _follow(_decider(start), GridSignal(_values(), STEP, 0.0, epoch=T0), start, 6)
    # the work quantum follows the work left: once it has shrunk by more than REFINE_RATIO, a re-plan
    # counts finer than the plan in force did, and solves
    assert len(solves) == 3 and solves[:2] == [start, start + timedelta(seconds=STEP)]
    resolved = int((solves[2] - start).total_seconds() / STEP)
    assert all(p is plans[1] for p in plans[2:resolved]) and plans[resolved] is not plans[1]


def test_a_new_forecast_is_planned_anew(solves: list[datetime]) -> None:
    start = T0 + timedelta(hours=18)
    values = _values()
    later = values.copy()
    later[int((start - T0).total_seconds() / STEP) + 8] *= 1.5  # one slot ahead, two hours on
    _follow(_decider(start), GridSignal(values, STEP, 0.0, epoch=T0), start, 3, last=GridSignal(later, STEP, 0.0, epoch=T0))
    assert len(solves) == 3  # the opening plan, the first re-plan, and the one on the new forecast


def test_a_job_off_its_planned_pace_is_planned_anew(solves: list[datetime]) -> None:
    start = T0 + timedelta(hours=18)
    _follow(_decider(start), GridSignal(_values(), STEP, 0.0, epoch=T0), start, 4, fraction_off=0.01)
    assert len(solves) == 5  # every re-plan: the job reported less work than planned


def test_a_replan_off_the_slot_grid_is_planned_anew(solves: list[datetime]) -> None:
    start = T0 + timedelta(hours=18)
    _follow(_decider(start), GridSignal(_values(), STEP, 0.0, epoch=T0), start, 2, last_after_s=STEP + 60)
    assert len(solves) == 3


def test_the_state_a_plan_says_the_job_is_in() -> None:
    at = lambda m: T0 + timedelta(minutes=m)  # noqa: E731
    seg = lambda a, b, mode, work: Segment(start=at(a), end=at(b), mode=mode, work_s=work, energy_j=0.0, carbon_g=0.0,  # noqa: E731
                                          reason="")
    plan = RunPlan(start=at(0), segments=(seg(0, 30, "eff", 1500.0), seg(30, 60, "speed", 1800.0),
                                          seg(90, 120, "speed", 1800.0)), energy_j=0.0, carbon_g=0.0,
                   finish=at(120), feasible=True, reasons=())
    since = at(-40)
    # at a boundary the loop re-plans before it switches: the mode before it is the one running
    assert planned_state(plan, at(0), at(30), running="eff", since=since) == (1500.0, "eff", since)
    assert planned_state(plan, at(0), at(45), running="eff", since=since) == (2400.0, "speed", at(30))
    assert planned_state(plan, at(0), at(75), running="speed", since=at(30)) == (3300.0, None, None)
    assert planned_state(plan, at(15), at(30), running="eff", since=since)[0] == pytest.approx(750.0)


def _simulated_carbon(start: datetime) -> float:
    spec, figures = _spec()
    values = _values()
    truth = GridSignal(values, STEP, 0.0, epoch=T0)

    def read(s: float) -> SignalReading:  # the perfect forecast
        i = int(s // STEP)
        return SignalReading(GridSignal(values[i:], STEP, i * STEP, epoch=T0), float(values[i]), label="trace")

    driver = TraceDriver(truth, figures, work_s=spec.job.expected_duration_s, read=read, reports_progress=True)
    deadline = start + timedelta(seconds=spec.job.deadline_s)
    run_job_on_trace(driver, lambda done, windows: deciders.make_decider(spec, figures, deadline=deadline, pausable=False,
                                                                         done_s=done, explain=False),
                     start_s=(start - T0).total_seconds(), interval_s=spec.interval_s, pausable=False,
                     choice=ForecastChoice(), clean_mode=spec.clean_mode, give_up_s=1e9)
    return driver.carbon_g


@pytest.mark.parametrize("hour", [14, 18, 22])
def test_kept_plans_cost_what_replanning_every_time_costs(monkeypatch: pytest.MonkeyPatch, solves: list[datetime],
                                                          hour: int) -> None:
    start = T0 + timedelta(hours=hour)
    kept = _simulated_carbon(start)
    n_kept = len(solves)
    monkeypatch.setattr(standing_plan, "REFINE_RATIO", 0.0)  # no plan ever stands
    solves.clear()
    every = _simulated_carbon(start)
    assert n_kept < len(solves)
    assert kept == pytest.approx(every, rel=2e-3)
