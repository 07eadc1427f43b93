"""Trace files and the trace/static providers: irregular, gappy and malformed data."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from carbon.errors import BadTrace, NoCoverage, UnknownZone
from carbon.providers import get_provider
from carbon.providers.static import StaticProvider
from carbon.providers.trace import TraceProvider, load_sample_trace
from carbon.trace_file import parse_trace_text, read_trace

UTC = timezone.utc


def test_irregular_spacing_each_point_lasts_until_the_next() -> None:
    s = parse_trace_text("Time,ci\n2020-01-01 00:00,100\n2020-01-01 00:30,200\n2020-01-01 00:45,300\n2020-01-01 01:45,400\n")
    assert [p.duration for p in s] [:3] == [timedelta(minutes=30), timedelta(minutes=15), timedelta(hours=1)]
    assert s.at(datetime(2020, 1, 1, 0, 40, tzinfo=UTC)).g_per_kwh == 200
    assert all(p.start.tzinfo is not None for p in s)


def test_gaps_are_kept_as_gaps_and_missing_values_skipped() -> None:
    text = "Time,ci\n" + "\n".join(f"2020-01-01 {h:02d}:00,{h * 10 + 1}" for h in range(4)) + "\n2020-01-02 00:00,999\n2020-01-02 01:00,nan\n2020-01-02 02:00,50\n"
    s = parse_trace_text(text)
    gap_point = s.at(datetime(2020, 1, 1, 3, 0, tzinfo=UTC))
    assert gap_point.duration == timedelta(hours=1)  # not stretched over the 21 h gap
    assert s.at(datetime(2020, 1, 1, 12, 0, tzinfo=UTC), max_gap=timedelta(hours=3)) is None
    assert [p.g_per_kwh for p in s][-2:] == [999, 50]


def test_mean_over_weights_by_time() -> None:
    s = parse_trace_text("t,v\n2020-01-01T00:00:00Z,100\n2020-01-01T01:00:00Z,300\n2020-01-01T03:00:00Z,300\n")
    start = datetime(2020, 1, 1, 0, 0, tzinfo=UTC)
    assert s.mean_over(start, start + timedelta(hours=2)) == pytest.approx(200)
    assert s.mean_over(start + timedelta(minutes=30), start + timedelta(hours=1, minutes=30)) == pytest.approx(200)


def test_iso_offsets_and_duplicates() -> None:
    s = parse_trace_text("ts,v\n2020-01-01T01:00:00+01:00,5\n2020-01-01T00:00:00Z,7\n2020-01-01 01:00,9\n")
    assert [p.g_per_kwh for p in s] == [7, 9]  # the duplicate 00:00 UTC row is replaced by the later one


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty trace"),
        ("t,v\n", "no rows"),
        ("t,v\nyesterday,5\n", "first column"),
        ("t,v\n2020-01-01 00:00,5\n2020-13-01 00:00,6\n", ":3: cannot parse timestamp"),
        ("t,v\n2020-01-01 00:00,5\n2020-01-01 01:00,lots\n", ":3: intensity 'lots' is not a number"),
        ("t,v\n2020-01-01 00:00,-5\n", "non-negative"),
        ("t,a,b\n2020-01-01 00:00,1,2\n", "several numeric columns"),
    ],
)
def test_bad_traces_name_the_line(text: str, message: str) -> None:
    with pytest.raises(BadTrace, match=message):
        parse_trace_text(text, where="x.csv")


def test_column_selection(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("location,timestamp,duration,value,hist\nX,2022-10-20T06:20:00+00:00,30,646.8,619.2\n")
    assert read_trace(f, column="hist").points[0].g_per_kwh == pytest.approx(619.2)
    with pytest.raises(BadTrace, match="no column named 'moer'"):
        read_trace(f, column="moer")
    with pytest.raises(BadTrace, match="not found"):
        read_trace(tmp_path / "missing.csv")


def test_real_gappy_german_trace(shared_data: Path) -> None:
    s = read_trace(shared_data / "carbon" / "lets-wait-awhile" / "ger_ci.csv")
    assert len(s) > 37000
    assert 100 < sum(s.values()) / len(s) < 500


def test_sample_trace_is_packaged_and_marginal() -> None:
    s = load_sample_trace()
    assert len(s) == 167 and s.kind == "marginal"


def test_trace_provider_loops_onto_any_date() -> None:
    p = TraceProvider()
    now = datetime(2026, 11, 30, 14, 30, tzinfo=UTC)
    cur = p.current(now=now)
    assert cur.start <= now < cur.end
    fc = p.forecast(now=now, horizon=timedelta(hours=48))
    assert fc.start <= now and fc.end >= now + timedelta(hours=47)
    assert all(q.forecast for q in fc)
    # same time of day on another date gives the same daily-shape value when inside the trace days
    assert 500 < cur.g_per_kwh < 700


def test_trace_provider_aligned_mode_refuses_outside_the_trace() -> None:
    p = TraceProvider(replay="aligned")
    with pytest.raises(NoCoverage):
        p.current(now=datetime(2030, 1, 1, tzinfo=UTC))


def test_static_provider_country_and_fixed() -> None:
    now = datetime(2026, 1, 1, 12, 5, tzinfo=UTC)
    assert StaticProvider(country="DEU").current(now=now).g_per_kwh == pytest.approx(380.95)
    assert StaticProvider(g_per_kwh=42).current(now=now).g_per_kwh == 42
    assert StaticProvider().current(now=now).g_per_kwh == 475
    assert len(StaticProvider(g_per_kwh=1).forecast(now=now, horizon=timedelta(hours=3))) == 4
    with pytest.raises(UnknownZone):
        StaticProvider(country="ATLANTIS")


def test_registry_builds_by_name_and_rejects_unknown() -> None:
    assert get_provider("static", g_per_kwh=5).current(now=datetime(2026, 1, 1, tzinfo=UTC)).g_per_kwh == 5
    with pytest.raises(LookupError, match="unknown carbon provider"):
        get_provider("nope")
