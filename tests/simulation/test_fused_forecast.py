"""The fused forecaster in the replay: causal, and never below static efficiency, even on an archive without skill."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.forecasts.issued import IssuedForecasts
from simulation.sim_forecast import DailyProfileForecaster, FusedForecaster, IssuedForecaster, start_window
from tests.conftest import needs_shared

REPO = Path(__file__).resolve().parents[2]
STEP = 3600.0
DAYS = 40
rng = np.random.default_rng(7)
TRUTH = 300 + 80 * np.sin(2 * np.pi * np.arange(24 * DAYS) / 24) + rng.normal(0, 20, 24 * DAYS)


def _archive(values: np.ndarray, *, extra_after_s: float | None = None, noise: float = 15.0) -> IssuedForecasts:
    """Day-ahead issues at 12:00 for the next day's 24 hours; optionally junk issues from ``extra_after_s`` on."""
    r = np.random.default_rng(3)
    issued, valid, vals = [], [], []
    for d in range(DAYS - 1):
        t = d * 86400.0 + 12 * 3600.0
        issued.append(t)
        valid.append((d + 1) * 86400.0 + np.arange(24) * STEP)
        vals.append(np.maximum(values[(d + 1) * 24: (d + 2) * 24] + r.normal(0, noise, 24), 0))
    if extra_after_s is not None:  # issued later than the decision: must change nothing
        for k, t in enumerate(issued):
            if t > extra_after_s:
                vals[k] = np.full(24, 9999.0)
    return IssuedForecasts(issued_s=issued, valid_s=valid, values=vals)


def _fused(values: np.ndarray, archive: IssuedForecasts) -> FusedForecaster:
    raw = IssuedForecaster(archive, origin_s=0.0, step_s=STEP)
    return FusedForecaster({"issued": raw.as_issued, "history": DailyProfileForecaster(step_s=STEP).forecast}, step_s=STEP)


@settings(max_examples=12, deadline=None)
@given(now=st.integers(min_value=24 * 8, max_value=24 * (DAYS - 2)), n=st.integers(min_value=2, max_value=14))
def test_nothing_seen_or_issued_after_a_decision_is_used_for_it(now: int, n: int) -> None:
    clean = _fused(TRUTH, _archive(TRUTH)).forecast(TRUTH, now, n)
    future = TRUTH.copy()
    future[now + 1:] = 5000.0  # a different future...
    leaked = _fused(future, _archive(TRUTH, extra_after_s=now * STEP)).forecast(future, now, n)  # ...and later issues
    assert np.allclose(clean, leaked)
    w = start_window(origin_s=now * STEP, reference_s=now * STEP + 4 * STEP, latest_start_s=now * STEP + 8 * STEP,
                     run_s=3 * STEP, step_s=STEP)
    assert _fused(TRUTH, _archive(TRUTH)).start_record(TRUTH, now, w) == _fused(future, _archive(TRUTH)).start_record(
        future, now, w)


def test_an_archive_moved_by_12_hours_loses_the_weight_to_history() -> None:
    shifted = _archive(TRUTH)
    moved = IssuedForecasts(issued_s=shifted.issued_s, valid_s=[v + 43200.0 for v in shifted.valid_s], values=shifted.values)
    good, bad = _fused(TRUTH, shifted), _fused(TRUTH, moved)
    i = 24 * 35 + 21
    assert good.fit(TRUTH, i, 13).weights[0, 1:].mean() > 0.5  # the skilled archive carries the weight
    assert bad.fit(TRUTH, i, 13).weights[0, 1:].mean() < 0.5  # the moved one loses it to history


@pytest.mark.slow
@pytest.mark.parametrize("region", ["pjm", "isne"])
def test_never_below_static_efficiency_with_a_shared_archive_moved_by_12_hours(region: str, tmp_path: Path) -> None:
    """Acceptance 2 on real data: the raw moved archive falls below static efficiency here; the fused one does not."""
    dacf = needs_shared("carbon", "dacf")
    from carbon.forecasts.issued import read_issued_forecasts
    from carbon.trace_file import read_trace
    from scheduler.planner.mode_figures import figures_for_policy
    from scheduler.policy.loader import load_policy
    from simulation.simulate import resample, simulate

    policy = load_policy(REPO / "examples" / "nightly.yaml")
    modes = figures_for_policy(policy, profile=needs_shared("zeus", "profiles", "V100+resnet50+gpu0.csv"),
                               policy_path=REPO / "examples" / "nightly.yaml")
    series = read_trace(dacf / f"{region}_2021_actual.csv")
    t0, step, _ = resample(series)
    real = read_issued_forecasts(dacf / f"{region}_2021_dacf_issued.csv")
    moved = IssuedForecasts(issued_s=real.issued_s, valid_s=[v + 43200.0 for v in real.valid_s], values=real.values)
    raw = IssuedForecaster(moved, origin_s=t0.timestamp(), step_s=step)
    fused = FusedForecaster({"moved": raw.as_issued, "history": DailyProfileForecaster(step_s=step).forecast}, step_s=step)
    s = simulate(policy, series, modes, fused, strategies=("static_efficiency",)).summary()["strategies"]
    assert s["gridshift"]["deadline_misses"] == 0
    assert s["gridshift"]["carbon_g"] <= s["static_efficiency"]["carbon_g"]


def test_on_a_grid_and_an_archive_that_are_pure_noise_it_is_not_above_static_efficiency() -> None:
    """No daily shape to learn and an archive of random numbers: the gate and the weights leave nothing to lose."""
    from datetime import datetime, timedelta, timezone

    from carbon.series import IntensityPoint, IntensitySeries
    from scheduler.planner import ModeFigures
    from scheduler.policy.loader import load_policy
    from simulation.simulate import simulate

    r = np.random.default_rng(0)
    days = 60
    t0 = datetime(2021, 1, 1, tzinfo=timezone.utc)
    series = IntensitySeries.of([IntensityPoint(start=t0 + timedelta(hours=h), duration=timedelta(hours=1),
                                                g_per_kwh=float(max(v, 1.0)))
                                 for h, v in enumerate(300 + 60 * r.standard_normal(24 * days))])
    junk = IssuedForecasts(issued_s=[t0.timestamp() + d * 86400 + 43200 for d in range(days - 1)],
                           valid_s=[t0.timestamp() + (d + 1) * 86400 + np.arange(24) * STEP for d in range(days - 1)],
                           values=[np.maximum(300 + 60 * r.standard_normal(24), 1.0) for _ in range(days - 1)])
    raw = IssuedForecaster(junk, origin_s=t0.timestamp(), step_s=STEP)
    fused = FusedForecaster({"junk": raw.as_issued, "history": DailyProfileForecaster(step_s=STEP).forecast}, step_s=STEP)
    modes = [ModeFigures("speed", 227.0, 1.0, "test"), ModeFigures("efficiency", 149.0, 0.823, "test")]
    policy = load_policy(REPO / "examples" / "nightly.yaml")
    s = simulate(policy, series, modes, fused, strategies=("static_efficiency",)).summary()["strategies"]
    assert s["gridshift"]["deadline_misses"] == 0
    assert s["gridshift"]["carbon_g"] <= s["static_efficiency"]["carbon_g"]
