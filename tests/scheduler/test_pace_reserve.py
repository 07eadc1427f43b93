"""The deadline margin kept as a pace reserve, for a job that reports its progress: where it applies,
what it allows, and that a job slower than planned still meets its deadline."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.planner import ModeFigures, PlanConstraints, PlanJob, pace_reserve_holds, plan_slots
from scheduler.planner.inputs import plan_constraints, plan_policy_job
from scheduler.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, 21, tzinfo=timezone.utc)
SLOT = 900.0
SPEED = np.array([1.0, 0.823])
MODES = [ModeFigures("speed", 227.0, 1.0, "test"), ModeFigures("efficiency", 149.0, 0.823, "test")]


def test_a_frugal_plan_up_to_the_deadline_keeps_a_reserve_that_a_full_speed_one_does_not() -> None:
    work = 10800.0
    frugal = np.array([1] * 15)  # 3.65 h at 0.823: ends 6.3 min into... before the end of slot 15
    assert pace_reserve_holds(frugal, SPEED, slot_s=SLOT, work_s=work, left_s=15 * SLOT, tolerance=900 / work,
                              replan_s=900)
    full = np.array([0] * 12)  # 3 h at full speed, ending at the deadline: no speed left to catch up
    assert not pace_reserve_holds(full, SPEED, slot_s=SLOT, work_s=work, left_s=12 * SLOT, tolerance=900 / work,
                                  replan_s=900)
    # the same full-speed plan a margin earlier: the work left always fits, but a slowdown after the
    # last re-plan has nothing left to absorb it
    assert not pace_reserve_holds(full, SPEED, slot_s=SLOT, work_s=work, left_s=13 * SLOT, tolerance=900 / work,
                                  replan_s=900)
    assert pace_reserve_holds(full, SPEED, slot_s=SLOT, work_s=work, left_s=13 * SLOT + 75, tolerance=900 / work,
                              replan_s=900)


def test_the_reserve_is_the_policys_only_for_a_job_that_reports_progress() -> None:
    policy = load_policy(REPO / "examples" / "nightly.yaml")
    assert policy.job.reports_progress
    c = plan_constraints(policy)
    assert c.pace_tolerance == pytest.approx(policy.rules.deadline_margin_s / policy.job.expected_duration_s)
    assert c.replan_s == policy.rules.interval_s
    silent = policy.model_copy(update={"job": policy.job.model_copy(update={"reports_progress": False})})
    assert plan_constraints(silent).pace_tolerance == 0.0


def _cheap_at_the_end(n: int) -> IntensitySeries:
    values = [400.0] * (n - 1) + [50.0]  # the last slot before the deadline is clean
    return IntensitySeries.of([IntensityPoint(start=NOW + timedelta(seconds=k * SLOT), duration=timedelta(seconds=SLOT),
                                              g_per_kwh=v) for k, v in enumerate(values)])


def test_the_reserve_lets_the_plan_use_the_last_slot_and_a_run_without_reports_does_not() -> None:
    policy = load_policy(REPO / "examples" / "nightly.yaml")
    deadline = NOW + timedelta(seconds=11 * 3600)
    series = _cheap_at_the_end(44)
    args = dict(now=NOW, work_s=10800.0, not_before=NOW, deadline=deadline)
    reserve = plan_policy_job(policy, series, MODES, **args)  # type: ignore[arg-type]
    fixed = plan_policy_job(policy, series, MODES, pace_measured=False, **args)  # type: ignore[arg-type]
    assert fixed.finish <= deadline - timedelta(seconds=policy.rules.deadline_margin_s)
    assert reserve.start > fixed.start and reserve.finish <= deadline  # one slot later, into the clean end
    assert reserve.carbon_g < fixed.carbon_g
    assert "pace reserve" in reserve.reason or reserve.finish <= deadline - timedelta(seconds=900)


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.floats(min_value=10, max_value=900), min_size=44, max_size=44),
       tolerance=st.floats(min_value=0.0, max_value=0.3))
def test_a_reserve_plan_never_ends_after_the_deadline_and_falls_back_to_the_margin(values: list[float],
                                                                                   tolerance: float) -> None:
    c = np.array(values)
    deadline = NOW + timedelta(seconds=11 * 3600)
    job = PlanJob(work_s=10800.0, not_before=NOW, deadline=deadline)
    margin = PlanConstraints(slot_s=SLOT, deadline_margin_s=900.0, min_dwell_s=1800.0)
    reserve = PlanConstraints(slot_s=SLOT, deadline_margin_s=900.0, min_dwell_s=1800.0, pace_tolerance=tolerance,
                              replan_s=900.0)
    a = plan_slots(c, job, MODES, now=NOW, constraints=margin, explain=False)
    b = plan_slots(c, job, MODES, now=NOW, constraints=reserve, explain=False)
    assert b.finish <= deadline
    # the margin's plan is in the reserve plan's search space: never worse on the forecast, up to the
    # solver's work-count rounding (PlanConstraints.max_rounding)
    assert b.carbon_g <= a.carbon_g * (1.0 + margin.max_rounding) + 1e-6
    if b.finish > deadline - timedelta(seconds=900):  # used the reserve: it must hold
        idx = {m.name: k for k, m in enumerate(MODES)}
        modes = np.array([idx[m] if m is not None else -1 for m in b.slot_modes])
        assert pace_reserve_holds(modes, SPEED, slot_s=SLOT, work_s=10800.0, left_s=11 * 3600.0, tolerance=tolerance,
                                  replan_s=900.0)


@pytest.mark.parametrize("pace_error", [0.0, 900 / 10800, 0.15])
def test_a_job_slower_than_planned_still_meets_every_deadline(pace_error: float) -> None:
    """A month of nights on a grid with a daily shape and noise; the job runs slower than its figures
    from its first second, and its plans learn the real pace after one interval (as a reporting run does)."""
    from simulation.sim_forecast import PerfectForecaster
    from simulation.simulate import simulate

    r = np.random.default_rng(11)
    hours = 24 * 30
    t0 = datetime(2021, 7, 1, tzinfo=timezone.utc)
    vals = 300 + 120 * np.sin(2 * np.pi * (np.arange(hours) - 4) / 24) + r.normal(0, 40, hours)
    series = IntensitySeries.of([IntensityPoint(start=t0 + timedelta(hours=h), duration=timedelta(hours=1),
                                                g_per_kwh=float(max(v, 5.0))) for h, v in enumerate(vals)])
    policy = load_policy(REPO / "examples" / "nightly.yaml")
    s = simulate(policy, series, MODES, PerfectForecaster(), strategies=(), workers=1,
                 pace_error=pace_error).summary()
    assert s["jobs"] > 20
    assert s["deadline_misses"] == 0
    assert s["deadline_margin"] == {"margin_s": 900.0, "kept_as": "pace reserve", "pace_tolerance": 900 / 10800,
                                    "pace_error": pace_error}
