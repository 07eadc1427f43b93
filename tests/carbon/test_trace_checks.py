"""Traces checked at read time, the same for the simulator and the trace provider; zones pick their trace."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from carbon.errors import BadTrace, NoCoverage, UnknownZone
from carbon.providers.trace import TRACES_ENV, TraceProvider, find_zone_trace, zone_traces
from carbon.trace_file import MAX_GAP, TraceCheck, parse_trace_text, read_trace

UTC = timezone.utc
T0 = datetime(2020, 1, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


def _rows(hours: int, *, skip: range = range(0), step_min: int = 30) -> list[str]:
    out = []
    for k in range(hours * 60 // step_min):
        if k in skip:
            continue
        t = T0 + timedelta(minutes=k * step_min)
        out.append(f"{t:%Y-%m-%d %H:%M},{200 + 80 * ((k // 2) % 24 < 12)}")
    return out


def _csv(path: Path, rows: list[str]) -> Path:
    path.write_text("time,g\n" + "\n".join(rows) + "\n")
    return path


def test_an_implausible_value_is_refused_with_its_line() -> None:
    rows = _rows(3)
    rows[2] = rows[2].split(",")[0] + ",1e308"
    with pytest.raises(BadTrace, match=r"^t.csv:4: intensity 1e308 g/kWh is implausible"):
        parse_trace_text("time,g\n" + "\n".join(rows), where="t.csv")


def test_a_long_gap_is_kept_as_a_gap_and_counted() -> None:
    check = TraceCheck()
    hole = range(10 * 48, 10 * 48 + 400)  # 8.3 days of half-hours missing
    s = parse_trace_text("time,g\n" + "\n".join(_rows(41 * 24, skip=hole)), where="t.csv", check=check)
    assert len(check.gaps) == 1
    a, b = check.gaps[0]
    assert a == T0 + timedelta(days=10) and b - a == timedelta(hours=200)
    assert s.at(a + timedelta(days=1), max_gap=timedelta(0)) is None  # nothing carried across it
    assert check.counts["gaps"] == 1 and "200.0 h" in check.warnings[0]
    # a short hole (here one missing half-hour) is within MAX_GAP and carried forward, as before
    short = TraceCheck()
    parse_trace_text("time,g\n" + "\n".join(_rows(24, skip=range(5, 6))), check=short)
    assert MAX_GAP >= timedelta(minutes=30) and not short.gaps


def test_mixed_offsets_duplicates_and_rows_out_of_order_are_warnings_with_their_lines() -> None:
    rows = _rows(6)
    t, v = rows[4].split(",")
    rows[4] = t.replace(" ", "T") + "+02:00," + v  # another UTC offset (and so a time already given, earlier)
    rows.insert(9, rows[2])  # a row given again, out of order
    check = TraceCheck()
    s = parse_trace_text("time,g\n" + "\n".join(rows), where="t.csv", check=check)
    text = "\n".join(check.warnings)
    assert "t.csv:6: UTC offset +02:00 differs from line 2's naive (UTC)" in text
    assert "t.csv:6:" in text and "rows out of order" in text
    assert "t.csv:11:" in text and "(first at line 4); the later value is kept" in text
    assert check.counts == {"with another UTC offset": 1, "out of order": 2, "given twice": 2}
    assert [p.start for p in s] == sorted(p.start for p in s)


def test_the_simulator_skips_the_nights_a_gap_touches_and_says_how_many(tmp_path: Path) -> None:
    from flows.cli import app

    hole = range(10 * 48, 10 * 48 + 400)
    trace = _csv(tmp_path / "holed.csv", _rows(41 * 24, skip=hole))
    out = CliRunner().invoke(app, ["simulate", str(REPO / "examples" / "nightly.yaml"), "--trace", str(trace), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["trace_gaps"]["gaps"] == 1 and data["trace_gaps"]["nights_skipped"] == 9
    assert data["jobs"] == 40 - 9 and data["trace_check"]["gaps"] == 1
    human = CliRunner().invoke(app, ["simulate", str(REPO / "examples" / "nightly.yaml"), "--trace", str(trace)])
    assert "the 9 night(s) they touch were skipped" in human.stdout


def test_the_simulator_refuses_an_implausible_value_with_its_line(tmp_path: Path) -> None:
    from flows.cli import app

    rows = _rows(48)
    rows[40] = rows[40].split(",")[0] + ",1e308"
    out = CliRunner().invoke(app, ["simulate", str(REPO / "examples" / "nightly.yaml"), "--trace",
                                   str(_csv(tmp_path / "t.csv", rows))])
    assert out.exit_code == 2 and "t.csv:42: intensity 1e308" in out.output and "Traceback" not in out.output


def test_the_provider_serves_nothing_inside_a_gap(tmp_path: Path) -> None:
    hole = range(10 * 48, 10 * 48 + 400)
    p = TraceProvider(_csv(tmp_path / "holed.csv", _rows(41 * 24, skip=hole)), replay="aligned")
    assert len(p.check.gaps) == 1
    with pytest.raises(NoCoverage):
        p.current(now=T0 + timedelta(days=12))
    assert p.current(now=T0 + timedelta(days=2)).g_per_kwh > 0


def test_a_zone_picks_its_trace_from_the_folders_then_the_package(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(TRACES_ENV, str(tmp_path))
    _csv(tmp_path / "DE.csv", _rows(72))
    assert {"ERCO", "ISNE", "PJM", "MISO_MASON_CITY", "DE"} <= set(zone_traces())
    de = TraceProvider(zone="DE", replay="aligned")
    assert de.zone == "DE" and de.current(now=T0 + timedelta(hours=1)).g_per_kwh in (200.0, 280.0)
    assert TraceProvider(zone="pjm").series.start == datetime(2021, 7, 1, tzinfo=UTC)  # shipped, case-insensitive
    with pytest.raises(UnknownZone, match=r"no trace for zone 'XX' \(zones with a trace: DE, ERCO, ISNE, MISO_MASON_CITY, PJM\)"):
        find_zone_trace("XX")


def test_policy_check_refuses_a_zone_without_a_trace_and_names_the_zones(tmp_path: Path, monkeypatch) -> None:
    from flows.cli import app

    monkeypatch.setenv(TRACES_ENV, str(tmp_path))
    policy = tmp_path / "p.yaml"
    policy.write_text("schema_version: 1\ncarbon: {provider: trace, zone: XX}\n"
                      "modes: {speed: {}, efficiency: {power_limit_fraction: 0.7}}\n"
                      "job: {name: j, command: [python, -c, 'pass'], expected_duration_s: 60}\nbackend: {name: simulated}\n")
    out = CliRunner().invoke(app, ["policy", "check", str(policy)])
    assert out.exit_code == 2 and "carbon.zone" in out.output and "zones with a trace: ERCO, ISNE" in out.output
    _csv(tmp_path / "XX.csv", _rows(48))
    assert CliRunner().invoke(app, ["policy", "check", str(policy)]).exit_code == 0
