"""Do no harm: the gate's choice, the two shares of a saving, and --pace-error that slows every strategy alike."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.loop.gate import MIN_NIGHTS, ForecastRecord, choose_forecast
from scheduler.planner import ModeFigures
from simulation.sim_forecast import DailyProfileForecaster, PerfectForecaster
from simulation.simulate import simulate

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = REPO / "examples" / "nightly.yaml"
MODEL = [ModeFigures("speed", 700.0, 1.0, "test"), ModeFigures("efficiency", 490.0, 1 / 1.2, "test")]


def _synthetic(days: int, seed: int = 1) -> IntensitySeries:
    rng = np.random.default_rng(seed)
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    step = timedelta(minutes=30)
    return IntensitySeries.of(
        IntensityPoint(start=t0 + i * step, duration=step,
                       g_per_kwh=max(300 + 120 * math.cos(((i % 48) / 2 - 20) / 24 * 2 * math.pi) + rng.normal(0, 15), 0))
        for i in range(days * 48))


class _Backwards:
    """A forecast that has the night upside down: it says clean where the truth is dirty."""

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        truth = PerfectForecaster().forecast(values, now_index, n)
        out = 2 * float(np.mean(truth)) - truth
        out[0] = truth[0]
        return np.maximum(out, 0.0)


@pytest.fixture
def nightly():
    from scheduler.policy.loader import load_policy

    return load_policy(NIGHTLY)


def test_no_record_no_forecast_then_the_best_record_clear_of_its_spread() -> None:
    assert choose_forecast([ForecastRecord("fc", (0.05,) * (MIN_NIGHTS - 1))]).static  # under a week: the static plan
    good = ForecastRecord("fc", (0.04, 0.05, 0.03, 0.06, 0.05, 0.04, 0.05))
    assert choose_forecast([good]).label == "fc"
    noisy = ForecastRecord("fc", (0.30, -0.25, 0.28, -0.30, 0.25, -0.27, 0.02))  # mean > 0, not clear of the spread
    assert choose_forecast([noisy]).static and "not clear of its night-to-night spread" in choose_forecast([noisy]).reason
    assert choose_forecast([ForecastRecord("fc", (-0.01,) * 10)]).static


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-0.2, 0.2), min_size=MIN_NIGHTS, max_size=28),
       st.lists(st.floats(-0.2, 0.2), min_size=MIN_NIGHTS, max_size=28))
def test_a_combined_forecast_is_never_trusted_beyond_the_better_of_its_inputs(fused: list[float], issued: list[float]) -> None:
    records = [ForecastRecord("fused", tuple(fused)), ForecastRecord("issued", tuple(issued))]
    choice = choose_forecast(records)
    bound = {r.label: r.lower_bound() for r in records}
    if choice.label == "fused":
        assert bound["fused"] >= bound["issued"] and bound["fused"] > 0
    if choice.static:
        assert max(bound.values()) <= 0


def test_a_forecast_with_the_night_upside_down_costs_nothing_over_static_efficiency(nightly) -> None:
    res = simulate(nightly, _synthetic(40), MODEL, _Backwards())
    s = res.summary()["strategies"]
    assert s["gridshift"]["carbon_g"] <= s["static_efficiency"]["carbon_g"] * 1.001
    assert res.summary()["gate"]["on_a_forecast"] <= 2  # its record shows the harm: it is not planned on


def test_a_good_forecast_is_planned_on_from_its_second_week(nightly) -> None:
    res = simulate(nightly, _synthetic(40), MODEL, PerfectForecaster())
    on = [k for k, j in enumerate(res.gridshift) if j.planned_on]
    assert on and on[0] == MIN_NIGHTS and len(on) >= len(res.gridshift) - MIN_NIGHTS - 2
    s = res.summary()
    assert s["strategies"]["gridshift"]["timing_share"] > 0.5


def test_json_and_the_table_carry_both_parts_of_the_saving(tmp_path: Path) -> None:
    from flows.cli import app

    csv = tmp_path / "t.csv"
    csv.write_text("time,g\n" + "".join(f"{p.start:%Y-%m-%d %H:%M},{p.g_per_kwh:.3f}\n" for p in _synthetic(30)))
    out = CliRunner().invoke(app, ["simulate", str(NIGHTLY), "--trace", str(csv), "--forecast", "noisy",
                                   "--forecast-error", "0", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    st_ = data["strategies"]
    for name in ("static_efficiency", "gridshift", "oracle", "threshold", "best_static"):
        assert {"timing_share", "timing_saving_g"} <= st_[name].keys()
    assert st_["oracle"]["timing_share"] == pytest.approx(1.0) and st_["static_efficiency"]["timing_share"] == 0.0
    mode, timing = data["shares"]["mode"], data["shares"]["timing"]
    assert mode["saving_g"] == pytest.approx(st_["baseline"]["carbon_g"] - st_["static_efficiency"]["carbon_g"])
    assert timing["saving_g"] == pytest.approx(st_["static_efficiency"]["carbon_g"] - st_["gridshift"]["carbon_g"])
    assert mode["saving_g"] + timing["saving_g"] == pytest.approx(data["baseline_g"] - data["gridshift_g"])
    assert data["gate"]["nights"] == data["jobs"] and data["gate"]["on_a_forecast"] > 0
    human = CliRunner().invoke(app, ["simulate", str(NIGHTLY), "--trace", str(csv), "--forecast", "noisy",
                                     "--forecast-error", "0"]).stdout
    assert "the mode part" in human and "the timing part" in human and " timing " in human.splitlines()[1]


def test_pace_error_slows_every_strategy_alike_so_the_shares_stay_comparable(nightly) -> None:
    series = _synthetic(30)
    _, step, _ = __import__("simulation.simulate", fromlist=["resample"]).resample(series)
    f = DailyProfileForecaster(step_s=step)
    at0 = simulate(nightly, series, MODEL, f).summary()
    slow = simulate(nightly, series, MODEL, f, pace_error=0.03).summary()
    for name in ("baseline", "static_efficiency", "best_static"):  # slowed too, not only gridshift
        assert slow["strategies"][name]["mean_duration_s"] == pytest.approx(at0["strategies"][name]["mean_duration_s"] * 1.03)
    assert slow["deadline_misses"] == 0
    for part in ("mode", "timing"):
        assert slow["shares"][part]["share"] == pytest.approx(at0["shares"][part]["share"], abs=0.1)


def test_no_shares_against_a_reference_that_misses_its_deadline(nightly) -> None:
    # the job's whole window is its frugal run at the cron time: 3 % slower, static efficiency is late
    job = nightly.job.model_copy(update={"earliest_start_s": 0.0, "deadline_s": 10800 * 1.2 + 60})
    policy = nightly.model_copy(update={"job": job})
    s = simulate(policy, _synthetic(12), MODEL, PerfectForecaster(), pace_error=0.03).summary()
    assert s["strategies"]["static_efficiency"]["deadline_misses"] > 0
    assert s["shares"]["timing"]["share"] is None and s["shares"]["mode"]["share"] is None
    assert "static_efficiency missed deadlines" in s["shares"]["why_no_shares"]
    assert all(st["share_of_oracle_saving"] is None for st in s["strategies"].values())
    assert {"margin_s", "nights_into_margin", "max_used_s"} <= s["reserve"].keys()
