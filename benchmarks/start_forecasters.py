"""Which forecast chooses a night's start best? The start-only question, on a real year trace.

Run from the repo root:
    .venv/bin/python benchmarks/start_forecasters.py ../shared/data/carbon/lets-wait-awhile/ger_ci.csv [--slowdown 1.215]

For every night of ``examples/nightly.yaml`` (nominal 01:00 UTC, may start 21:00-05:00, done by 08:00
less the 15 min margin) a run of ``3 h x slowdown`` (the frugal mode: 1.215 = V100 at 150 W) starts
where each forecast, issued at 21:00 from past data only, says its mean intensity is lowest. The
carbon over the run is integrated on the real trace. Printed per forecaster: the timing gain over
starting at 01:00, and its share of the perfect-foresight timing gain. Printed beside them: starting
at 01:00 (the simplest choice, share 0) and perfect foresight (the exact optimum, share 1).
Intensities are measured; the run length is modelled. ``min_gain`` rows keep 01:00 unless the
forecast promises that relative gain.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

Forecast = Callable[[np.ndarray, int, int], np.ndarray]


def _profile_forecasts(per_day: int) -> dict[str, Forecast]:
    from simulation.sim_forecast import DailyProfileForecaster

    step_s = 86400.0 / per_day
    shipped = DailyProfileForecaster(step_s=step_s).forecast  # what simulate and the flow use
    level_kept = DailyProfileForecaster(step_s=step_s, days=14, fit_days=0).forecast  # the previous default

    def fading_median(v: np.ndarray, i: int, n: int) -> np.ndarray:
        # the previous default: median profile, today's offset fading out over 3 h
        lags = np.arange(1, 15)[:, None] * per_day
        ahead = i + np.arange(n)
        idx = ahead[None, :] - lags
        idx = np.where(idx > i, idx - per_day * ((idx - i) // per_day + 1), idx)
        prof = np.median(v[np.clip(idx, 0, i)], axis=0)
        fade = np.clip(1.0 - np.arange(n) / (3 * per_day / 24), 0.0, 1.0)
        out = prof + (v[i] - prof[0]) * fade
        out[0] = v[i]
        return out

    def persistence(v: np.ndarray, i: int, n: int) -> np.ndarray:
        return np.full(n, v[i])

    def yesterday(v: np.ndarray, i: int, n: int) -> np.ndarray:
        out = v[i - per_day: i - per_day + n].copy()
        out[0] = v[i]
        return out

    return {"daily_profile (shipped: 28-day shape, fitted persistence)": shipped,
            "14-day shape at today's level (previous default)": level_kept,
            "fading median (the default before that)": fading_median,
            "persistence (flat)": persistence, "same time yesterday": yesterday}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--slowdown", type=float, default=1.215)
    args = ap.parse_args()
    from carbon.trace_file import read_trace
    from simulation.simulate import resample

    t0, step, v = resample(read_trace(Path(args.trace)))
    per_day = int(round(86400 / step))
    run = int(round(3 * 3600 * args.slowdown / step))
    cum = np.concatenate(([0.0], np.cumsum(v)))
    first_midnight = int(((t0.timestamp() // 86400 + 1) * 86400 - t0.timestamp()) // step)
    hour = per_day // 24
    nights = [first_midnight + d * per_day + hour for d in range(15, len(v) // per_day - 1)]
    nights = [n for n in nights if n + 7 * hour + 1 < len(v)]

    def carbon(start: np.ndarray | int) -> np.ndarray:
        return cum[np.asarray(start) + run] - cum[np.asarray(start)]

    nominal = np.array([carbon(n) for n in nights])
    earliest = [n - 4 * hour for n in nights]
    latest = [n + 7 * hour - hour // 4 - run for n in nights]
    best = np.array([carbon(np.arange(e, last + 1)).min() for e, last in zip(earliest, latest)])
    possible = float(nominal.sum() - best.sum())
    print(f"{Path(args.trace).name}: {len(nights)} nights, run {run * step / 3600:.2f} h; perfect-foresight timing gain "
          f"{100 * possible / nominal.sum():.2f} % of the 01:00 carbon (measured intensities, modelled run)")
    print(f"  {'start at 01:00 (no forecast)':<68} gain   0.00 %   share  0.00")
    for name, f in _profile_forecasts(per_day).items():
        for min_gain in (0.0, 0.03):
            got = []
            for n, e, last in zip(nights, earliest, latest):
                fc = f(v, e, last + run - e + 1)
                c = np.convolve(fc, np.ones(run), "valid")[: last - e + 1]
                k = int(np.argmin(c))
                keep = 1 - c[k] / c[n - e] < min_gain
                got.append(carbon(n if keep else e + k))
            gain = float(nominal.sum() - np.sum(got))
            print(f"  {name + (f', min_gain {min_gain:g}' if min_gain else ''):<68} gain {100 * gain / nominal.sum():6.2f} %"
                  f"   share {gain / possible:5.2f}")
    print(f"  {'perfect foresight (exact optimum)':<68} gain {100 * possible / nominal.sum():6.2f} %   share  1.00")


if __name__ == "__main__":
    main()
