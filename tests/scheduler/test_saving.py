"""A run's saving against the cron time in the reference mode (scheduler/saving.py): a pure function of its report."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.saving import grams, mean_intensity, run_saving, two_parts, with_saving

T0 = datetime(2026, 3, 2, 1, 0, tzinfo=timezone.utc)
FIGURES = [{"mode": "speed", "power_w": 700.0, "speed": 1.0, "source": "model", "measured": False},
           {"mode": "efficiency", "power_w": 420.0, "speed": 0.75, "source": "model", "measured": False}]


def _span(mode: str, start: datetime, seconds: float, energy_j: float, g: float) -> dict[str, Any]:
    return {"mode": mode, "start": start.isoformat(), "end": (start + timedelta(seconds=seconds)).isoformat(),
            "energy_j": energy_j, "g_per_kwh": g, "carbon_g": energy_j / 3.6e6 * g}


def _report(spans: list[dict[str, Any]], *, nominal: datetime = T0, points: list[list[Any]] | None = None,
            work_s: float | None = None, reference: str | None = "speed", measured: bool = True) -> dict[str, Any]:
    extra: dict[str, Any] = {"mode_figures": FIGURES}
    if reference is not None:
        extra["reference_mode"] = reference
    if points is not None:
        extra["intensity_at_start"] = {"points": points}
    return {"nominal_start": nominal.isoformat(), "modes": spans, "measured": measured,
            "carbon_g": sum(s["carbon_g"] for s in spans), "extra": extra,
            "windows": [] if work_s is None else [{"work_s": work_s}]}


def test_an_efficiency_run_at_the_cron_time_saves_the_modes_energy_difference() -> None:
    # 3600 s of work in efficiency: 4800 s at 420 W; in speed the same work is 3600 s at 700 W
    report = _report([_span("efficiency", T0, 4800, 420 * 4800, 400.0)], work_s=3600,
                     points=[[T0.isoformat(), 7200, 400.0, True]])
    s = run_saving(report)
    assert s.baseline_energy_j == pytest.approx(700 * 3600)
    assert s.baseline_end == T0 + timedelta(seconds=3600)
    assert s.saved_pct == pytest.approx(100 * (1 - 420 / 0.75 / 700))
    assert s.saved_g == pytest.approx(s.baseline_g - report["carbon_g"])
    assert s.baseline == "the nominal start (2026-03-02 01:00 UTC) in speed mode"
    assert "baseline: modelled" in s.label and "run: measured energy" in s.label


def test_a_deferred_run_is_compared_with_the_intensity_recorded_for_the_cron_hours() -> None:
    start = T0 + timedelta(hours=2)
    points = [[T0.isoformat(), 7200, 500.0, False], [start.isoformat(), 7200, 200.0, True]]
    report = _report([_span("speed", start, 3600, 700 * 3600, 200.0)], work_s=3600, points=points)
    s = run_saving(report)
    assert s.baseline_g == pytest.approx(700 * 3600 / 3.6e6 * 500)
    assert s.saved_pct == pytest.approx(60.0)
    assert s.phrase().startswith("210 g (60.0 %) less than the nominal start") and s.phrase().endswith("(350 g)")


def test_the_spans_own_intensity_wins_where_the_baseline_overlaps_them() -> None:
    # the series read at the start said 300 for the hour; the span recorded 310: the baseline uses 310 too
    report = _report([_span("speed", T0, 3600, 700 * 3600, 310.0)], work_s=3600,
                     points=[[T0.isoformat(), 3600, 300.0, True]])
    s = run_saving(report)
    assert s.saved_g == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(seconds=st.floats(1, 20000), g=st.floats(1, 900), offset=st.floats(0, 5))
def test_the_baseline_itself_saves_nothing(seconds: float, g: float, offset: float) -> None:
    start = T0 + timedelta(seconds=offset)  # a second or so of set-up before the job starts
    report = _report([_span("speed", start, seconds, 700 * seconds, g)],
                     points=[[(T0 - timedelta(hours=1)).isoformat(), 3600 * 12, g, True]])
    assert run_saving(report).saved_g == pytest.approx(0.0, abs=1e-6 * max(report["carbon_g"], 1e-9))


def test_threshold_runs_count_work_from_the_spans_speeds() -> None:
    report = _report([_span("efficiency", T0, 4000, 420 * 4000, 400.0)],
                     points=[[T0.isoformat(), 7200, 400.0, True]])
    s = run_saving(report)
    assert s.baseline_end == T0 + timedelta(seconds=3000)  # 4000 s at speed 0.75


def test_no_figure_without_figures_coverage_or_a_run() -> None:
    bad_mode = _report([_span("turbo", T0, 60, 100, 400.0)], points=[[T0.isoformat(), 3600, 400.0, True]])
    assert run_saving(bad_mode).saved_g is None and "turbo" in run_saving(bad_mode).why
    uncovered = _report([_span("speed", T0 + timedelta(hours=5), 3600, 700 * 3600, 400.0)], work_s=3600)
    s = run_saving(uncovered)
    assert s.saved_g is None and "0% of the baseline's hours" in s.why
    assert run_saving(_report([])).why == "the job did not run"
    assert "unknown against" in run_saving(_report([])).phrase()


def test_an_older_report_finds_its_reference_mode_by_speed_and_gets_a_saving_on_read() -> None:
    report = _report([_span("efficiency", T0, 4800, 420 * 4800, 400.0)], work_s=3600, reference=None,
                     points=[[T0.isoformat(), 7200, 400.0, True]])
    assert run_saving(report).saved_pct == pytest.approx(20.0)
    assert with_saving(report)["saving"]["saved_pct"] == pytest.approx(20.0)
    assert with_saving({"run_id": "x"})["saving"]["saved_g"] is None  # a foreign shape: a reason, not a crash


def test_mean_intensity_weighs_by_time_and_reports_coverage() -> None:
    pieces = [(T0, T0 + timedelta(hours=1), 100.0), (T0, T0 + timedelta(hours=3), 400.0)]
    g, covered = mean_intensity(pieces, T0, T0 + timedelta(hours=4))
    assert g == pytest.approx((100 + 2 * 400) / 3) and covered == pytest.approx(0.75)


def test_grams_pick_a_readable_unit() -> None:
    assert (grams(0.000123), grams(0.5), grams(12.34), grams(4321.0)) == ("0.123 mg", "500 mg", "12.3 g", "4.32 kg")


def test_the_saving_splits_into_a_mode_part_and_a_timing_part_that_add_up() -> None:
    # efficiency from 02:00 (200 g/kWh) where the cron hour was 500: the same spans from 01:00 would emit
    # at 500, so the mode part is the modes' energy difference there and the timing part the rest
    start = T0 + timedelta(hours=1)
    points = [[T0.isoformat(), 3600, 500.0, False], [start.isoformat(), 7200, 200.0, True]]
    report = _report([_span("efficiency", start, 4800, 420 * 4800, 200.0)], work_s=3600, points=points)
    s = run_saving(report)
    assert s.parts is not None and s.saved_g is not None and s.baseline_g is not None
    mode, timing = s.parts["mode"], s.parts["timing"]
    # baseline 3600 s of speed from 01:00 at 500; the spans from 01:00: 3600 s at 500, 1200 s at the span's 200
    same_start_g = 420 * 4800 / 3.6e6 * (500 * 3600 + 200 * 1200) / 4800
    assert mode["saving_g"] == pytest.approx(s.baseline_g - same_start_g)
    assert timing["saving_g"] == pytest.approx(same_start_g - report["carbon_g"])
    assert mode["saving_g"] + timing["saving_g"] == pytest.approx(s.saved_g)
    assert mode["pct"] + timing["pct"] == pytest.approx(s.saved_pct)
    assert two_parts(100.0, 80.0, 70.0, 60.0) == {"mode": {"saving_g": 20.0, "share": 0.5},
                                                  "timing": {"saving_g": 10.0, "share": 0.5}}
    assert with_saving({**report, "saving": {"saved_g": 1.0}})["saving"]["parts"] == s.parts  # recorded before parts
