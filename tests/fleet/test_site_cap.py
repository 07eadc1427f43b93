"""A site's power cap across runs (issue 34, acceptance 2): placement keeps it in every slot, and where one
run after another would miss a deadline that a joint plan meets, the runs are planned together.

The truth is ``benchmarks/exact_site_cap.py``, a MILP of the joint problem (HiGHS) that shares no
code with the planner: whenever it finds a plan meeting every deadline, gridshift's has no miss.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.planner import ModeFigures
from scheduler.planner.grid import slot_intensity
from scheduler.policy.types import Policy
from scheduler.service.joint import CapRun, plan_in_order, plan_together
from scheduler.service.placement import Booking, place_run

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from exact_site_cap import ExactRun, exact_site_cap  # noqa: E402

NOW = datetime(2026, 3, 1, 20, 0, tzinfo=timezone.utc)
SLOT = 900.0
#: the simulated H200's modes (examples/nightly.yaml) and two power limits below them for a cap
MODES = [ModeFigures("speed", 700.0, 1.0, "test", False), ModeFigures("efficiency", 490.0, 0.83, "test", False),
         ModeFigures("cap_388w", 388.0, 0.71, "test", False, only_under_cap=True),
         ModeFigures("cap_262w", 262.0, 0.50, "test", False, only_under_cap=True)]


def _policy(cap_w: float, gpus_per_node: int = 8) -> Policy:
    return Policy.model_validate({"carbon": {"provider": "static"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.7}},
        "rules": {"kind": "plan", "slot_s": SLOT, "min_dwell_s": 0, "deadline_margin_s": 0, "min_gain": 0},
        "job": {"name": "j", "command": ["true"], "expected_duration_s": 3600, "deadline_s": 8 * 3600},
        "sites": [{"name": "s", "work_pool": "p", "gpus_per_node": gpus_per_node, "carbon": {"provider": "static"},
                   "power_cap_w": cap_w, "changeover_s": 0}]})


def _series(values: np.ndarray) -> IntensitySeries:
    return IntensitySeries.of(IntensityPoint(NOW + timedelta(seconds=i * SLOT), timedelta(seconds=SLOT), float(v))
                              for i, v in enumerate(values))


def _run(policy: Policy, series: IntensitySeries, key: str, work_h: float, first: int, end: int) -> CapRun:
    return CapRun(key, policy, series, work_h * 3600, NOW + timedelta(seconds=first * SLOT),
                  NOW + timedelta(seconds=end * SLOT))


def _slot_power(plans, n: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    power = {m.name: m.power_w for m in MODES}
    out = np.zeros(n)
    for plan in plans:
        for seg in plan.segments:
            a = int((seg.start - NOW).total_seconds() // SLOT)
            b = int(np.ceil((seg.end - NOW).total_seconds() / SLOT - 1e-9))
            out[a:b] += power[seg.mode]
    return out


def test_runs_placed_one_after_another_share_the_cap_in_every_slot() -> None:
    c = np.array([500.0] * 8 + [100.0] * 8 + [500.0] * 16)
    policy, series = _policy(1200.0), _series(c)
    bookings: list[Booking] = []
    plans = []
    for _ in range(3):
        placed = place_run(policy, {"s": series}, MODES, now=NOW, not_before=NOW, deadline=NOW + timedelta(hours=8),
                           work_s=2 * 3600, bookings=bookings)
        plans.append(placed.plan)
        bookings += [Booking("s", a, b, 1, power=tuple(p for p in placed.power if a <= p[0] < b))
                     for a, b in placed.plan.windows()]
        assert any("headroom" in r for r in placed.reasons)
    assert all(p.feasible for p in plans)
    assert _slot_power(plans, len(c)).max() <= 1200.0 + 1e-6


def test_where_one_after_another_misses_the_runs_are_planned_together() -> None:
    # a clean hour tempts the first run to run flat out (700 W) in it; the second, due as soon, then
    # finds 300 W there and cannot make it; efficiency for both (2 x 490 W) fits the 1000 W cap
    c = np.array([400.0] * 4 + [50.0] * 4 + [400.0] * 8)
    policy, series = _policy(1000.0), _series(c)
    runs = [_run(policy, series, "a", 3.0, 0, 15), _run(policy, series, "b", 3.0, 0, 15)]
    greedy = plan_in_order(runs, [0, 1], MODES, now=NOW)
    joint = plan_together(runs, MODES, now=NOW)
    exact, _ = exact_site_cap(c, [ExactRun(3 * 3600, 0, 15)] * 2, np.array([m.power_w for m in MODES]),
                              np.array([m.speed for m in MODES]), slot_s=SLOT, cap_w=1000.0)
    assert greedy.misses == 1 and np.isfinite(exact)
    assert joint.misses == 0 and joint.how != "in the order they came"
    assert _slot_power(joint.plans, len(c)).max() <= 1000.0 + 1e-6


@pytest.mark.slow
def test_no_miss_wherever_the_exact_joint_plan_meets_every_deadline() -> None:
    rng = np.random.default_rng(34)
    power, speed = np.array([m.power_w for m in MODES]), np.array([m.speed for m in MODES])
    checked = feasible = 0
    for case in range(24):
        T = 16
        c = rng.uniform(50, 600, T)
        n = int(rng.integers(2, 4))
        cap = float(rng.uniform(0.45, 1.1) * 700.0 * n)
        specs = []
        for _ in range(n):
            first = int(rng.integers(0, 4))
            end = int(rng.integers(first + 6, T + 1))
            work_h = float(rng.uniform(0.35, 0.95)) * (end - first) * SLOT / 3600.0
            specs.append((round(work_h * 4) / 4, first, end))
        policy, series = _policy(cap), _series(c)
        runs = [_run(policy, series, f"r{k}", w, a, b) for k, (w, a, b) in enumerate(specs)]
        # only whether a plan meeting every deadline exists: no carbon to minimise (seconds, not minutes)
        exact, _ = exact_site_cap(np.zeros(T), [ExactRun(w * 3600, a, b) for w, a, b in specs], power, speed,
                                  slot_s=SLOT, cap_w=cap)
        joint = plan_together(runs, MODES, now=NOW)
        assert _slot_power(joint.plans, T + 8).max() <= cap + 1e-6, case         # the cap holds, always
        checked += 1
        if np.isfinite(exact):
            feasible += 1
            assert joint.misses == 0, (case, specs, cap, joint.how)
    assert feasible >= 8  # the cases are not all infeasible (the comparison means something)


def test_the_exact_reservations_one_mode_per_run_keep_the_cap_with_the_changeover() -> None:
    from scheduler.planner.power_cap import PowerCap, CapWindow
    from scheduler.service.joint_exact import plan_exists, reservations

    windows = [(NOW, NOW + timedelta(hours=8), 3 * 3600.0, 1)] * 3
    cap = PowerCap((CapWindow(1000.0, "test"),))
    got = reservations(windows, MODES, cap, now=NOW, slot_s=SLOT, gpus_free=8, steady=True, changeover=True)
    assert got is not None
    load = np.zeros(40)
    for run in got:
        assert len({w for _, _, w in run}) == 1                       # one mode throughout
        slots = sorted(int((a - NOW).total_seconds() // SLOT) for a, _, _ in run)
        assert slots == list(range(slots[0], slots[-1] + 1))          # no gap: the job cannot pause
        load[slots[0]:slots[-1] + 2] += run[0][2]                      # its changeover slot counted too
    assert load.max() <= 1000.0 + 1e-6
    assert plan_exists(windows, MODES, PowerCap((CapWindow(200.0, "test"),)), now=NOW, slot_s=SLOT, gpus_free=8) is False
