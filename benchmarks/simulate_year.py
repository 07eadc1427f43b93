"""Whole-year simulation speed: `gridshift simulate` on a year-long trace vs a baseline-only pass.

Run from the repo root:
    .venv/bin/python benchmarks/simulate_year.py ../shared/data/carbon/lets-wait-awhile/ger_ci.csv
Prints wall seconds of the full simulation (baseline + gridshift + oracle, built-in forecaster),
of a baseline-only pass over the same jobs (reading + resampling + one integral per job), their
ratio, and the acceptance target (< 30 s). Every energy figure is modelled.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(trace_path: str) -> None:
    from backends.simulated import SimulatedBackend
    from carbon.trace_file import read_trace
    from scheduler.policy_io import load_policy
    from simulation.sim_forecast import DailyProfileForecaster
    from scheduler.cron import cron_occurrences
    from simulation.simulate import model_from_backend, resample, simulate

    policy = load_policy(REPO / "examples" / "nightly.yaml")
    model = model_from_backend(policy, SimulatedBackend())

    t = time.perf_counter()
    series = read_trace(trace_path)
    t0, step, values = resample(series)
    import numpy as np
    from datetime import timedelta

    cum = np.concatenate(([0.0], np.cumsum(values) * step))
    end = t0 + timedelta(seconds=step * len(values))
    nominals = cron_occurrences(policy.job.cron or "0 1 * * *", t0, end)
    starts = np.array([(n - t0).total_seconds() for n in nominals])
    edges = np.arange(len(cum)) * step
    _ = np.interp(starts + policy.job.expected_duration_s, edges, cum) - np.interp(starts, edges, cum)
    baseline_s = time.perf_counter() - t

    t = time.perf_counter()
    series = read_trace(trace_path)
    result = simulate(policy, series, model, DailyProfileForecaster(step_s=resample(series)[1]))
    full_s = time.perf_counter() - t
    s = result.summary()
    print(f"trace {Path(trace_path).name}: {s['jobs']} jobs, step {s['step_s']:.0f} s")
    print(f"baseline-only pass   {baseline_s:7.2f} s")
    print(f"full simulation      {full_s:7.2f} s   ratio {full_s / baseline_s:6.1f}x baseline-only   target < 30 s: "
          f"{'ok' if full_s < 30 else 'MISSED'}")
    print(f"savings {s['savings_pct']:.1f}% vs oracle {s['oracle_savings_pct']:.1f}% "
          f"({s['savings_pct'] / s['oracle_savings_pct']:.0%} of oracle), deadline misses {s['deadline_misses']} (modelled energy)")


if __name__ == "__main__":
    trace_arg = sys.argv[1] if len(sys.argv) > 1 else str(REPO.parent / "shared" / "data" / "carbon" / "lets-wait-awhile" / "ger_ci.csv")
    if not Path(trace_arg).is_file():  # one line, not a traceback: the year traces do not ship with the package
        sys.exit(f"simulate_year: no trace at {trace_arg}: pass a trace CSV (a year of the Let's Wait Awhile "
                 "traces lies in shared/data/carbon/lets-wait-awhile beside a checkout)")
    main(trace_arg)
