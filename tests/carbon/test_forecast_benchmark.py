"""benchmarks/forecast.py runs end to end (on a small synthetic trace here; the real numbers are in docs/carbon.md)."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "forecast.py"


def _write(path: Path, step_min: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = datetime(2019, 12, 20)
    rows = ["Time,Carbon Intensity"]
    level = 300.0
    while t < datetime(2020, 2, 28):  # the 56 days of history the default forecaster keeps, then some origins
        level = 0.98 * level + 0.02 * 300 + rng.normal(0, 5)
        v = level + 80 * np.sin(2 * np.pi * (t.hour + t.minute / 60) / 24)
        rows.append(f"{t:%Y-%m-%d %H:%M:%S},{v}")
        t += timedelta(minutes=step_min)
    path.write_text("\n".join(rows) + "\n")


def test_benchmark_script_reports_all_methods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "ger_ci.csv", 15, 1)
    _write(tmp_path / "gb_ci.csv", 30, 2)
    spec = importlib.util.spec_from_file_location("forecast_benchmark", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--data-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for zone in ("DE", "GB"):
        assert set(out[zone]) == {"daily_profile", "seasonal", "persistence", "same_hour_yesterday", "_meta"}
        assert out[zone]["seasonal"]["mape_pct"] < out[zone]["same_hour_yesterday"]["mape_pct"]
    assert mod.main(["--data-dir", str(tmp_path / "missing")]) == 2


def test_the_dacf_table_compares_history_raw_and_fused(tmp_path: Path) -> None:
    """A synthetic region: a day-ahead forecast with skill beside history; every column is filled."""
    spec = importlib.util.spec_from_file_location("forecast_benchmark", SCRIPT)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(4)
    t0 = datetime(2021, 7, 1)
    hours = 24 * 40
    truth = 300 + 80 * np.sin(2 * np.pi * np.arange(hours) / 24 + rng.normal(0, 0.3, hours).cumsum() * 0.05)
    (tmp_path / "syn_2021_actual.csv").write_text(
        "datetime,carbon_intensity\n" + "".join(f"{t0 + timedelta(hours=h):%Y-%m-%d %H:%M},{v}\n" for h, v in enumerate(truth)))
    rows = ["issued_at,for_time,value"]
    for d in range(1, 40):
        issued = t0 + timedelta(days=d - 1, hours=12)
        for h in range(24):
            k = d * 24 + h
            rows.append(f"{issued:%Y-%m-%d %H:%M},{t0 + timedelta(hours=k):%Y-%m-%d %H:%M},{truth[k] + rng.normal(0, 15)}")
    (tmp_path / "syn_2021_dacf_issued.csv").write_text("\n".join(rows) + "\n")
    # the measured V100 profile that ships with the tests (Zeus, Apache-2.0): a clone has no ../shared
    table = bench.dacf_region("syn", data_dir=tmp_path, profile=REPO / "tests" / "data" / "zeus" / "V100+resnet50+gpu0.csv")
    assert set(table) == {"history", "raw", "fused", "static_efficiency"}
    for name in ("history", "raw", "fused"):
        assert all(v is not None for v in table[name].values())
    assert table["fused"]["planner_share"] >= table["static_efficiency"]["planner_share"]
