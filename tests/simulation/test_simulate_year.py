"""The year simulator: JSON contract, deadline safety, and the acceptance numbers on real traces."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from carbon.series import IntensityPoint, IntensitySeries
from simulation.sim_forecast import (
    DailyProfileForecaster,
    IssuedForecaster,
    NoisyTraceForecaster,
    PerfectForecaster,
)
from scheduler.policy.cron import cron_occurrences
from scheduler.planner import ModeFigures
from simulation.simulate import STRATEGIES, resample, simulate

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = REPO / "examples" / "nightly.yaml"
KEYS = {"jobs", "baseline_g", "gridshift_g", "oracle_g", "savings_pct", "oracle_savings_pct", "deadline_misses",
        "energy_baseline_j", "energy_gridshift_j", "mean_delay_s"}
MODEL = [ModeFigures("speed", 700.0, 1.0, "test"), ModeFigures("efficiency", 490.0, 1 / 1.2, "test")]


@pytest.fixture
def nightly_policy():
    from scheduler.policy.loader import load_policy

    return load_policy(Path(__file__).resolve().parents[2] / "examples" / "nightly.yaml")


def _synthetic(days: int = 21, seed: int = 1) -> IntensitySeries:
    """A daily cycle (dirty evenings, clean early mornings) with day-to-day noise, 30-min steps."""
    rng = np.random.default_rng(seed)
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    step = timedelta(minutes=30)
    pts = []
    for i in range(days * 48):
        hour = (i % 48) / 2
        v = 300 + 120 * math.cos((hour - 20) / 24 * 2 * math.pi) + rng.normal(0, 15)
        pts.append(IntensityPoint(start=t0 + i * step, duration=step, g_per_kwh=max(v, 0)))
    return IntensitySeries.of(pts)


def _write_csv(series: IntensitySeries, path: Path) -> Path:
    path.write_text("time,gco2\n" + "".join(f"{p.start:%Y-%m-%d %H:%M},{p.g_per_kwh:.3f}\n" for p in series))
    return path


def test_cron_occurrences_are_daily():
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    got = cron_occurrences("0 1 * * *", t0, t0 + timedelta(days=3))
    assert got == [t0 + timedelta(days=d, hours=1) for d in range(3)]


def test_resample_carries_values_over_gaps():
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    s = IntensitySeries.of([IntensityPoint(start=t0, duration=timedelta(hours=2), g_per_kwh=1.0),
                            IntensityPoint(start=t0 + timedelta(hours=2), duration=timedelta(hours=1), g_per_kwh=2.0)])
    origin, step, values = resample(s, 3600)
    assert origin == t0 and step == 3600 and values.tolist() == [1.0, 1.0, 2.0]


def test_perfect_forecast_gridshift_is_near_the_oracle(nightly_policy):
    from scheduler.policy.types import PlanRule

    series = _synthetic(days=20)
    # the planner itself, with no min gain: only margin and dwell stand between it and the oracle
    policy = nightly_policy.model_copy(update={"rules": PlanRule(min_gain=0.0, slot_s=1800, interval_s=1800, min_dwell_s=1800)})
    res = simulate(policy, series, MODEL, PerfectForecaster())
    st = res.summary()["strategies"]
    assert st["gridshift"]["carbon_g"] <= st["static_efficiency"]["carbon_g"] + 1e-6
    # do no harm: the static plan until a week of nights shows the forecast's gain, the forecast from then on
    trusted = [k for k, j in enumerate(res.gridshift) if j.planned_on]
    assert trusted == list(range(7, len(res.gridshift)))
    assert all(j.carbon_g == pytest.approx(s.carbon_g) for j, s in zip(res.gridshift[:7], res.outcomes["static_efficiency"]))
    base, gs, best = (sum(res.outcomes[n][k].carbon_g for k in trusted) for n in ("baseline", "gridshift", "oracle"))
    assert (base - gs) / (base - best) >= 0.85  # margin and dwell cost the rest


def test_issued_forecasts_are_read_as_of_each_decision(tmp_path):
    from carbon.forecasts.issued import read_issued_forecasts

    f = tmp_path / "issued.csv"
    f.write_text("issued_at,valid_for,g\n2024-01-01 00:00,2024-01-01 01:00,100\n2024-01-01 00:00,2024-01-01 02:00,200\n"
                 "2024-01-01 01:30,2024-01-01 02:00,50\n")
    fc = read_issued_forecasts(f)
    t = datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()
    assert fc.latest_before(t - 1) is None
    assert fc.on_grid(t + 3600, t + 3600, 3600, 2).tolist() == [100.0, 200.0]
    assert fc.on_grid(t + 5400, t + 7200, 3600, 1).tolist() == [50.0]


@pytest.mark.parametrize("forecaster", ["perfect", "history", "noisy"])
def test_never_late_and_oracle_beats_baseline(nightly_policy, forecaster):
    series = _synthetic()
    _, step_s, _ = resample(series)
    f = {"perfect": PerfectForecaster(), "history": DailyProfileForecaster(step_s=step_s),
         "noisy": NoisyTraceForecaster(error=0.2, seed=3)}[forecaster]
    res = simulate(nightly_policy, series, MODEL, f)
    s = res.summary()
    assert KEYS <= s.keys()
    assert s["jobs"] >= 19 and s["deadline_misses"] == 0 and s["oracle_deadline_misses"] == 0
    assert s["oracle_savings_pct"] > 0 and s["savings_pct"] > 0
    assert set(s["strategies"]) == set(STRATEGIES)
    for job in res.gridshift:
        assert job.start_s >= job.nominal_s + nightly_policy.job.earliest_start_s - 1e-6
        assert job.end_s <= job.deadline_s + 1e-6
    # the oracle bounds every strategy on every job (up to the DP's work-quantum rounding)
    for name, jobs in res.outcomes.items():
        for j, o in zip(jobs, res.oracle):
            assert o.carbon_g <= j.carbon_g * 1.01 + 1e-9, name
            assert not j.late, name


def test_cli_json_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from flows.cli import app

    csv = _write_csv(_synthetic(), tmp_path / "trace.csv")
    png = tmp_path / "sim.png"
    out = CliRunner().invoke(app, ["simulate", str(NIGHTLY), "--trace", str(csv), "--json", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert KEYS <= data.keys() and data["modelled"] is True
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_bad_trace_is_exit_2(tmp_path):
    from flows.cli import app

    bad = tmp_path / "bad.csv"
    bad.write_text("time,a,b\n2024-01-01 00:00,1,2\n")
    out = CliRunner().invoke(app, ["simulate", str(NIGHTLY), "--trace", str(bad)])
    assert out.exit_code == 2
    assert "--column" in out.output


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ger_ci.csv", "gb_ci.csv"])
def test_acceptance_on_real_2020_traces(nightly_policy, name):
    """On the real 2020 traces with the built-in forecaster: no misses, never below the no-data
    baseline (static efficiency), and at least 80 % of the exact optimum's saving (docs/scheduling.md)."""
    from tests.conftest import needs_shared

    trace = needs_shared("carbon", "lets-wait-awhile", name)
    from backends.simulated import SimulatedBackend
    from carbon.trace_file import read_trace
    from scheduler.planner.mode_figures import figures_for_policy

    series = read_trace(trace)
    _, step_s, _ = resample(series)
    s = simulate(nightly_policy, series, figures_for_policy(nightly_policy, backend=SimulatedBackend()),
                 DailyProfileForecaster(step_s=step_s), strategies=("static_efficiency",)).summary()
    assert s["jobs"] >= 365 and s["deadline_misses"] == 0
    assert s["savings_pct"] >= s["strategies"]["static_efficiency"]["savings_pct"]
    assert s["strategies"]["gridshift"]["share_of_oracle_saving"] >= 0.80


def test_the_result_does_not_depend_on_the_number_of_worker_processes(nightly_policy):
    series = _synthetic(days=40)
    f = NoisyTraceForecaster(error=0.2, seed=5)
    one = simulate(nightly_policy, series, MODEL, f, workers=1).summary()
    two = simulate(nightly_policy, series, MODEL, f, workers=2).summary()
    assert one["jobs"] >= 32  # enough for two workers
    assert one == two


def test_the_history_forecaster_fills_what_the_archive_does_not_cover(tmp_path):
    from carbon.forecasts.issued import read_issued_forecasts

    step = 3600.0
    origin = datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()
    values = np.tile(np.concatenate((np.full(12, 300.0), np.full(12, 100.0))), 40)  # 40 days, clean afternoons
    f = tmp_path / "issued.csv"
    start = datetime(2024, 1, 31, tzinfo=timezone.utc)  # one issue, 3 h ahead only
    f.write_text("issued_at,valid_for,g\n" + "".join(
        f"{start:%Y-%m-%d %H:%M},{start + timedelta(hours=h):%Y-%m-%d %H:%M},{50 + h}\n" for h in range(3)))
    fc = IssuedForecaster(read_issued_forecasts(f), origin_s=origin, step_s=step)
    now = 30 * 24  # 2024-01-31 00:00
    out = fc.forecast(values, now, 6)
    assert out[0] == values[now]  # observed
    assert out[1:3].tolist() == [51.0, 52.0]  # the archive
    assert np.allclose(out[3:], DailyProfileForecaster(step_s=step).forecast(values, now, 6)[3:])  # built-in
    assert fc.coverage([(now, 6)]) == pytest.approx(2 / 5)
    assert fc.coverage([(i, 6) for i in range(10)]) == 0.0  # before the issue
    assert fc.coverage([(now, 6), (0, 6)]) == pytest.approx(2 / 10)
