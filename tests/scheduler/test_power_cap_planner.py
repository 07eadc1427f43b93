"""The planner under a power cap (issue 34): the cap holds in every slot, the plan is exact under it, and says why.

The exact reference is ``benchmarks/exact_slots.py``'s ``exact_dp`` given the same (slots, modes)
mask (it shares no code with the planner); the figures are the measured V100 ResNet-50 profile with
speeds rounded to 1/200 of the reference mode's, as in ``test_planner_exact.py``.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.trace_file import read_trace
from scheduler.planner import ModeFigures, PlanConstraints, PlanJob, plan_slots
from scheduler.planner.grid import slot_intensity
from scheduler.planner.mode_figures import figures_for_policy
from scheduler.planner.power_cap import CapWindow, PowerCap, cap_limits, cap_mask
from scheduler.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from exact_slots import exact_dp  # noqa: E402

SLOT = 300.0
UNITS = 200
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def figures() -> list[ModeFigures]:
    policy = load_policy(REPO / "examples" / "nightly_12h.yaml")
    measured = figures_for_policy(policy, profile=REPO / "tests" / "data" / "zeus" / "V100+resnet50+gpu0.csv")
    return [ModeFigures(m.name, m.power_w, round(m.speed * UNITS) / UNITS, m.source, m.measured) for m in measured]


@pytest.fixture(scope="module")
def miso():  # type: ignore[no-untyped-def]
    return read_trace(REPO / "carbon" / "data" / "carbon_hist_MISO_MASON_CITY.csv", column="hist")


def _cap(watts: float, a_h: float, b_h: float, why: str = "test event") -> PowerCap:
    return PowerCap((CapWindow(watts, why, NOW + timedelta(hours=a_h), NOW + timedelta(hours=b_h)),))


def _slot_power(plan, figures: list[ModeFigures]) -> np.ndarray:  # type: ignore[no-untyped-def]
    power = {f.name: f.power_w for f in figures}
    return np.array([power[m] if m is not None else 0.0 for m in plan.slot_modes])


def test_without_a_cap_the_plan_is_todays(figures, miso) -> None:
    c = slot_intensity(miso, miso.start, SLOT, 120)
    job = PlanJob(work_s=3 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=10))
    cons = PlanConstraints(min_dwell_s=1800, slot_s=SLOT)
    base = plan_slots(c, job, figures, now=NOW, constraints=cons)
    roomy = max(f.power_w for f in figures) + 1.0
    for cap in (None, PowerCap(), _cap(roomy, 0, 10)):
        assert plan_slots(c, job, figures, now=NOW, constraints=cons, power_cap=cap).slot_modes == base.slot_modes


@pytest.mark.parametrize("cap_frac, a_h, b_h, pausable, offset_h", [
    (0.8, 1, 4, False, 0),
    (0.7, 0, 6, False, 30),
    (0.75, 2, 5, True, 50),
    (0.9, 3, 9, False, 70),
])
def test_the_plan_under_a_cap_is_the_exact_optimum_under_it(figures, miso, cap_frac, a_h, b_h, pausable,
                                                              offset_h) -> None:
    n = 120
    c = slot_intensity(miso, miso.start + timedelta(hours=offset_h), SLOT, n)
    power = np.array([f.power_w for f in figures])
    cap = _cap(cap_frac * power.max(), a_h, b_h)
    job = PlanJob(work_s=4 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=10), pausable=pausable,
                  resume_overhead_s=600.0 if pausable else 0.0)
    cons = PlanConstraints(min_dwell_s=1800, slot_s=SLOT)
    plan = plan_slots(c, job, figures, now=NOW, constraints=cons, power_cap=cap)
    headroom = cap.slot_headroom(NOW, SLOT, n)
    mask = cap_mask(headroom, figures)
    assert mask is not None
    exact = exact_dp(c, power, np.array([round(f.speed * UNITS) for f in figures]), slot_s=SLOT,
                     work_units=4 * 12 * UNITS, first_start=0, deadline_slots=n, dwell_slots=6, pausable=pausable,
                     resume_units=int(600 / SLOT * UNITS), allowed=mask)
    assert plan.feasible
    assert np.all(_slot_power(plan, figures) <= headroom[:len(plan.slot_modes)] + 1e-6)   # the cap holds in every slot
    assert plan.carbon_g >= exact * (1 - 1e-9)
    assert plan.carbon_g <= exact * (1 + cons.max_rounding)
    assert any(r.startswith("power cap: ") for r in plan.reasons)


def test_a_running_mode_over_the_cap_leaves_at_once_whatever_its_dwell(figures) -> None:
    c = np.full(60, 300.0)
    fastest = max(figures, key=lambda f: f.speed)
    job = PlanJob(work_s=2 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=5), running_mode=fastest.name,
                  running_since=NOW - timedelta(seconds=60))
    cap = _cap(fastest.power_w - 1.0, 0, 1)
    plan = plan_slots(c, job, figures, now=NOW, constraints=PlanConstraints(min_dwell_s=1800, slot_s=SLOT),
                      power_cap=cap)
    assert plan.slot_modes[0] != fastest.name
    assert plan.mode_at(NOW) != fastest.name


def test_a_deadline_the_cap_forbids_is_missed_by_the_least_and_the_plan_says_the_cap_is_why(figures) -> None:
    c = np.full(40, 300.0)
    slowest = min(figures, key=lambda f: f.power_w)
    job = PlanJob(work_s=2.5 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=3))
    cap = _cap(slowest.power_w + 1.0, 0, 3)
    plan = plan_slots(c, job, figures, now=NOW, constraints=PlanConstraints(slot_s=SLOT), power_cap=cap)
    assert not plan.feasible
    assert set(plan.slot_modes[:36]) == {slowest.name}               # the fastest mode the cap allows, throughout
    assert any("cannot be met under the power cap" in r for r in plan.reasons)
    assert not any(r.startswith("the deadline cannot be met: even") for r in plan.reasons)


def test_a_pausable_job_waits_where_no_mode_fits_and_a_started_one_that_cannot_pause_runs_its_least(figures) -> None:
    c = np.full(48, 300.0)
    least = min(figures, key=lambda f: f.power_w)
    cap = _cap(least.power_w / 2, 0, 1)
    cons = PlanConstraints(slot_s=SLOT)
    pausable = PlanJob(work_s=3600, not_before=NOW, deadline=NOW + timedelta(hours=4), pausable=True)
    plan = plan_slots(c, pausable, figures, now=NOW, constraints=cons, power_cap=cap)
    assert plan.feasible and plan.start >= NOW + timedelta(hours=1)
    stuck = PlanJob(work_s=3 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=3, minutes=20),
                    running_mode=least.name, running_since=NOW - timedelta(hours=1))
    plan = plan_slots(c, stuck, figures, now=NOW, constraints=cons, power_cap=cap)
    assert plan.slot_modes[0] == least.name                           # cannot stop: runs at its least, over the cap


def test_cap_modes_run_only_where_the_cap_binds(figures) -> None:
    extra = ModeFigures("cap_130w", 130.0, 0.6, "model", False, only_under_cap=True)
    modes = [*figures, extra]
    c = np.linspace(100.0, 600.0, 60)
    job = PlanJob(work_s=2 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=5), pausable=True)
    cap = _cap(140.0, 0, 2)
    plan = plan_slots(c, job, modes, now=NOW, constraints=PlanConstraints(slot_s=SLOT), power_cap=cap)
    used = [k for k, m in enumerate(plan.slot_modes) if m == "cap_130w"]
    assert used and max(used) < 24
    free = plan_slots(c, job, modes, now=NOW, constraints=PlanConstraints(slot_s=SLOT))
    assert "cap_130w" not in free.slot_modes


def test_cap_limits_span_the_device_range_without_the_policys_own() -> None:
    assert cap_limits((100.0, 700.0), [700.0, 497.0], steps=6) == [100.0, 200.0, 300.0, 400.0, 600.0]
    assert cap_limits(None, [700.0]) == []


@settings(max_examples=40, deadline=None)
@given(cap_frac=st.floats(0.2, 1.2), a=st.integers(0, 30), length=st.integers(1, 30), pausable=st.booleans(),
       seed=st.integers(0, 10_000))
def test_no_slot_of_any_plan_exceeds_the_headroom_unless_it_cannot_stop(figures, cap_frac, a, length, pausable,
                                                                       seed) -> None:
    c = np.random.default_rng(seed).uniform(100, 600, 60)
    power = max(f.power_w for f in figures)
    cap = PowerCap((CapWindow(cap_frac * power, "test", NOW + timedelta(seconds=a * SLOT),
                              NOW + timedelta(seconds=(a + length) * SLOT)),))
    job = PlanJob(work_s=1.5 * 3600, not_before=NOW, deadline=NOW + timedelta(hours=4), pausable=pausable)
    plan = plan_slots(c, job, figures, now=NOW, constraints=PlanConstraints(min_dwell_s=900, slot_s=SLOT),
                      power_cap=cap)
    headroom = cap.slot_headroom(NOW, SLOT, len(plan.slot_modes))
    assert np.all(_slot_power(plan, figures) <= headroom + 1e-6)
