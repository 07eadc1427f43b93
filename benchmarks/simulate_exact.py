"""A year of `gridshift simulate` against an exact optimum computed without the planner.

Run from the repo root:
    .venv/bin/python benchmarks/simulate_exact.py examples/nightly_12h.yaml ../shared/data/carbon/lets-wait-awhile/ger_ci.csv \
        --profile ../shared/data/zeus/profiles/V100+resnet50+gpu0.csv [--every 1] [--units 500]

Simulates the policy with a perfect forecast (``--forecast noisy --forecast-error 0``), then solves
every ``--every``-th night again with :func:`exact_slots.exact_dp` (dynamic programming on whole work
units, no work quanta, no code shared with ``scheduler.planner``): the same window, no margin, no
dwell, the simulator's 300 s grid, the true intensities. ``exact_dp`` needs whole units per slot, so
it is solved twice, each mode's speed rounded *up* and then *down* to 1/``--units`` of the reference
mode's slot work: the exact optimum on the true speeds lies between the two (faster modes can only
cost less, slower ones more). Prints, side by side on those nights: the baseline, static efficiency
(the simple baseline), gridshift, the simulator's own oracle, both exact bounds; savings and each
strategy's share of the exact saving (against the lower bound: a share that understates it);
deadline misses; the simulation's wall and CPU seconds with the machine's load (a shared machine's
wall time says more about its other users). Energy and carbon are modelled from the mode
figures; the intensities are the real trace.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("policy")
    ap.add_argument("trace")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--every", type=int, default=1, help="solve every n-th night exactly (1: all)")
    ap.add_argument("--units", type=int, default=2000, help="work units per reference slot for the exact DP")
    args = ap.parse_args()

    from carbon.trace_file import read_trace
    from exact_slots import exact_dp
    from scheduler.planner.mode_figures import figures_for_policy
    from scheduler.policy.loader import load_policy
    from simulation.sim_forecast import NoisyTraceForecaster
    from simulation.simulate import simulate

    policy = load_policy(args.policy)
    figures = figures_for_policy(policy, profile=args.profile) if args.profile else figures_for_policy(policy)
    series = read_trace(args.trace)

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    load = os.getloadavg()
    t, c0 = time.perf_counter(), cpu()
    result = simulate(policy, series, figures, NoisyTraceForecaster(error=0.0, seed=0), forecast_label="noisy 0",
                      strategies=("static_efficiency", "gridshift", "oracle"))
    wall, cpu_s = time.perf_counter() - t, cpu() - c0

    job = policy.job
    slot = 300.0
    step = result.step_s
    per = int(round(step / slot))
    if abs(per * slot - step) > 1e-6:
        sys.exit(f"simulate_exact: the trace step {step:g} s is not a multiple of {slot:g} s")
    truth = np.repeat(result.values, per)
    power = np.array([m.power_w for m in figures])
    up = np.array([math.ceil(m.speed * args.units - 1e-9) for m in figures])
    down = np.array([math.floor(m.speed * args.units + 1e-9) for m in figures])
    work_units = int(math.ceil(job.expected_duration_s / slot * args.units - 1e-9))
    picked = list(range(0, len(result.baseline), args.every))
    t = time.perf_counter()
    lower, upper = [], []
    for k in picked:
        o = result.baseline[k]
        first = int(round((o.nominal_s + job.earliest_start_s) / slot))
        n = int(math.floor((o.deadline_s - (o.nominal_s + job.earliest_start_s)) / slot + 1e-9))
        for units, out in ((up, lower), (down, upper)):
            out.append(exact_dp(truth[first:first + n], power, units, slot_s=slot, work_units=work_units,
                                first_start=0, deadline_slots=n))
    exact_s = time.perf_counter() - t

    def total(name: str) -> float:
        return float(sum(result.outcomes[name][k].carbon_g for k in picked))

    base, ex, ex_hi = total("baseline"), float(sum(lower)), float(sum(upper))
    print(f"{Path(args.policy).name} on {Path(args.trace).name}: {len(picked)} of {len(result.baseline)} nights, "
          f"perfect forecast; figures {'measured' if all(m.measured for m in figures) else 'modelled'}, "
          "carbon modelled")
    print(f"  {'strategy':<44} {'kgCO2':>9} {'saving':>8} {'of exact':>9} {'misses':>7}")
    rows = [("baseline (cron time, reference mode)", "baseline"), ("static efficiency (no carbon data)", "static_efficiency"),
            ("gridshift (planner, re-planned)", "gridshift"), ("simulate's oracle (the planner, no margin/dwell)", "oracle")]
    for label, name in rows:
        g = total(name)
        misses = sum(result.outcomes[name][k].late for k in picked)
        print(f"  {label:<44} {g / 1e3:9.2f} {100 * (1 - g / base):7.2f}% {(base - g) / (base - ex):9.4f} {misses:7d}")
    print(f"  {'exact optimum, lower bound (speeds rounded up)':<44} {ex / 1e3:9.2f} {100 * (1 - ex / base):7.2f}% {1.0:9.4f}")
    print(f"  {'exact optimum, upper bound (rounded down)':<44} {ex_hi / 1e3:9.2f} {100 * (1 - ex_hi / base):7.2f}% "
          f"{(base - ex_hi) / (base - ex):9.4f}")
    print(f"  simulate: {wall:.1f} s wall, {cpu_s:.1f} s CPU (all processes, {os.cpu_count()} cores), load average "
          f"{load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; exact solves {exact_s:.1f} s")


if __name__ == "__main__":
    main()
