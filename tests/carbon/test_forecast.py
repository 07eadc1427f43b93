"""The built-in forecasters: pure, hourly, honest about what they are."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.errors import NoCoverage
from carbon.forecasts.builtin import (
    daily_profile,
    forecast_series,
    hourly_means,
    persistence_hourly,
    same_hour_yesterday_hourly,
    seasonal_hourly,
)
from carbon.series import IntensityPoint, IntensitySeries

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def daily_wave(days: int, level: float = 300.0, amp: float = 100.0) -> np.ndarray:
    h = np.arange(days * 24)
    return level + amp * np.sin(2 * np.pi * h / 24)


def test_a_pure_daily_cycle_is_forecast_exactly() -> None:
    past = daily_wave(10)
    pred = seasonal_hourly(past, 24)
    truth = daily_wave(11)[240:264]
    assert np.allclose(pred, truth)
    assert not np.allclose(persistence_hourly(past, 24), truth)
    assert np.allclose(same_hour_yesterday_hourly(past, 24), truth)


def test_a_level_shift_is_carried_and_fades() -> None:
    past = daily_wave(8)
    past[-1] += 50  # the last hour is 50 above its usual value
    pred = seasonal_hourly(past, 24)
    base = daily_wave(9)[192:216]
    excess = pred - base
    assert excess[0] > excess[-1] > 0 and excess[0] == pytest.approx(50 * 0.97, rel=1e-6)


def test_gaps_are_tolerated_and_short_history_falls_back_to_persistence() -> None:
    past = daily_wave(3)
    past[30:40] = np.nan
    assert not np.isnan(seasonal_hourly(past, 24)).any()
    assert np.allclose(seasonal_hourly(np.array([250.0, 260.0]), 5), 260.0)


def test_hourly_means_weights_by_time_and_spreads_long_points() -> None:
    start = np.array([0, 1800, 3600], dtype=float)
    out = hourly_means(start, np.array([1800, 1800, 7200.0]), np.array([100.0, 200.0, 50.0]), grid_start_s=0, n_hours=4)
    assert out[0] == 150.0 and out[1] == 50.0 and out[2] == 50.0 and np.isnan(out[3])


def _series(values: list[float], step=timedelta(minutes=30)) -> IntensitySeries:
    return IntensitySeries.of(IntensityPoint(start=T0 + i * step, duration=step, g_per_kwh=v, kind="marginal", source="t")
                              for i, v in enumerate(values))


def test_forecast_series_labels_its_points() -> None:
    hist = _series([300 + 50 * np.sin(i / 48 * 2 * np.pi) for i in range(48 * 3)])
    now = T0 + timedelta(days=3) - timedelta(minutes=1)
    fc = forecast_series(hist, now=now, horizon=timedelta(hours=6))
    assert len(fc) == 6 and fc.start == T0 + timedelta(days=3)
    assert all(p.forecast and p.estimated and p.kind == "marginal" and p.source == "forecast:daily_profile" for p in fc)
    fc2 = forecast_series(hist, now=now, horizon=timedelta(hours=6), method="persistence")
    assert {p.source for p in fc2} == {"forecast:persistence"}


def test_no_history_is_no_coverage() -> None:
    with pytest.raises(NoCoverage):
        forecast_series(_series([1.0]), now=T0 - timedelta(days=1), horizon=timedelta(hours=1))


@pytest.mark.parametrize("forecaster", [seasonal_hourly, daily_profile])
@settings(deadline=None, max_examples=40)
@given(st.lists(st.floats(min_value=0, max_value=2000, allow_nan=False), min_size=1, max_size=24 * 60),
       st.integers(min_value=1, max_value=48))
def test_forecasts_are_finite_non_negative_and_bounded(forecaster, values: list[float], steps: int) -> None:
    past = np.array(values)
    pred = forecaster(past, steps)
    assert pred.shape == (steps,) and np.isfinite(pred).all() and (pred >= 0).all()
    assert pred.max() <= 2 * past.max() + 1e-9  # a profile of observed values plus at most today's deviation


def _weeks_of(deviation: np.ndarray) -> np.ndarray:
    return daily_wave(len(deviation) // 24) + deviation


def test_daily_profile_keeps_a_deviation_that_has_persisted() -> None:
    # the grid sat 40 g above its usual shape for days at a time: the offset now is carried ahead
    rng = np.random.default_rng(1)
    offsets = np.repeat(rng.choice([-40.0, 40.0], size=60), 24 * 1)  # whole days off the shape
    past = _weeks_of(offsets)
    past[-1] = daily_wave(60)[-1] + 40.0  # 40 above now
    pred = daily_profile(past, 6)
    profile = daily_wave(61)[-24:-18]
    assert np.all(pred - profile > 25.0)


def test_daily_profile_drops_a_deviation_that_never_lasted() -> None:
    # hour-to-hour noise around the shape: a high value now says nothing about the next hours
    rng = np.random.default_rng(2)
    past = _weeks_of(rng.normal(0.0, 30.0, size=60 * 24))
    past[-1] += 60.0
    pred = daily_profile(past, 6)
    profile = daily_wave(61)[-24:-18]
    assert np.all(np.abs(pred - profile) < 15.0)


def test_daily_profile_with_short_history_is_persistence_then_a_kept_offset() -> None:
    assert np.allclose(daily_profile(np.array([250.0, 260.0]), 5), 260.0)
    past = daily_wave(2)
    past[-1] += 50.0  # one day of pairs is too few to measure how long an offset lasts: it is kept
    assert np.allclose(daily_profile(past, 3) - daily_wave(3)[48:51], 50.0)


@pytest.mark.parametrize(("n", "gaps"), [(10 * 24, False), (10 * 24, True), (10 * 24 + 7, False)])
def test_same_time_means_agrees_with_the_definition(n: int, gaps: bool) -> None:
    # the whole-days shortcut (gap-free, whole days) and the general path both give the plain mean
    from carbon.forecasts.builtin import _same_time_means

    rng = np.random.default_rng(n + gaps)
    past = rng.normal(300.0, 50.0, size=n)
    if gaps:
        past[rng.choice(n, size=20, replace=False)] = np.nan
    got = _same_time_means(past, 24, 4)
    for o in range(n):
        lags = [past[o - d * 24] for d in range(1, 5) if o - d * 24 >= 0 and not np.isnan(past[o - d * 24])]
        assert (np.isnan(got[o]) if not lags else got[o] == pytest.approx(np.mean(lags))), o
