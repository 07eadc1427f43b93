"""Decision rules: thresholds, percentiles, hysteresis, dwell, deadline guard (with properties)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.planner.thresholds import ModeState, decide, percentile_rank
from scheduler.policy.loader import parse_policy

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

BASE = """\
carbon: {{provider: static}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.6, max_slowdown: 0.3}}
rules:
  kind: absolute
  clean_below_g_per_kwh: 200
  dirty_above_g_per_kwh: 300
  min_dwell_s: {dwell}
job: {{command: [python, -c, pass], expected_duration_s: 3600}}
"""


def policy(dwell: float = 0):
    return parse_policy(BASE.format(dwell=dwell))


def series(values: list[float], step_s: int = 600) -> IntensitySeries:
    return IntensitySeries.of(
        IntensityPoint(start=T0 + timedelta(seconds=i * step_s), duration=timedelta(seconds=step_s), g_per_kwh=v)
        for i, v in enumerate(values)
    )


SPEED_RANK = {"speed": 1, "efficiency": 0}


def test_clean_dirty_and_band() -> None:
    p = policy()
    assert decide(p, series([150]), now=T0).mode == "speed"
    assert decide(p, series([350]), now=T0).mode == "efficiency"
    # in the band with a current mode: kept
    assert decide(p, series([250]), ModeState("efficiency", T0), now=T0).mode == "efficiency"
    assert decide(p, series([250]), ModeState("speed", T0), now=T0).mode == "speed"


def test_reason_is_one_sentence_with_numbers() -> None:
    d = decide(policy(), series([350]), now=T0)
    assert d.reason.endswith(".") and "350 g/kWh" in d.reason and "300" in d.reason
    assert d.inputs["band"] == "dirty"


@settings(max_examples=200, deadline=None)
@given(a=st.floats(0, 1000), b=st.floats(0, 1000), current=st.sampled_from([None, "speed", "efficiency"]))
def test_higher_intensity_never_selects_a_faster_mode(a: float, b: float, current: str | None) -> None:
    lo, hi = sorted((a, b))
    p = policy()
    state = ModeState(current, T0 - timedelta(hours=1)) if current else ModeState()
    m_lo = decide(p, series([lo]), state, now=T0).mode
    m_hi = decide(p, series([hi]), state, now=T0).mode
    assert SPEED_RANK[m_hi] <= SPEED_RANK[m_lo]


@settings(max_examples=100, deadline=None)
@given(noise=st.lists(st.floats(-45, 45), min_size=20, max_size=80), center=st.floats(210, 290))
def test_hysteresis_prevents_flapping_on_noise_inside_the_band(noise: list[float], center: float) -> None:
    """A noisy signal that stays inside the band never causes a switch, whatever the start mode."""
    p = policy()
    values = [min(max(center + n, 201), 299) for n in noise]
    s = series(values)
    for start_mode in ("speed", "efficiency"):
        state = ModeState(start_mode, T0 - timedelta(hours=1))
        for i in range(len(values)):
            now = T0 + timedelta(seconds=600 * i)
            d = decide(p, s, state, now=now)
            state = state.switch(d.mode, now)
            assert d.mode == start_mode


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(0, 600), min_size=10, max_size=60))
def test_min_dwell_bounds_the_number_of_switches(values: list[float]) -> None:
    dwell_s = 1800
    p = policy(dwell=dwell_s)
    s = series(values)
    state = ModeState()
    switch_times = []
    for i in range(len(values)):
        now = T0 + timedelta(seconds=600 * i)
        d = decide(p, s, state, now=now)
        if state.mode is not None and d.mode != state.mode:
            switch_times.append(now)
        state = state.switch(d.mode, now)
    gaps = [(b - a).total_seconds() for a, b in zip(switch_times, switch_times[1:])]
    assert all(g >= dwell_s for g in gaps)


def test_deadline_guard_forces_speed() -> None:
    p = policy()
    d = decide(p, series([500] * 20), ModeState("speed", T0 - timedelta(hours=1)), now=T0,
               remaining_work_s=3000, deadline=T0 + timedelta(seconds=3300))
    assert d.mode == "speed"
    assert "deadline" in d.reason
    roomy = decide(p, series([500] * 20), now=T0, remaining_work_s=3000, deadline=T0 + timedelta(hours=2))
    assert roomy.mode == "efficiency"


def test_no_data_keeps_mode() -> None:
    d = decide(policy(), IntensitySeries.of([]), ModeState("efficiency", T0), now=T0)
    assert d.mode == "efficiency" and "no intensity" in d.reason


def test_relative_rule_uses_forecast_percentile() -> None:
    text = BASE.format(dwell=0).replace(
        "  kind: absolute\n  clean_below_g_per_kwh: 200\n  dirty_above_g_per_kwh: 300\n",
        "  kind: relative\n  horizon_s: 36000\n  clean_below_percentile: 30\n  dirty_above_percentile: 70\n",
    )
    p = parse_policy(text)
    s = series([100, 500, 600, 700, 800, 900])
    assert decide(p, s, now=T0).mode == "speed"  # cheapest of the horizon
    s2 = series([900, 100, 200, 300, 400, 500])
    assert decide(p, s2, now=T0).mode == "efficiency"


@given(st.floats(0, 1000), st.lists(st.floats(0, 1000), min_size=1, max_size=50))
def test_percentile_rank_bounds(v: float, pop: list[float]) -> None:
    assert 0.0 <= percentile_rank(v, pop) <= 100.0
