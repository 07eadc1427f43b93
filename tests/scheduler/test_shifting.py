"""Start-time shifting: properties (never late, never early) and hand-checked cases."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.planner.shifting import (
    best_start,
    best_start_over_modes,
    window_integrals,
)

STEP_S = 900.0


def _threshold_nightly():
    """The nightly example with the percentile rule it had before the planner: decide()'s own policy."""
    from scheduler.policy.types import RelativeRule
    from scheduler.policy.loader import load_policy

    policy = load_policy(Path(__file__).resolve().parents[2] / "examples" / "nightly.yaml")
    return policy.model_copy(update={"rules": RelativeRule(horizon_s=43200, min_dwell_s=1800, interval_s=900)})


@pytest.fixture
def nightly_policy():
    return _threshold_nightly()


@st.composite
def windows(draw):
    n = draw(st.integers(8, 96))
    values = np.array(draw(st.lists(st.floats(0, 1000, allow_nan=False), min_size=n, max_size=n)))
    duration_s = draw(st.floats(STEP_S / 2, n * STEP_S / 2))
    earliest_s = draw(st.floats(0, n * STEP_S / 4))
    slack_s = draw(st.floats(0, n * STEP_S / 2))
    return values, earliest_s, earliest_s + duration_s + slack_s, duration_s


@settings(deadline=None, max_examples=150)
@given(windows(), st.floats(0, 0.2), st.one_of(st.none(), st.floats(0, 3600)))
def test_never_late_never_before_earliest(w, min_gain, margin_s):
    values, earliest_s, deadline_s, duration_s = w
    plan = best_start(values, step_s=STEP_S, earliest_s=earliest_s, deadline_s=deadline_s, duration_s=duration_s,
                      power_w=500.0, min_gain=min_gain, safety_margin_s=margin_s)
    assert plan.start_s >= earliest_s - 1e-9
    assert plan.start_s + duration_s <= deadline_s + 1e-9
    # a shift is only taken when it promises at least min_gain
    if plan.shifted:
        assert plan.expected_g <= plan.reference_g * (1 - min_gain) + 1e-9


def test_moves_to_the_clean_valley():
    values = np.array([500.0] * 8 + [100.0] * 4 + [500.0] * 12)  # clean from 2 h to 3 h
    plan = best_start(values, step_s=STEP_S, earliest_s=0, deadline_s=24 * STEP_S, duration_s=3600, power_w=1000)
    assert plan.shifted and plan.start_s == 8 * STEP_S
    assert plan.expected_g == pytest.approx(1000 * 3600 / 3.6e6 * 100)


def test_small_gains_are_not_chased():
    values = np.array([500.0] * 8 + [490.0] * 4 + [500.0] * 12)  # 2 % cleaner: noise, not signal
    plan = best_start(values, step_s=STEP_S, earliest_s=0, deadline_s=24 * STEP_S, duration_s=3600, power_w=1000,
                      reference_start_s=0, min_gain=0.03)
    assert not plan.shifted and plan.start_s == 0


def test_safety_margin_keeps_the_valley_at_the_deadline_out_of_reach():
    values = np.array([500.0] * 20 + [50.0] * 4)  # the only valley ends exactly at the deadline
    plan = best_start(values, step_s=STEP_S, earliest_s=0, deadline_s=24 * STEP_S, duration_s=3600, power_w=1000,
                      safety_margin_s=1800)
    assert plan.start_s + 3600 <= 24 * STEP_S - 1800


def test_window_integral_carries_last_value_forward():
    got = window_integrals(np.array([1.0, 2.0]), 10.0, np.array([0.0, 15.0]), 10.0)
    assert got.tolist() == [10.0, 20.0]


def test_mode_choice_prefers_the_cheaper_mode_that_fits():
    values = np.full(40, 300.0)
    name, plan = best_start_over_modes(values, {"speed": (700.0, 3 * 3600), "efficiency": (490.0, 3.6 * 3600)},
                                       step_s=STEP_S, earliest_s=0, deadline_s=40 * STEP_S)
    assert name == "efficiency"
    name, _ = best_start_over_modes(values, {"speed": (700.0, 3 * 3600), "efficiency": (490.0, 20 * 3600)},
                                    step_s=STEP_S, earliest_s=0, deadline_s=40 * STEP_S)
    assert name == "speed"


def _series(values, start, step=timedelta(minutes=15)):
    return IntensitySeries.of(IntensityPoint(start=start + i * step, duration=step, g_per_kwh=v) for i, v in enumerate(values))


def test_decide_shifts_the_start_within_the_window(nightly_policy):
    from scheduler.planner.thresholds import decide

    now = datetime(2024, 3, 1, 1, 0, tzinfo=timezone.utc)
    earliest = now - timedelta(hours=4)
    # dirty until 03:00, clean 03:00-06:00, dirty after
    values = [600.0] * 24 + [150.0] * 12 + [600.0] * 8
    series = _series(values, earliest)
    d = decide(nightly_policy, series, now=now, earliest=earliest, deadline=now + timedelta(hours=7),
               remaining_work_s=3 * 3600)
    assert d.start_at == datetime(2024, 3, 1, 3, 0, tzinfo=timezone.utc)
    assert "shifted" in d.reason
    # with an explicit start_at nothing moves (the old contract)
    d2 = decide(nightly_policy, series, now=now, start_at=now)
    assert d2.start_at == now


@settings(deadline=None, max_examples=40)
@given(st.lists(st.floats(0, 900, allow_nan=False), min_size=44, max_size=44), st.integers(-16, 0))
def test_decide_never_starts_early_or_late(values, earliest_steps):

    from scheduler.planner.thresholds import decide

    nightly_policy = _threshold_nightly()

    nominal = datetime(2024, 3, 1, 1, 0, tzinfo=timezone.utc)
    earliest = nominal + timedelta(minutes=15 * earliest_steps)
    deadline = nominal + timedelta(seconds=nightly_policy.job.deadline_s)
    series = _series(values, nominal - timedelta(hours=4))
    d = decide(nightly_policy, series, now=nominal, earliest=earliest, deadline=deadline,
               remaining_work_s=nightly_policy.job.expected_duration_s)
    assert earliest <= d.start_at
    assert d.start_at + timedelta(seconds=nightly_policy.job.expected_duration_s) <= deadline
