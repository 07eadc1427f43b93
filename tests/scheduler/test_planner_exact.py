"""The planner against exact solvers that share none of its code, at the sizes jobs have (issue 24).

``benchmarks/exact_slots.py`` holds two: ``exact_dp`` (dynamic programming on whole work units: each
mode's slot work is a whole number of units, so nothing is rounded) and ``exact_slots`` (a MILP in
HiGHS). Here the mode figures are the measured V100 ResNet-50 profile (tests/data/zeus, five useful
limits) with each speed rounded to 1/200 of the reference mode's, so that the planner and the exact
DP solve the very same problem; intensities are the packaged MISO trace cut into 5-min slots.
"""

from __future__ import annotations

import math
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from carbon.trace_file import read_trace
from scheduler.planner.mode_figures import figures_for_policy
from scheduler.planner import ModeFigures, PlanConstraints, PlanJob, plan_slots
from scheduler.planner.grid import slot_intensity
from scheduler.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from exact_slots import exact_dp, exact_slots  # noqa: E402

SLOT = 300.0
UNITS = 200            # work units per reference-mode slot: speeds are multiples of 1/200
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def figures() -> list[ModeFigures]:
    policy = load_policy(REPO / "examples" / "nightly_12h.yaml")
    measured = figures_for_policy(policy, profile=REPO / "tests" / "data" / "zeus" / "V100+resnet50+gpu0.csv")
    assert len(measured) == 5
    return [ModeFigures(m.name, m.power_w, round(m.speed * UNITS) / UNITS, m.source, m.measured) for m in measured]


@pytest.fixture(scope="module")
def miso():  # type: ignore[no-untyped-def]
    return read_trace(REPO / "carbon" / "data" / "carbon_hist_MISO_MASON_CITY.csv", column="hist")


def _exact(c: np.ndarray, figures: list[ModeFigures], *, work_s: float, slots: int, dwell: int,
           pausable: bool = False, overhead_s: float = 0.0) -> float:
    units = np.array([round(m.speed * UNITS) for m in figures])
    return exact_dp(c, np.array([m.power_w for m in figures]), units, slot_s=SLOT,
                    work_units=int(round(work_s / SLOT * UNITS)), first_start=0, deadline_slots=slots,
                    dwell_slots=dwell, pausable=pausable, resume_units=int(round(overhead_s / SLOT * UNITS)))


@pytest.mark.parametrize("work_h, window_h, dwell_s, margin_s, offset_h", [
    (3, 11, 1800, 900, 0),      # examples/nightly.yaml's shape on 5-min slots
    (8, 10, 1800, 900, 20),     # the 8 h variant: 10 h from 1 h before the cron time
    (12, 14, 1800, 900, 40),    # the 12 h variant
    (12, 15, 0, 0, 60),         # the simulator's oracle: no dwell, no margin
])
def test_long_jobs_are_planned_within_the_rounding_bound(figures, miso, work_h, window_h, dwell_s, margin_s,
                                                          offset_h) -> None:
    n = int(window_h * 3600 / SLOT)
    c = slot_intensity(miso, miso.start + timedelta(hours=offset_h), SLOT, n)
    job = PlanJob(work_s=work_h * 3600, not_before=NOW, deadline=NOW + timedelta(hours=window_h))
    cons = PlanConstraints(min_dwell_s=dwell_s, deadline_margin_s=margin_s, slot_s=SLOT)
    plan = plan_slots(c, job, figures, now=NOW, constraints=cons)
    exact = _exact(c, figures, work_s=work_h * 3600, slots=n - int(margin_s / SLOT), dwell=max(int(dwell_s / SLOT), 1))
    assert plan.feasible and plan.finish <= job.deadline - timedelta(seconds=margin_s)
    assert sum(s.work_s for s in plan.segments) >= work_h * 3600 * (1 - 1e-9)
    assert plan.carbon_g >= exact * (1 - 1e-9)                     # the exact optimum is a bound
    assert plan.carbon_g <= exact * (1 + cons.max_rounding)        # and the plan is within the promised rounding
    assert not plan.rounding_exceeded and plan.rounding <= cons.max_rounding


def test_a_pause_that_fits_with_11_s_to_spare_is_taken(figures, miso) -> None:
    """The reference mode is counted exactly (whole quanta per slot), so a pause that leaves 11 s of
    slack is not lost to rounded-up work (it was, with a per-slot round-down: 22.9-34.5 % worse plans)."""
    n, pause, overhead = 72, 24, 600.0
    c = slot_intensity(miso, miso.start + timedelta(hours=10), SLOT, n).copy()
    c[24:24 + pause] += 2000.0                                      # two dirty hours in the middle
    work = (n - pause) * SLOT * figures[0].speed - overhead - 11.0  # all of it at full speed, one resume
    job = PlanJob(work_s=work, not_before=NOW, deadline=NOW + timedelta(seconds=n * SLOT), pausable=True,
                  resume_overhead_s=overhead)
    plan = plan_slots(c, job, figures, now=NOW, constraints=PlanConstraints(min_dwell_s=1800, slot_s=SLOT))
    exact = _exact(c, figures, work_s=work, slots=n, dwell=6, pausable=True, overhead_s=overhead)
    assert plan.feasible and len(plan.windows()) == 2
    assert plan.carbon_g <= exact * (1 + 1e-3)


def test_a_resuming_job_that_cannot_make_it_with_its_overhead_is_not_feasible(figures) -> None:
    c = np.full(48, 300.0)
    job = PlanJob(work_s=3 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=3, minutes=10), pausable=True,
                  resume_overhead_s=1800, resuming=True)
    plan = plan_slots(c, job, figures, now=NOW, constraints=PlanConstraints(slot_s=SLOT))
    assert not plan.feasible
    assert plan.finish == NOW + timedelta(hours=3, minutes=30)      # the fastest finish does the resume's work too
    assert "cannot be met" in plan.reasons[0]


def test_a_plan_counted_worse_than_its_bound_says_so(figures) -> None:
    c = np.linspace(200.0, 400.0, 36)
    job = PlanJob(work_s=2 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=3))
    plan = plan_slots(c, job, figures, now=NOW, constraints=PlanConstraints(slot_s=SLOT, max_rounding=1e-7))
    assert plan.rounding_exceeded
    assert any(r.startswith("warning: the planner's work count") for r in plan.reasons)


def test_the_two_exact_solvers_agree(figures) -> None:
    pytest.importorskip("highspy")
    rng = np.random.default_rng(3)
    for pausable in (False, True):
        c = rng.uniform(100, 600, 16)
        power = np.array([m.power_w for m in figures])
        speed = np.array([round(m.speed * UNITS) / UNITS for m in figures])
        milp, _ = exact_slots(c, power, speed, slot_s=SLOT, work_s=9 * SLOT, first_start=1, deadline_slots=16,
                              dwell_slots=2, pausable=pausable, resume_overhead_s=SLOT / 2)
        dp = exact_dp(c, power, np.round(speed * UNITS).astype(int), slot_s=SLOT, work_units=9 * UNITS, first_start=1,
                      deadline_slots=16, dwell_slots=2, pausable=pausable, resume_units=UNITS // 2)
        assert math.isfinite(dp) and dp == pytest.approx(milp, rel=1e-6)
