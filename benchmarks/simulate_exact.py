"""A year of `gridshift simulate` against an exact optimum computed without the planner.

Run from the repo root:
    .venv/bin/python benchmarks/simulate_exact.py examples/nightly_12h.yaml ../shared/data/carbon/lets-wait-awhile/ger_ci.csv \
        --profile ../shared/data/zeus/profiles/V100+resnet50+gpu0.csv [--every 1] [--units 2000] [--jobs 2]
    # or simulate here and solve elsewhere (benchmarks/exact_nights.py needs only numpy):
    .venv/bin/python benchmarks/simulate_exact.py POLICY TRACE --profile ... --save-nights nights.npz
    python benchmarks/exact_nights.py nights.npz bounds.npz --jobs 16
    .venv/bin/python benchmarks/simulate_exact.py --report nights.npz bounds.npz

Simulates the policy with a perfect forecast (``--forecast noisy --forecast-error 0``), then solves
every ``--every``-th night again with :func:`exact_slots.exact_dp` (dynamic programming on whole work
units, no work quanta, no code shared with ``scheduler.planner``): the same window, no margin, no
dwell, the simulator's 300 s grid, the true intensities. ``exact_dp`` needs whole units per slot, so
it is solved twice, each mode's speed rounded *up* and then *down* to 1/``--units`` of the reference
mode's slot work: the exact optimum on the true speeds lies between the two (faster modes can only
cost less, slower ones more). Prints, side by side on those nights: the baseline, static efficiency
(the simple baseline), gridshift, the simulator's own oracle, both exact bounds; savings and each
strategy's share of the exact saving (against the lower bound: a share that understates it);
the simulator's own oracle is a schedule run on the true speeds without margin or dwell, so its
carbon is an upper bound of the free problem's optimum too, and the tighter upper bound is kept
night by night. Two problems are solved: **free** (no margin, no dwell: the bound the issue's
acceptance names) and **policy** (the policy's ``deadline_margin_s`` and ``min_dwell_s``, which the
product must honour and the free optimum ignores: the fair comparison for a planner held to them);
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
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


_STRATS = ("baseline", "static_efficiency", "gridshift", "oracle")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("policy", nargs="?")
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--every", type=int, default=1, help="solve every n-th night exactly (1: all)")
    ap.add_argument("--units", type=int, default=2000, help="work units per reference slot for the exact DP")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the exact solves")
    ap.add_argument("--units-range", nargs=2, type=int, default=None, metavar=("LO", "HI"),
                    help="choose each bound's units from LO..HI, the narrowest bracket (exact_nights.choose_units)")
    ap.add_argument("--problems", default="free,policy", help="free (no margin, no dwell), policy (the policy's), or both")
    ap.add_argument("--save-nights", default=None, help="write the sampled nights and the simulation's figures, solve nothing")
    ap.add_argument("--report", nargs=2, metavar=("NIGHTS", "BOUNDS"), help="print from saved nights and exact_nights bounds")
    args = ap.parse_args()
    if args.report:
        data = dict(np.load(args.report[0], allow_pickle=False))
        saved = np.load(args.report[1])
        data["units_chosen"] = saved["units"]
        report(data, saved["bounds"])
        return
    if not (args.policy and args.trace):
        ap.error("POLICY and TRACE are needed unless --report")

    from carbon.trace_file import read_trace
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

    job, rules = policy.job, policy.rules
    slot = 300.0
    step = result.step_s
    per = int(round(step / slot))
    if abs(per * slot - step) > 1e-6:
        sys.exit(f"simulate_exact: the trace step {step:g} s is not a multiple of {slot:g} s")
    truth = np.repeat(result.values, per)
    picked = list(range(0, len(result.baseline), args.every))
    firsts, slots = [], []
    for k in picked:
        o = result.baseline[k]
        firsts.append(int(round((o.nominal_s + job.earliest_start_s) / slot)))
        slots.append(int(math.floor((o.deadline_s - (o.nominal_s + job.earliest_start_s)) / slot + 1e-9)))
    width = max(slots)
    intensity = np.stack([np.pad(truth[f:f + n], (0, width - n), mode="edge") for f, n in zip(firsts, slots)])
    data: dict[str, Any] = {
        "label": np.array(f"{Path(args.policy).name} on {Path(args.trace).name}"),
        "nights_total": np.array(len(result.baseline)), "measured": np.array(all(m.measured for m in figures)),
        "slot_s": np.array(slot), "slots": np.array(slots), "intensity": intensity,
        "power_w": np.array([m.power_w for m in figures]),
        "units_up": np.array([math.ceil(m.speed * args.units - 1e-9) for m in figures]),
        "units_down": np.array([math.floor(m.speed * args.units + 1e-9) for m in figures]),
        "work_units": np.array(int(math.ceil(job.expected_duration_s / slot * args.units - 1e-9))),
        "units": np.array(args.units), "speed": np.array([m.speed for m in figures]),
        "work_s": np.array(job.expected_duration_s),
        "margin_slots": np.array(int(math.ceil(getattr(rules, "deadline_margin_s", 0.0) / slot - 1e-9))),
        "dwell_slots": np.array(max(int(math.ceil(rules.min_dwell_s / slot - 1e-9)), 1)),
        "wall_s": np.array(wall), "cpu_s": np.array(cpu_s), "load": np.array([load[0], os.getloadavg()[0]]),
        "cores": np.array(os.cpu_count() or 1),
    }
    for name in _STRATS:
        data[f"g_{name}"] = np.array([result.outcomes[name][k].carbon_g for k in picked])
        data[f"late_{name}"] = np.array([result.outcomes[name][k].late for k in picked])
    if args.save_nights:
        np.savez(args.save_nights, **data)
        print(f"wrote {len(picked)} nights to {args.save_nights}; simulate {wall:.1f} s wall, {cpu_s:.1f} s CPU")
        return
    t = time.perf_counter()
    if args.units_range:
        import exact_nights

        exact_nights.choose_units(data, *args.units_range)
    bounds = solve_here(data, args.problems, args.jobs)
    print(f"exact solves: {time.perf_counter() - t:.1f} s")
    report(data, bounds)


def solve_here(data: dict[str, Any], problems: str, jobs: int) -> np.ndarray:
    """The exact bounds of every saved night, in this process or ``jobs`` forked ones (exact_nights)."""
    import multiprocessing

    import exact_nights

    data.setdefault("work_units_lo", data["work_units"])
    data.setdefault("work_units_hi", data["work_units"])
    exact_nights._IN.update(data)
    probs = [p for p, name in enumerate(("free", "policy")) if name in problems.split(",")]
    tasks = [(k, p, b) for p in probs for k in range(len(data["slots"])) for b in (0, 1)]
    out = np.full((len(data["slots"]), 2, 2), np.nan)
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            done = pool.map(exact_nights._solve, tasks)
    else:
        done = [exact_nights._solve(task) for task in tasks]
    for k, p, b, v in done:
        out[k, p, b] = v
    return out


def report(data: dict[str, Any], bounds: np.ndarray) -> None:
    """The table: strategies beside both bounds of each problem solved, on the nights every bound finished."""
    solved = [p for p in (0, 1) if np.isfinite(bounds[:, p, 0]).any()]
    ok = np.all(np.isfinite(bounds[:, solved, 0]), axis=1)
    uppers = all(np.isfinite(bounds[ok][:, solved, 1]).all(axis=0))
    if not ok.any():
        sys.exit("simulate_exact: no night has all its bounds")
    g = {name: float(data[f"g_{name}"][ok].sum()) for name in _STRATS}
    late = {name: int(data[f"late_{name}"][ok].sum()) for name in _STRATS}
    base = g["baseline"]
    units = " and 1/".join(str(int(u)) for u in data.get("units_chosen", [data["units"]] * 2))
    print(f"{data['label']}: {int(ok.sum())} of {int(data['nights_total'])} nights, perfect forecast; figures "
          f"{'measured' if bool(data['measured']) else 'modelled'}, carbon modelled; exact DP on 1/{units} "
          f"of the reference slot work (lower / upper bound); policy problem: {int(data['margin_slots'])} margin slots, dwell "
          f"{int(data['dwell_slots'])} slots")
    for p in solved:
        lo = float(bounds[ok, p, 0].sum())
        hi_dp = float(bounds[ok, p, 1].sum()) if uppers else math.nan
        # the simulator's oracle runs a schedule on the true speeds with no margin and no dwell: a
        # feasible schedule of the free problem, and gridshift one of the policy problem (it holds
        # the margin and the dwell), so their carbon bounds those optima from above too
        feasible = data["g_oracle"][ok] if p == 0 else data["g_gridshift"][ok]
        hi = float(np.minimum(bounds[ok, p, 1], feasible).sum()) if uppers else float(feasible.sum())
        name = ("free problem (no margin, no dwell)", "policy problem (the policy's margin and dwell)")[p]
        print(f"  {name}: exact optimum between {100 * (1 - lo / base):.3f} % and {100 * (1 - hi / base):.3f} % saving"
              + (f" (DP upper bound alone {100 * (1 - hi_dp / base):.3f} %)" if uppers else
                 f" (upper bound: the {('oracle', 'gridshift')[p]}'s schedule; no DP upper bound solved)"))
        print(f"    {'strategy':<46} {'kgCO2':>9} {'saving':>8} {'share of exact (min-max)':>25} {'misses':>7}")
        for label, s_name in (("baseline (cron time, reference mode)", "baseline"),
                              ("static efficiency (no carbon data)", "static_efficiency"),
                              ("gridshift (planner, re-planned)", "gridshift"),
                              ("simulate's oracle (the planner, no margin/dwell)", "oracle")):
            x = g[s_name]
            share_lo, share_hi = (base - x) / (base - lo), (base - x) / (base - hi)
            print(f"    {label:<46} {x / 1e3:9.3f} {100 * (1 - x / base):7.3f}% {share_lo:11.4f} - {share_hi:.4f} "
                  f"{late[s_name]:7d}")
    for p in solved:  # a schedule cheaper than the exact optimum's lower bound would mean a wrong bound
        for s_name in (("gridshift", "oracle") if p == 0 else ("gridshift",)):
            below = int(np.sum(data[f"g_{s_name}"][ok] < bounds[ok, p, 0] * (1 - 1e-9)))
            if below:
                print(f"  note: {s_name} is below the {('free', 'policy')[p]} problem's lower bound on {below} nights")
    print(f"  simulate: {float(data['wall_s']):.1f} s wall, {float(data['cpu_s']):.1f} s CPU (all processes, "
          f"{int(data['cores'])} cores), load average {data['load'][0]:.2f} at the start, {data['load'][1]:.2f} at the end")


if __name__ == "__main__":
    main()
