"""24 h-ahead accuracy of the built-in forecaster against two baselines, on real 2020 traces.

For every hour of 2020 (UTC) as the forecast origin, each method sees the trace up to that hour
(hourly means, the last 56 days: what the product keeps for the default forecaster) and predicts the next 24 hours; the error is the mean absolute
percentage error (MAPE) over all origins and all 24 lead times, and separately at lead time 24 h.
Baselines, computed in the same run: persistence (last value) and same-hour-yesterday.

Data: Let's Wait Awhile (Wiesner et al., Middleware '21), ``ger_ci.csv`` and ``gb_ci.csv``
(ENTSO-E, average intensity of production). Not redistributed: pass ``--data-dir`` or keep the
default ``../shared/data/carbon/lets-wait-awhile`` beside the repository.

With ``--dacf`` it also scores, on the shared DACF regions (ERCOT, ISO-NE, PJM, Jul-Dec 2021:
actual intensity and day-ahead forecasts as issued at 12:00 UTC the day before, a causal hindcast of
a published model), side by side: the history forecast, the raw issued forecast and the fused one
(:class:`simulation.sim_forecast.FusedForecaster`); per forecast the MAPE and night-hour rank
correlation over the nightly job's window, the share of the perfect-foresight start gain it
captured, and the planner's share of the exact optimum in ``gridshift simulate`` with the measured
V100 profile (baselines in the same run: static efficiency; the oracle is 1 by definition).
Intensities are measured; energy and carbon are modelled from a measured power profile.

    python benchmarks/forecast.py [--data-dir DIR] [--json] [--dacf] [--dacf-only]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from carbon.forecasts.builtin import FORECAST_HISTORY, FORECASTERS, hourly_means  # noqa: E402
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


DACF_REGIONS = {"ERCOT": "erco", "ISO-NE": "isne", "PJM": "pjm"}
DACF_DIR = DEFAULT_DATA.parent / "dacf"
PROFILE = DEFAULT_DATA.parents[1] / "zeus" / "profiles" / "V100+resnet50+gpu0.csv"
POLICY = REPO / "examples" / "nightly.yaml"


def dacf_region(region: str, *, data_dir: Path = DACF_DIR, profile: Path = PROFILE) -> dict[str, dict[str, float | None]]:
    """History, raw issued and fused forecasts on one DACF region: forecast scores and the planner's share."""
    from carbon.forecasts.issued import read_issued_forecasts
    from carbon.forecasts.skill import Night, night_scores, start_gain_share
    from scheduler.policy.cron import cron_occurrences
    from scheduler.planner.mode_figures import figures_for_policy
    from scheduler.policy.loader import load_policy
    from simulation.sim_forecast import DailyProfileForecaster, FusedForecaster, IssuedForecaster, start_window
    from simulation.simulate import resample, simulate

    policy = load_policy(POLICY)
    modes = figures_for_policy(policy, profile=profile, policy_path=POLICY)
    series = read_trace(data_dir / f"{region}_2021_actual.csv")
    t0, step, values = resample(series)
    raw = IssuedForecaster(read_issued_forecasts(data_dir / f"{region}_2021_dacf_issued.csv"), origin_s=t0.timestamp(),
                           step_s=step)
    history = DailyProfileForecaster(step_s=step)
    forecasters = {"history": history, "raw": raw,
                   "fused": FusedForecaster({"issued": raw.as_issued, "history": history.forecast}, step_s=step)}
    job = policy.job
    assert job.cron is not None and job.deadline_s is not None
    end = t0 + timedelta(seconds=step * len(values) - job.deadline_s)
    nominals = [(n - t0).total_seconds() for n in cron_occurrences(job.cron, t0 - timedelta(seconds=job.earliest_start_s), end)]
    out: dict[str, dict[str, float | None]] = {}
    for name, fc in forecasters.items():
        nights = []
        window = None
        for nominal in nominals:  # each night's start decision, at its earliest start
            i = int((nominal + job.earliest_start_s) // step)
            origin = i * step
            window = start_window(origin_s=origin, reference_s=nominal, latest_start_s=nominal + job.deadline_s - job.expected_duration_s,
                                  run_s=job.expected_duration_s, step_s=step)
            nights.append(Night(forecast=fc.forecast(values, i, window.end), observed=values[i: i + window.end]))
        assert window is not None
        share, _ = start_gain_share(nights, window)
        rho, mape, _ = night_scores(nights, window)
        st = simulate(policy, series, modes, fc, strategies=("gridshift", "static_efficiency")).summary()["strategies"]
        out[name] = {"mape_pct": mape, "night_rank_correlation": rho, "start_gain_share": share,
                     "planner_share": st["gridshift"]["share_of_oracle_saving"]}
        out["static_efficiency"] = {"planner_share": st["static_efficiency"]["share_of_oracle_saving"]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder holding ger_ci.csv and gb_ci.csv")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--dacf", action="store_true", help="also score history, raw and fused forecasts on the DACF regions")
    ap.add_argument("--dacf-only", action="store_true", help="only the DACF regions")
    args = ap.parse_args(argv)
    results: dict[str, object] = {}
    t_start = time.perf_counter()
    if args.dacf or args.dacf_only:
        results["dacf"] = {label: dacf_region(code) for label, code in DACF_REGIONS.items()}
        if not args.json:
            _print_dacf(results["dacf"])  # type: ignore[arg-type]
        if args.dacf_only:
            if args.json:
                print(json.dumps(results, indent=2))
            return 0
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


def _print_dacf(table: dict[str, dict[str, dict[str, float | None]]]) -> None:
    fmt = (lambda x, spec: "-" if x is None else format(x, spec))
    print("DACF regions, Jul-Dec 2021, nightly job (examples/nightly.yaml), V100 profile: intensities measured, "
          "energy modelled from a measured profile; forecast scores over each night's window (21:00 + 11 h UTC)")
    print(f"{'region':<8}{'forecast':<10}{'MAPE %':>8}{'rank rho':>10}{'start gain':>12}{'planner share':>15}")
    for region, rows in table.items():
        for name in ("history", "raw", "fused"):
            r = rows[name]
            print(f"{region:<8}{name:<10}{fmt(r['mape_pct'], '.1f'):>8}{fmt(r['night_rank_correlation'], '.2f'):>10}"
                  f"{fmt(r['start_gain_share'], '.3f'):>12}{fmt(r['planner_share'], '.4f'):>15}")
        print(f"{region:<8}{'static efficiency (no data)':<40}{fmt(rows['static_efficiency']['planner_share'], '.4f'):>13}"
              f"   oracle 1")


if __name__ == "__main__":
    raise SystemExit(main())
