"""The forecast archive: bounded, owner-only, causal; and the monitor that fills it and fuses on it."""

from __future__ import annotations

import json
import math
import stat
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.forecasts.archive import ForecastArchive
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.base import Provider
from carbon.series import IntensityPoint, IntensitySeries

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _wave(t: datetime) -> float:
    return 300.0 + 100.0 * math.sin(2 * math.pi * t.hour / 24)


def _points(start: datetime, n: int, f=_wave, *, forecast: bool = False) -> list[IntensityPoint]:
    return [IntensityPoint(start=start + k * H, duration=H, g_per_kwh=f(start + k * H), forecast=forecast, source="t")
            for k in range(n)]


@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(min_value=1, max_value=40), issues=st.lists(st.integers(min_value=1, max_value=12), max_size=8))
def test_the_archive_never_holds_more_than_its_bound_and_drops_the_oldest(max_rows: int, issues: list[int]) -> None:
    with ForecastArchive(":memory:", max_rows=max_rows) as a:
        for d, n in enumerate(issues):
            a.record(provider="p", zone="Z", issued_at=T0 + d * H, points=_points(T0 + d * H, n, forecast=True))
            a.observe(zone="Z", points=_points(T0 + d * H, n))
            held = a.rows()
            assert held[0] <= max_rows and held[1] <= max_rows
        if issues:
            newest = a.joined()[-1].issued_at
            assert newest == T0 + (len(issues) - 1) * H  # trimming kept the newest issue


def test_the_file_is_owner_only_and_joins_what_was_seen(tmp_path) -> None:
    path = tmp_path / "home" / "forecasts.sqlite"
    with ForecastArchive(path) as a:
        a.record(provider="p", zone="Z", issued_at=T0, points=_points(T0 + H, 3, lambda t: 100.0, forecast=True))
        a.observe(zone="Z", points=_points(T0, 2, lambda t: 90.0))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with ForecastArchive(path) as again:
        rows = again.joined(provider="p")
    assert [(r.lead_s, r.forecast_g_per_kwh, r.observed_g_per_kwh) for r in rows] == [
        (3600.0, 100.0, 90.0), (7200.0, 100.0, None), (10800.0, 100.0, None)]


@settings(max_examples=25, deadline=None)
@given(issue_h=st.lists(st.integers(min_value=0, max_value=24 * 6), min_size=1, max_size=12),
       now_h=st.integers(min_value=24, max_value=24 * 6))
def test_nothing_issued_or_seen_after_a_decision_reaches_its_record(issue_h: list[int], now_h: int) -> None:
    now = T0 + now_h * H
    with ForecastArchive(":memory:") as a:
        for h in issue_h:  # each issue says its own issue hour, so a leak shows as a value > now
            a.record(provider="p", zone="Z", issued_at=T0 + h * H, points=_points(T0 + h * H, 30, lambda t, h=h: float(h),
                                                                                    forecast=True))
        a.observe(zone="Z", points=_points(T0, 24 * 7, lambda t: (t - T0) / H))
        for hc in a.hindcasts(providers=["p"], zone="Z", now=now, origin=now, step=H, n=12, days=5):
            said = hc.inputs["p"]
            assert np.all(np.isnan(said) | (said <= now_h))
            seen = hc.observed[~np.isnan(hc.observed)]
            assert np.all(seen <= now_h)  # observed index (hours since T0) never after now
        cur = a.said(provider="p", zone="Z", issued_by=now, at=now, step=H, n=12)
        assert np.all(np.isnan(cur) | (cur <= now_h))


class Forecasting(Provider):
    """A provider whose forecast runs 50 g high all day: the fusion should learn to take it off."""

    name = "fc"
    zone = "Z"

    def current(self, *, now: datetime) -> IntensityPoint:
        return IntensityPoint(start=now.replace(minute=0), duration=H, g_per_kwh=_wave(now.replace(minute=0)), source="fc")

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        first = start.replace(minute=0, second=0, microsecond=0)
        return IntensitySeries.of(_points(first, int((end - first) / H)), zone="Z")

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        first = now.replace(minute=0, second=0, microsecond=0) + H
        return IntensitySeries.of(_points(first, int(horizon / H), lambda t: _wave(t) + 50.0, forecast=True), zone="Z")


def test_the_monitor_archives_every_forecast_and_fuses_on_the_record() -> None:
    archive = ForecastArchive(":memory:")
    monitor = CarbonMonitor([SourceSpec("fc", Forecasting)], archive=archive, forecast_horizon=timedelta(hours=12),
                            learn_window=timedelta(days=3))
    for d in range(10):  # one read a day at 21:00: the record the fusion learns from
        r = monitor.read(T0 + timedelta(days=d, hours=21))
    providers = {p for p, _ in archive.providers()}
    assert providers == {"fc", "forecast:daily_profile", "forecast:fused"}
    assert r.forecast_by == "forecast:fused"
    assert any(n.startswith("forecast:fused forecast (") for n in r.notes)
    ahead = [p for p in r.series if p.forecast]
    err = np.mean([abs(p.g_per_kwh - _wave(p.start)) for p in ahead])
    assert err < 5.0  # the provider's 50 g bias (or the history forecast) learned; raw it would be 50
    monitor.close()


M5 = timedelta(minutes=5)


def _dip(t: datetime) -> float:
    """Hourly wave with a 15-min dip at :20 of every hour (what an hourly grid cannot carry)."""
    return _wave(t) - (200.0 if 20 <= t.minute < 35 else 0.0)


def _five_min(first: datetime, n: int, *, forecast: bool = False) -> IntensitySeries:
    return IntensitySeries.of([IntensityPoint(start=first + k * M5, duration=M5, g_per_kwh=_dip(first + k * M5),
                                              forecast=forecast, source="fc") for k in range(n)], zone="Z")


class FiveMinute(Forecasting):
    """A provider that forecasts in 5-min steps (WattTime's resolution), right to the minute."""

    def current(self, *, now: datetime) -> IntensityPoint:
        return _five_min(now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0), 1).points[0]

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        first = start.replace(minute=0, second=0, microsecond=0)
        return _five_min(first, int((end - first) / M5))

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        first = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0) + M5
        return _five_min(first, int(horizon / M5), forecast=True)


def test_a_five_minute_forecast_keeps_its_resolution_through_the_fusion() -> None:
    # the fusion learns on hours; its output must not turn a 5-min forecast into one value an hour,
    # nor leave the rest of the current hour without a forecast
    archive = ForecastArchive(":memory:")
    monitor = CarbonMonitor([SourceSpec("fc", FiveMinute)], archive=archive,
                            forecast_horizon=timedelta(hours=6), learn_window=timedelta(days=2))
    for d in range(9):
        r = monitor.read(T0 + timedelta(days=d, hours=21, minutes=7))
    # the archive keeps what the hourly record reads: the first point of each hour of each input
    assert archive.rows()[0] <= 9 * 3 * 7
    now = T0 + timedelta(days=8, hours=21, minutes=7)
    assert r.forecast_by == "forecast:fused"
    ahead = [p for p in r.series if p.forecast]
    assert {p.duration for p in ahead} == {M5}
    assert ahead[0].start == now.replace(minute=10)  # the next 5-min step, not the next full hour
    assert ahead[-1].end >= now + timedelta(hours=5)
    # a perfect provider: the fused forecast is its own, dips where they are
    assert max(abs(p.g_per_kwh - _dip(p.start)) for p in ahead) < 1e-6
    monitor.close()


def test_an_hourly_forecast_stays_hourly() -> None:
    monitor = CarbonMonitor([SourceSpec("fc", Forecasting)], archive=ForecastArchive(":memory:"),
                            forecast_horizon=timedelta(hours=6))
    r = monitor.read(T0 + timedelta(hours=21, minutes=7))
    ahead = [p for p in r.series if p.forecast]
    assert ahead and {p.duration for p in ahead} == {H} and ahead[0].start == T0 + timedelta(hours=22)
    monitor.close()


def test_a_step_holds_the_first_point_of_the_newest_issue_in_it() -> None:
    with ForecastArchive(":memory:") as a:
        pts = [IntensityPoint(start=T0 + k * M5, duration=M5, g_per_kwh=float(k), forecast=True) for k in range(24)]
        a.record(provider="p", zone="Z", issued_at=T0, points=pts)
        assert list(a.said(provider="p", zone="Z", issued_by=T0, at=T0, step=H, n=2)) == [0.0, 12.0]
        a.record(provider="p", zone="Z", issued_at=T0 + M5, points=[replace(p, g_per_kwh=p.g_per_kwh + 100) for p in pts[3:]])
        assert list(a.said(provider="p", zone="Z", issued_by=T0 + M5, at=T0, step=H, n=2)) == [103.0, 112.0]


def test_the_forecasts_command_scores_what_the_monitor_archived(capsys) -> None:
    from carbon.forecasts.scorecard import scorecard
    from carbon.forecasts.skill import StartWindow
    from flows.cli import app
    from flows.cli._errors import run_guarded
    from flows.sources import forecast_archive_path

    monitor = CarbonMonitor([SourceSpec("fc", Forecasting)], archive=ForecastArchive(forecast_archive_path()),
                            forecast_horizon=timedelta(hours=12), learn_window=timedelta(days=3))
    for d in range(6):
        monitor.read(T0 + timedelta(days=d, hours=21))
    monitor.close()
    with ForecastArchive(forecast_archive_path()) as a:  # scored as of the last read's next morning
        card = scorecard(a, provider="fc", zone="Z", now=T0 + timedelta(days=6, hours=9), origin_hour=21,
                         window=StartWindow(reference=4, starts=tuple(range(9)), length=3))
    assert card.nights == 5 and card.start_gain_share == 1.0  # a steady bias does not move the best start
    assert card.rank_correlation == 1.0
    assert all(abs(s.bias_g_per_kwh - 50.0) < 1e-9 for s in card.leads)
    assert run_guarded(app, ["forecasts", "--provider", "fc", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["provider"] for p in out["providers"]] == ["fc"] and out["providers"][0]["leads"][0]["lead_h"] == 1
    assert run_guarded(app, ["forecasts"]) == 0
    assert "forecast:fused [Z]" in capsys.readouterr().out


class Backwards(Forecasting):
    """A forecast with the night upside down: clean where it is dirty."""

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        first = now.replace(minute=0, second=0, microsecond=0) + H
        return IntensitySeries.of(_points(first, int(horizon / H), lambda t: 600.0 - _wave(t), forecast=True), zone="Z")


def test_the_gate_closes_on_a_record_without_gain_and_stays_open_on_a_good_one() -> None:
    """The product's gate on the archive's record: a forecast with the night upside down is never planned on."""
    from scheduler.loop.archive_record import archive_records
    from scheduler.loop.gate import NightPlanner, choose_forecast
    from scheduler.planner import ModeFigures
    from scheduler.policy.types import Policy
    from scheduler.run_spec import resolve_run

    policy = Policy.model_validate({
        "carbon": {"provider": "trace"}, "modes": {"speed": {}, "efficiency": {"power_limit_fraction": 0.7}},
        "rules": {"kind": "plan", "slot_s": 3600, "interval_s": 3600, "min_dwell_s": 3600, "deadline_margin_s": 0},
        "job": {"name": "n", "command": ["true"], "expected_duration_s": 3 * 3600, "cron": "0 10 * * *",
                "earliest_start_s": -4 * 3600, "deadline_s": 7 * 3600},
        "backend": {"name": "simulated"}})
    planner = NightPlanner(resolve_run(policy), [ModeFigures("speed", 300.0, 1.0), ModeFigures("efficiency", 210.0, 0.8)])
    nominal = T0 + timedelta(days=9, hours=10)
    for provider, trusted in ((Backwards, None), (Forecasting, "fc")):
        archive = ForecastArchive(":memory:")
        monitor = CarbonMonitor([SourceSpec("fc", provider)], archive=archive, forecast_horizon=timedelta(hours=12),
                                learn_window=timedelta(days=2), history_window=timedelta(hours=1), forecaster=None)
        for h in range(0, 24 * 9, 3):  # reads every 3 h, each fetching the history since the last
            monitor.read(T0 + timedelta(hours=h))
        records = archive_records(archive, planner, labels=["fc"], zone="Z", nominal=nominal, now=nominal)
        assert records[0].nights >= 7
        choice = choose_forecast(records)
        assert choice.label == trusted, choice.reason
        monitor.close()


def _open_when_released(path: str, barrier, errors) -> None:
    barrier.wait()
    try:
        ForecastArchive(path).close()
    except Exception as exc:  # reported to the test, which asserts there were none
        errors.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_fresh_archive_at_once_all_succeed(tmp_path) -> None:
    """Concurrent `gridshift submit`s on a new home: each opens the archive as it is being created.

    Before the version row was written in one statement, 3 of 24 concurrent submits failed with
    ``UNIQUE constraint failed: meta.key`` (both read no row, both inserted).
    """
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    for attempt in range(6):
        path = str(tmp_path / f"fresh-{attempt}" / "forecasts.sqlite")
        barrier = ctx.Barrier(6)
        procs = [ctx.Process(target=_open_when_released, args=(path, barrier, errors)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        assert all(p.exitcode == 0 for p in procs)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []
    with ForecastArchive(tmp_path / "fresh-0" / "forecasts.sqlite") as archive:
        assert archive.rows() == (0, 0)
