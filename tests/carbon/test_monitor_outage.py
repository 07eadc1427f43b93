"""The monitor through a multi-hour outage of its primary, with an injected clock and a real local server."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from carbon.errors import NoCoverage
from carbon.monitor import AllSourcesFailed, CarbonMonitor, SourceSpec
from carbon.providers.base import Provider
from carbon.providers.static import StaticProvider
from carbon.providers.trace import load_sample_trace
from carbon.providers.ukgrid import UkGridProvider
from carbon.series import IntensityPoint, IntensitySeries

T0 = datetime(2018, 1, 20, 12, 10, tzinfo=timezone.utc)
STEP = timedelta(minutes=10)


def chain(server, cache_dir: Path, **kw) -> CarbonMonitor:
    specs = [
        SourceSpec("ukgrid", lambda: UkGridProvider(base_url=server.url, sleep=lambda s: None, timeout_s=0.3)),
        SourceSpec("static", lambda: StaticProvider(g_per_kwh=300.0)),
    ]
    return CarbonMonitor(specs, cache_dir=cache_dir, max_staleness=timedelta(hours=1), history_window=timedelta(hours=1), **kw)


def test_multi_hour_outage_cache_then_fallback_then_recovery(server, tmp_path: Path) -> None:
    monitor = chain(server, tmp_path)
    first = monitor.read(T0)
    assert (first.source, first.stale, first.served_from, first.failures) == ("ukgrid", False, "live", ())
    assert first.current.g_per_kwh == 263.0 and first.forecast_by == "provider"
    assert (tmp_path / "ukgrid.json").exists()

    server.failure = "503"
    t, log = T0, []
    while t < T0 + timedelta(hours=4):
        t += STEP
        before = len(server.requests)
        r = monitor.read(t)
        log.append((t, r, len(server.requests) - before))
        assert r.degraded and any(f.startswith("ukgrid:") for f in r.failures)
        if t - T0 <= timedelta(hours=1):
            # the same signal, from cache, marked stale: its value (12:00-12:30) ended within the limit, and its
            # short forecast (to 13:30, issued at T0) has not yet lost more than the limit of the horizon
            assert (r.source, r.stale, r.served_from) == ("ukgrid", True, "cache")
            assert r.fetched_at == T0 and "stale" in r.reason
        else:
            # beyond the staleness limit: the next source serves, and the reason says why
            assert (r.source, r.stale, r.served_from) == ("static", False, "live")
            assert r.current.g_per_kwh == 300.0
            assert "staleness limit" in r.reason
    # a failed primary rests (1 min doubling to 15 min), so it was not asked on every read
    asked = sum(1 for _, _, n in log if n)
    assert 0 < asked < len(log) * 0.6

    # a restart during the outage still finds the primary's cache on disk
    server.failure = None
    restarted = chain(server, tmp_path)
    server.failure = "503"
    r = restarted.read(T0 + timedelta(minutes=30))
    assert (r.source, r.stale, r.served_from) == ("ukgrid", True, "cache")

    # the outage ends; the monitor asks the primary again by itself within the longest rest. The fake still
    # answers with its 12:00 body at 16:00, which is old data, not a recovery: it fails over and says so
    # (tests/carbon/test_monitor_properties.py checks the return to a primary with current data)
    server.failure = None
    asked_at = None
    while t < T0 + timedelta(hours=5):
        t += STEP
        before = len(server.requests)
        r = monitor.read(t)
        if len(server.requests) > before:
            asked_at = t
            break
    assert asked_at is not None and asked_at - (T0 + timedelta(hours=4)) <= timedelta(minutes=20)
    assert r.source == "static" and r.failures[0].startswith("ukgrid: stale data: the newest value's interval ended")


def test_everything_down_and_cache_too_old_lists_every_reason(server, tmp_path: Path) -> None:
    specs = [SourceSpec("ukgrid", lambda: UkGridProvider(base_url=server.url, sleep=lambda s: None, timeout_s=0.3))]
    monitor = CarbonMonitor(specs, cache_dir=tmp_path, max_staleness=timedelta(minutes=30))
    monitor.read(T0)
    server.failure = "malformed"
    with pytest.raises(AllSourcesFailed, match="malformed JSON.*staleness limit"):
        monitor.read(T0 + timedelta(hours=2))


def test_rate_limit_retry_after_sets_the_rest(server, tmp_path: Path) -> None:
    monitor = chain(server, tmp_path)
    server.failure = "429"
    r = monitor.read(T0)
    assert r.source == "static" and "429" in r.failures[0]
    n = len(server.requests)
    r = monitor.read(T0 + timedelta(seconds=30))
    assert len(server.requests) == n and "resting until" in r.failures[0]


def test_refresh_after_serves_a_young_cache_without_asking(server, tmp_path: Path) -> None:
    monitor = chain(server, tmp_path, refresh_after=timedelta(minutes=15))
    monitor.read(T0)
    n = len(server.requests)
    r = monitor.read(T0 + timedelta(minutes=5))
    assert len(server.requests) == n and (r.served_from, r.stale) == ("cache", False)


def test_damaged_or_newer_cache_files_are_ignored(server, tmp_path: Path) -> None:
    (tmp_path / "ukgrid.json").write_text("{not json")
    assert chain(server, tmp_path).read(T0).served_from == "live"
    data = json.loads((tmp_path / "ukgrid.json").read_text())
    data["version"] = 99
    (tmp_path / "ukgrid.json").write_text(json.dumps(data))
    server.failure = "503"
    r = chain(server, tmp_path).read(T0 + STEP)
    assert r.source == "static"


class HistoryOnly(Provider):
    """A test double: real MISO history, no forecast (like a free Electricity Maps token)."""

    name = "history-only"

    def __init__(self, series: IntensitySeries) -> None:
        self.series = series
        self.zone = series.zone

    def current(self, *, now: datetime) -> IntensityPoint:
        p = self.series.at(now)
        assert p is not None
        return p

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        return self.series.window(start, end)

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        raise NoCoverage("forecasts need a paid plan", provider=self.name)


def test_builtin_forecaster_fills_in_when_the_provider_has_no_forecast() -> None:
    series = load_sample_trace()  # 2022-10-20 06:20 .. 2022-10-23 17:20, half-hourly
    now = datetime(2022, 10, 23, 6, 5, tzinfo=timezone.utc)
    monitor = CarbonMonitor([SourceSpec("miso", lambda: HistoryOnly(series))], forecast_horizon=timedelta(hours=12))
    r = monitor.read(now)
    assert r.has_forecast and r.forecast_by == "forecast:daily_profile"
    future = [p for p in r.series if p.start > now]
    assert len(future) == 12 and all(p.forecast and p.estimated and p.source == "forecast:daily_profile" for p in future)
    assert all(p.kind == "marginal" for p in future)  # the kind of the history it learned from
    assert any("built-in daily_profile forecast used" in n for n in r.notes)
    lo, hi = min(series.values()), max(series.values())
    assert all(lo * 0.8 <= p.g_per_kwh <= hi * 1.2 for p in future)


def test_forecaster_off_means_no_forecast_and_a_note() -> None:
    series = load_sample_trace()
    now = datetime(2022, 10, 23, 6, 5, tzinfo=timezone.utc)
    r = CarbonMonitor([SourceSpec("miso", lambda: HistoryOnly(series))], forecaster=None).read(now)
    assert not r.has_forecast and r.forecast_by == "" and "no forecast" in r.notes[0]


class CountingHistoryOnly(HistoryOnly):
    def __init__(self, series: IntensitySeries) -> None:
        super().__init__(series)
        self.forecast_calls = 0
        self.history_calls = 0

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        self.history_calls += 1
        return super().history(start=start, end=end)

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        self.forecast_calls += 1
        return super().forecast(now=now, horizon=horizon)


def test_a_provider_without_forecast_or_new_history_is_not_asked_on_every_read() -> None:
    provider = CountingHistoryOnly(load_sample_trace())
    monitor = CarbonMonitor([SourceSpec("miso", lambda: provider)])
    now = datetime(2022, 10, 22, 6, 5, tzinfo=timezone.utc)
    for i in range(6):  # every 10 min for an hour
        r = monitor.read(now + i * STEP)
        assert r.forecast_by == "forecast:daily_profile"
    assert provider.forecast_calls == 1 and provider.history_calls == 1
    monitor.read(now + timedelta(hours=1, minutes=1))
    assert provider.forecast_calls == 2
