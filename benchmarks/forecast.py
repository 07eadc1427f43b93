"""24 h-ahead accuracy of the built-in forecaster against two baselines, on real 2020 traces.

For every hour of 2020 (UTC) as the forecast origin, each method sees the trace up to that hour
(hourly means, the last 56 days: what the product keeps for the default forecaster) and predicts the next 24 hours; the error is the mean absolute
percentage error (MAPE) over all origins and all 24 lead times, and separately at lead time 24 h.
Baselines, computed in the same run: persistence (last value) and same-hour-yesterday.

Data: Let's Wait Awhile (Wiesner et al., Middleware '21), ``ger_ci.csv`` and ``gb_ci.csv``
(ENTSO-E, average intensity of production). Not redistributed: pass ``--data-dir`` or keep the
default ``../shared/data/carbon/lets-wait-awhile`` beside the repository.

    python benchmarks/forecast.py [--data-dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from carbon.forecast import FORECAST_HISTORY, FORECASTERS, hourly_means  # noqa: E402
from carbon.trace_file import read_trace  # noqa: E402

_REL = Path("shared") / "data" / "carbon" / "lets-wait-awhile"
# ../shared beside the repository (a worktree one level deeper finds it one level up)
DEFAULT_DATA = next((base / _REL for base in (REPO.parent, REPO.parent.parent) if (base / _REL).exists()), REPO.parent / _REL)
TRACES = {"DE": "ger_ci.csv", "GB": "gb_ci.csv"}
METHODS = ("daily_profile", "seasonal", "persistence", "same_hour_yesterday")
LOOKBACK_H = int(FORECAST_HISTORY.total_seconds() // 3600)
HORIZON_H = 24


def hourly_trace(path: Path) -> tuple[datetime, np.ndarray]:
    series = read_trace(path)
    first = series.start.replace(minute=0, second=0, microsecond=0)
    n = int((series.end - first).total_seconds() // 3600) + 1
    values = hourly_means(
        np.array([p.start.timestamp() for p in series]), np.array([p.duration.total_seconds() for p in series]),
        np.array([p.g_per_kwh for p in series]), grid_start_s=first.timestamp(), n_hours=n,
    )
    return first, values


def evaluate(first: datetime, hourly: np.ndarray, year: int = 2020) -> dict[str, dict[str, float]]:
    o0 = int((datetime(year, 1, 1, tzinfo=timezone.utc) - first).total_seconds() // 3600)
    o1 = int((datetime(year + 1, 1, 1, tzinfo=timezone.utc) - first).total_seconds() // 3600)
    errs: dict[str, list[np.ndarray]] = {m: [] for m in METHODS}
    origins = 0
    for origin in range(max(o0, LOOKBACK_H), min(o1, len(hourly) - HORIZON_H)):
        past = hourly[origin - LOOKBACK_H + 1: origin + 1]
        truth = hourly[origin + 1: origin + 1 + HORIZON_H]
        if np.isnan(past[-1]) or np.isnan(truth).all():
            continue
        origins += 1
        for m in METHODS:
            pred = FORECASTERS[m](past, HORIZON_H)
            errs[m].append(np.abs(pred - truth) / truth)
    out: dict[str, dict[str, float]] = {}
    for m in METHODS:
        e = np.vstack(errs[m])
        out[m] = {
            "mape_pct": float(100 * np.nanmean(e)),
            "mape_at_24h_pct": float(100 * np.nanmean(e[:, -1])),
        }
    out["_meta"] = {"origins": float(origins)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder holding ger_ci.csv and gb_ci.csv")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    results: dict[str, object] = {}
    t_start = time.perf_counter()
    for zone, name in TRACES.items():
        path = args.data_dir / name
        if not path.exists():
            print(f"forecast benchmark: error: {path} not found (pass --data-dir)", file=sys.stderr)
            return 2
        first, hourly = hourly_trace(path)
        res = evaluate(first, hourly)
        best_baseline = min(res["persistence"]["mape_pct"], res["same_hour_yesterday"]["mape_pct"])
        res["_meta"]["seasonal_vs_best_baseline"] = res["seasonal"]["mape_pct"] / best_baseline
        results[zone] = res
    results["elapsed_s"] = time.perf_counter() - t_start
    results["beats_both_baselines"] = all(
        r["seasonal"]["mape_pct"] < min(r["persistence"]["mape_pct"], r["same_hour_yesterday"]["mape_pct"])  # type: ignore[index]
        for k, r in results.items() if k in TRACES
    )
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"24 h-ahead MAPE, every hour of 2020 as origin (lower is better); data: {args.data_dir}")
    print(f"{'zone':<5}{'method':<22}{'MAPE 1-24 h %':>15}{'MAPE at 24 h %':>16}")
    for zone in TRACES:
        r = results[zone]
        for m in METHODS:
            print(f"{zone:<5}{m:<22}{r[m]['mape_pct']:>15.2f}{r[m]['mape_at_24h_pct']:>16.2f}")  # type: ignore[index]
        print(f"{zone:<5}{'seasonal / best baseline':<22}{r['_meta']['seasonal_vs_best_baseline']:>15.3f}"  # type: ignore[index]
              f"   ({int(r['_meta']['origins'])} origins)")  # type: ignore[index]
    print(f"seasonal beats both baselines on both traces: {results['beats_both_baselines']}  ({results['elapsed_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
