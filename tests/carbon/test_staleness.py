"""Staleness is judged on the data's own timestamps (carbon.staleness), and the monitor fails over on it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from carbon.errors import StaleData
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.base import Provider
from carbon.providers.static import StaticProvider
from carbon.series import IntensityPoint
from carbon.staleness import stale_reason

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
LIMIT = dict(max_staleness=HOUR, horizon=timedelta(hours=24))


def _point(start: datetime, minutes: int = 30, forecast: bool = False) -> IntensityPoint:
    return IntensityPoint(start=start, duration=timedelta(minutes=minutes), g_per_kwh=200.0, forecast=forecast)


def _forecast(start: datetime, hours: int) -> list[IntensityPoint]:
    return [_point(start + i * HOUR, 60, forecast=True) for i in range(hours)]


@given(st.integers(min_value=-600, max_value=600))
def test_a_value_is_stale_exactly_when_its_interval_ended_beyond_the_limit(ended_min_ago: int) -> None:
    current = _point(NOW - timedelta(minutes=ended_min_ago + 30))
    reason = stale_reason(current, (), NOW, issued=NOW, **LIMIT)
    assert (reason is not None) == (ended_min_ago > 60)
    if reason:
        assert reason.startswith("stale data: ") and "1.0 h staleness limit" in reason


def test_a_five_hour_old_value_fetched_just_now_is_stale() -> None:
    reason = stale_reason(_point(NOW - timedelta(hours=5, minutes=30)), (), NOW, issued=NOW, **LIMIT)
    assert reason == ("stale data: the newest value's interval ended 5.0 h ago (2026-06-01 07:00 UTC), "
                      "beyond the 1.0 h staleness limit")


def test_a_forecast_that_ran_out_since_it_was_issued_is_stale() -> None:
    issued = NOW - timedelta(hours=3)
    fc = _forecast(issued, 24)  # covered the whole horizon when issued; 3 h short of it now
    assert stale_reason(_point(NOW), fc, NOW, issued=issued, **LIMIT).startswith("stale forecast: issued ")
    assert stale_reason(_point(NOW), fc, NOW - timedelta(hours=2, minutes=30), issued=issued, **LIMIT) is None
    assert stale_reason(_point(NOW), _forecast(NOW - 30 * HOUR, 24), NOW, issued=NOW, **LIMIT).endswith(
        "covers none of the horizon (staleness limit 1.0 h)")


def test_a_forecast_short_from_the_start_is_what_the_source_has() -> None:
    # a trace near its end, a provider with a 12 h forecast: not stale when fetched
    assert stale_reason(_point(NOW), _forecast(NOW, 12), NOW, issued=NOW, **LIMIT) is None


class OldNews(Provider):
    """A provider that answers at once, with a value from hours ago (a stalled upstream)."""

    name = "oldnews"
    zone = "Z"

    def __init__(self, age: timedelta) -> None:
        self.age = age

    def current(self, *, now: datetime) -> IntensityPoint:
        return IntensityPoint(start=now - self.age, duration=HOUR, g_per_kwh=50.0, source="oldnews")


def test_the_monitor_fails_over_from_a_source_serving_old_data_and_says_why(tmp_path) -> None:
    monitor = CarbonMonitor([SourceSpec("oldnews", lambda: OldNews(timedelta(hours=5))),
                             SourceSpec("static", lambda: StaticProvider(g_per_kwh=400.0))],
                            max_staleness=HOUR, cache_dir=tmp_path, forecaster=None)
    r = monitor.read(NOW)
    assert r.source == "static" and r.current.g_per_kwh == 400.0 and r.degraded
    (failure,) = r.failures
    assert failure.startswith("oldnews: stale data: the newest value's interval ended 4.0 h ago")
    assert "stale data" in r.reason
    assert not list(tmp_path.glob("oldnews*.json"))  # old data is never cached as if it were fresh


def test_stale_data_is_a_carbon_error_named_for_the_source() -> None:
    exc = StaleData("stale data: x", provider="oldnews")
    assert str(exc) == "oldnews: stale data: x"
