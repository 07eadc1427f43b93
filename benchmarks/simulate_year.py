"""Whole-year simulation speed: `gridshift simulate` on a year-long trace vs a baseline-only pass.

Run from the repo root:
    .venv/bin/python benchmarks/simulate_year.py ../shared/data/carbon/lets-wait-awhile/ger_ci.csv
Prints wall and CPU seconds of the full simulation (all six strategies, built-in forecaster), of a
baseline-only pass over the same jobs (reading + resampling + one integral per job), their ratio,
and the acceptance target (< 10 s). The jobs are spread over one process per core
(``GRIDSHIFT_SIM_WORKERS=1`` runs them in this process, for comparison). Every energy figure is modelled. CPU seconds are printed too
because a shared machine's wall time says more about its other users than about this code.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(trace_path: str) -> None:
    from backends.simulated import SimulatedBackend
    from carbon.trace_file import read_trace
    from scheduler.policy.loader import load_policy
    from simulation.sim_forecast import DailyProfileForecaster
    from scheduler.policy.cron import cron_occurrences
    from scheduler.planner.mode_figures import figures_for_policy
    from simulation.simulate import resample, simulate

    policy = load_policy(REPO / "examples" / "nightly.yaml")
    profile = sys.argv[2] if len(sys.argv) > 2 else None
    model = figures_for_policy(policy, profile=profile) if profile else figures_for_policy(policy, backend=SimulatedBackend())

    t = time.perf_counter()
    series = read_trace(trace_path)
    t0, step, values = resample(series)
    import numpy as np
    from datetime import timedelta

    cum = np.concatenate(([0.0], np.cumsum(values) * step))
    end = t0 + timedelta(seconds=step * len(values))
    nominals = cron_occurrences(policy.job.cron or "0 1 * * *", t0, end, tz=policy.job.timezone)
    starts = np.array([(n - t0).total_seconds() for n in nominals])
    edges = np.arange(len(cum)) * step
    _ = np.interp(starts + policy.job.expected_duration_s, edges, cum) - np.interp(starts, edges, cum)
    baseline_s = time.perf_counter() - t

    def cpu() -> float:  # this process and the worker processes simulate() spreads the jobs over
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    workers = int(os.environ["GRIDSHIFT_SIM_WORKERS"]) if os.environ.get("GRIDSHIFT_SIM_WORKERS") else None
    t, c = time.perf_counter(), cpu()
    series = read_trace(trace_path)
    result = simulate(policy, series, model, DailyProfileForecaster(step_s=resample(series)[1]), workers=workers)
    full_s, full_cpu = time.perf_counter() - t, cpu() - c
    s = result.summary()
    print(f"trace {Path(trace_path).name}: {s['jobs']} jobs, step {s['step_s']:.0f} s")
    print(f"baseline-only pass   {baseline_s:7.2f} s")
    print(f"full simulation      {full_s:7.2f} s wall, {full_cpu:.2f} s CPU (all processes, {os.cpu_count()} cores)   ratio {full_s / baseline_s:6.1f}x baseline-only   "
          f"target < 10 s: {'ok' if full_s < 10 else 'MISSED'}")
    for name, st in s["strategies"].items():
        print(f"  {name:<18} saving {st['savings_pct']:6.2f}%  misses {st['deadline_misses']}  (modelled energy)")


if __name__ == "__main__":
    trace_arg = sys.argv[1] if len(sys.argv) > 1 else str(REPO.parent / "shared" / "data" / "carbon" / "lets-wait-awhile" / "ger_ci.csv")
    if not Path(trace_arg).is_file():  # one line, not a traceback: the year traces do not ship with the package
        sys.exit(f"simulate_year: no trace at {trace_arg}: pass a trace CSV (a year of the Let's Wait Awhile "
                 "traces lies in shared/data/carbon/lets-wait-awhile beside a checkout)")
    main(trace_arg)
