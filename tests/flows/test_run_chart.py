"""One run's chart (flows/report/): a pure function of its report, drawn as SVG (the artifact) and PNG (`report --plot`)."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from flows.report.chart import MODE_COLOURS, run_chart
from flows.report.svg import HEIGHT, WIDTH, chart_svg, svg_data_uri

NOMINAL = datetime(2026, 3, 2, 1, 0, tzinfo=timezone.utc)
FIGURES = [{"mode": "speed", "power_w": 700.0, "speed": 1.0, "source": "model", "measured": False},
           {"mode": "efficiency", "power_w": 420.0, "speed": 0.75, "source": "model", "measured": False}]


def _iso(t: datetime) -> str:
    return t.isoformat()


def deferred_report(delay_h: float = 2.0, run_id: str = "20260302T010000-abc123") -> dict[str, Any]:
    """A planner run deferred ``delay_h`` from its cron time: speed, then efficiency, deadline at 08:00."""
    start = NOMINAL + timedelta(hours=delay_h)
    mid, end = start + timedelta(hours=1), start + timedelta(hours=2, minutes=20)
    points = [[_iso(NOMINAL + timedelta(hours=h - 1)), 3600.0, 300.0 + 40 * abs(h - 4), h >= 2] for h in range(10)]
    spans = [{"mode": "speed", "start": _iso(start), "end": _iso(mid), "energy_j": 700 * 3600, "g_per_kwh": 220.0,
              "carbon_g": 0.7 * 220, "reason": "clean hours", "settings": "power limit 700 W"},
             {"mode": "efficiency", "start": _iso(mid), "end": _iso(end), "energy_j": 420 * 4800, "g_per_kwh": 260.0,
              "carbon_g": 420 * 4800 / 3.6e6 * 260, "reason": "dirtier", "settings": "power limit 420 W"}]
    plan = {"start": _iso(start), "finish": _iso(end),
            "segments": [{"mode": "speed", "start": _iso(start), "end": _iso(mid)},
                         {"mode": "efficiency", "start": _iso(mid), "end": _iso(end)}]}
    return {"run_id": run_id, "job": "nightly", "status": "completed", "policy": "p.yaml", "backend": "nvidia",
            "measured": True, "energy_label": "measured", "nominal_start": _iso(NOMINAL), "started_at": _iso(start),
            "ended_at": _iso(end), "deferred_s": delay_h * 3600, "duration_s": (end - start).total_seconds(),
            "energy_j": sum(s["energy_j"] for s in spans), "carbon_g": sum(s["carbon_g"] for s in spans),
            "intensity_g_per_kwh": 240.0, "intensity_kind": "average", "intensity_source": "trace:de.csv",
            "decision_reason": "start at 03:00: cleaner", "modes": spans, "warnings": [], "error": "",
            "windows": [{"work_s": 3600 + 3600}],
            "extra": {"mode_figures": FIGURES, "reference_mode": "speed", "deadline": _iso(NOMINAL + timedelta(hours=7)),
                      "plan": plan, "intensity_at_start": {"points": points}}}


def test_the_chart_shows_intensity_start_against_cron_modes_and_deadline() -> None:
    report = deferred_report()
    chart = run_chart(report)
    kinds = {m.kind: m for m in chart.markers}
    assert set(kinds) == {"cron", "start", "deadline"}  # the planned start is the real one: not drawn twice
    assert kinds["cron"].at < kinds["start"].at < kinds["deadline"].at <= chart.x_max
    assert (kinds["start"].at - kinds["cron"].at) == pytest.approx(7200)
    assert kinds["cron"].label == "nominal 01:00" and kinds["deadline"].label == "deadline 08:00"
    assert [s.kind for s in chart.steps] == ["history", "forecast", "recorded"]
    assert [p[2] for p in chart.steps[2].pieces] == [220.0, 260.0]
    lanes = {(b.lane, b.label) for b in chart.bands}
    assert {("planned", "speed"), ("planned", "efficiency"), ("ran", "speed"), ("ran", "efficiency")} <= lanes
    baseline = next(b for b in chart.bands if b.lane == "baseline")
    assert baseline.start == pytest.approx(kinds["cron"].at) and baseline.end - baseline.start == pytest.approx(7200)
    assert chart.y_max >= 460 and chart.y_ticks[0][0] == 0 and chart.y_ticks[-1][0] == chart.y_max
    assert chart.subtitle.startswith("saved ") and "in speed mode" in chart.subtitle
    assert all(0 <= x <= chart.x_max for x, _ in chart.x_ticks) and len(chart.x_ticks) >= 3


def test_labels_of_close_moments_do_not_overlap() -> None:
    rows = {m.kind: m.row for m in run_chart(deferred_report(delay_h=0.0005)).markers}  # started 2 s after the cron time
    assert rows["cron"] != rows["start"]


def test_a_planned_start_apart_from_the_real_one_is_marked() -> None:
    report = deferred_report()
    report["extra"]["plan"]["start"] = _iso(NOMINAL + timedelta(hours=3))
    assert "planned" in {m.kind for m in run_chart(report).markers}


@settings(max_examples=40, deadline=None)
@given(delay_h=st.floats(-1, 5), seconds=st.floats(1, 30000))
def test_everything_lies_on_the_chart(delay_h: float, seconds: float) -> None:
    report = deferred_report(delay_h)
    start = datetime.fromisoformat(report["started_at"])
    report["modes"] = report["modes"][:1]
    report["modes"][0]["end"] = _iso(start + timedelta(seconds=seconds))
    report["ended_at"] = report["modes"][0]["end"]
    chart = run_chart(report)
    assert all(0 <= b.start <= b.end <= chart.x_max for b in chart.bands)
    assert all(0 <= m.at <= chart.x_max for m in chart.markers)
    assert all(0 <= a <= b <= chart.x_max and g <= chart.y_max for s in chart.steps for a, b, g in s.pieces)


def test_a_clean_grid_at_0_g_per_kwh_still_draws() -> None:
    report = deferred_report()
    for span in report["modes"]:
        span["g_per_kwh"] = 0.0
    report["extra"]["intensity_at_start"]["points"] = [[p[0], p[1], 0.0, p[3]] for p in report["extra"]["intensity_at_start"]["points"]]
    chart = run_chart(report)
    assert chart.y_max > 0 and ET.fromstring(chart_svg(chart)) is not None


def test_a_report_from_before_the_chart_still_draws() -> None:
    report = deferred_report()
    for key in ("intensity_at_start", "plan", "deadline", "reference_mode"):
        report["extra"].pop(key)
    chart = run_chart(report)
    assert [s.kind for s in chart.steps] == ["recorded"] and chart.subtitle.startswith("saving unknown")


def test_the_svg_is_a_standalone_image_with_what_the_chart_says() -> None:
    chart = run_chart(deferred_report())
    svg = chart_svg(chart)
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg") and (root.get("width"), root.get("height")) == (str(WIDTH), str(HEIGHT))
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert chart.title in texts and "nominal 01:00" in texts and "deadline 08:00" in texts
    fills = {r.get("fill") for r in root.iter("{http://www.w3.org/2000/svg}rect")}
    assert {MODE_COLOURS["speed"], MODE_COLOURS["efficiency"]} <= fills
    assert base64.b64decode(svg_data_uri(svg).split(",", 1)[1]).decode() == svg


def test_the_png_is_at_least_400_by_250(tmp_path: Path) -> None:
    from PIL import Image

    from flows.report.png import write_png

    out = write_png(run_chart(deferred_report()), tmp_path / "run.png")
    with Image.open(out) as image:
        assert image.format == "PNG" and image.size[0] >= 400 and image.size[1] >= 250


def test_report_command_plots_the_latest_run_and_finds_one_by_its_beginning(tmp_path: Path) -> None:
    from flows.cli import app
    from scheduler.store.ledger import Ledger

    runner = CliRunner()
    assert runner.invoke(app, ["report"]).exit_code == 2  # nothing recorded yet: one line, exit 2
    with Ledger() as ledger:
        ledger.record(deferred_report(run_id="20260301T010000-old111"))
        ledger.record({**deferred_report(run_id="20260302T010000-new222"), "started_at": _iso(NOMINAL + timedelta(days=1))})
    human = runner.invoke(app, ["report"])
    assert human.exit_code == 0 and "20260302T010000-new222" in human.output
    assert "saving     saved" in human.output and "nominal start (2026-03-02 01:00 UTC) in speed mode" in human.output
    assert "deferred 2 h 00 min from the nominal start 01:00 UTC" in human.output
    png, svg = tmp_path / "run.png", tmp_path / "run.svg"
    assert runner.invoke(app, ["report", "--plot", str(png)]).exit_code == 0 and png.stat().st_size > 10_000
    picked = runner.invoke(app, ["report", "20260301", "--plot", str(svg)])
    assert picked.exit_code == 0 and "old111" in svg.read_text()
    ambiguous = runner.invoke(app, ["report", "2026030"])
    assert ambiguous.exit_code == 2 and "is the beginning of 2 runs" in ambiguous.output
    assert json.loads(runner.invoke(app, ["report", "--json"]).output)["saving"]["saved_g"] > 0
    assert runner.invoke(app, ["report", "nope"]).exit_code == 2
    assert runner.invoke(app, ["report", "--plot", str(tmp_path / "run.jpg")]).exit_code == 2
    rows = json.loads(runner.invoke(app, ["runs", "--json"]).output)
    assert all(r["saving"]["saved_pct"] > 0 for r in rows)
    table = runner.invoke(app, ["runs"]).output.splitlines()
    assert "saving" in table[0] and table[1].split()[6].endswith("%")
