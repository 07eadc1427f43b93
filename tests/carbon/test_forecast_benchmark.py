"""benchmarks/forecast.py runs end to end (on a small synthetic trace here; the real numbers are in docs/carbon.md)."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "forecast.py"


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
