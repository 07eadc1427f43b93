"""Generalisation checks of the batch-size optimiser on the real Zeus NSDI'23 traces (modelled from traces).

    PYTHONPATH=. python benchmarks/zeus_trace.py [--traces ../shared/data/zeus/trace] [--lowo] [--defaults]

The headline table is ``gridshift bench zeus-trace --traces DIR [--synthetic]``. This script adds
two checks that the optimiser is not fitted to the three public workloads:

- ``--lowo`` (leave one workload out): every constant of the optimiser (the ``BatchSizeConfig``
  fields below) gets, in turn, three values with the others at the shipped ones. For each held-out
  workload the value is chosen by the geometric mean gridshift/Zeus over the OTHER two workloads'
  4 GPUs, then the held-out workload is reported with that choice, next to the shipped value and
  the best and worst of the three on the held-out workload itself.
- ``--defaults``: every batch size whose runs all reach the target becomes the default in turn (a
  different search problem each: start far below or above the optimum); gridshift vs the Zeus
  replica from the same start, and the oracle.

Each run prints the never-explore baseline (the default) and the oracle beside it. Seeds 0-4, 50
recurrences, eta 0.5, beta 2, as the acceptance. Zeus figures are the replica's here (it matches
Zeus's own simulator to 1e-6 on the defaults of the spec: tests/plans/test_zeus_real_traces.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np

from plans.batch_size import BatchSizeConfig
from plans.zeus_trace import (GridshiftPolicy, JobInfo, ZeusReplica, default_cost, load_trace_job, oracle, simulate,
                              trace_workloads)
from plans.zeus_trace.job_table import TraceJob

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "zeus" / "trace"
SEEDS = range(5)
N = 50
ETA, BETA = 0.5, 2.0
#: each constant's three values (the middle one shipped), varied one at a time
GRID: dict[str, tuple[float, ...]] = {
    "prior_cv": (0.05, 0.1, 0.2),
    "prior_shape_sd": (0.15, 0.3, 0.6),
    "prior_weight": (1.0, 2.0, 4.0),
    "prior_valley": (0.05, 0.1, 0.2),
    "valley_sd": (0.15, 0.3, 0.6),
    "horizon": (25, 50, 100),
}


def mean_cost(trace: TraceJob, overrides: dict[str, float] | None, *, zeus: bool = False) -> float:
    """Mean cumulative cost over the seeds of gridshift (with ``overrides`` to its config) or the Zeus replica."""
    info = JobInfo.of(trace, eta=ETA, beta=BETA)
    costs = []
    for s in SEEDS:
        if zeus:
            pol: GridshiftPolicy | ZeusReplica = ZeusReplica(info, seed=s)
        else:
            cfg = BatchSizeConfig(info.batch_sizes, info.default_b, beta=BETA, **(overrides or {}))  # type: ignore[arg-type]
            pol = GridshiftPolicy(info, rng=np.random.default_rng([s, 1]), config=cfg)
        costs.append(simulate(pol, trace, recurrences=N, seed=s, eta=ETA, beta=BETA).cumulative_cost)
    return float(np.mean(costs))


def geomean(xs: list[float]) -> float:
    return math.exp(float(np.mean(np.log(xs))))


def lowo(traces: dict[str, list[TraceJob]]) -> None:
    zeus = {w: [mean_cost(t, None, zeus=True) for t in ts] for w, ts in traces.items()}
    print("never explore / Zeus replica / oracle, geometric mean over the 4 GPUs (cost / oracle's):")
    for w, ts in traces.items():
        o = [N * oracle(t, eta=ETA)[0] for t in ts]
        d = geomean([N * default_cost(t, eta=ETA) / x for t, x in zip(ts, o)])
        print(f"  {w:12s} default {d:.4f}  zeus {geomean([z / x for z, x in zip(zeus[w], o)]):.4f}  oracle 1.0000")
    print("leave one workload out: each constant chosen on the other two workloads (geomean gridshift/Zeus)")
    print(f"{'constant':15s} {'held out':12s} {'chosen':>7s} {'held-out gs/zeus':>17s} {'shipped':>8s} "
          f"{'best of 3':>10s} {'worst of 3':>11s}")
    for name, values in GRID.items():
        ratio = {v: {w: geomean([mean_cost(t, {name: v}) / z for t, z in zip(ts, zeus[w])]) for w, ts in traces.items()}
                 for v in values}
        shipped = values[1]
        for held in traces:
            train = [w for w in traces if w != held]
            pick = min(values, key=lambda v: (geomean([ratio[v][w] for w in train]), v != shipped))
            col = [ratio[v][held] for v in values]
            print(f"{name:15s} {held:12s} {pick:7g} {ratio[pick][held]:17.4f} {ratio[shipped][held]:8.4f} "
                  f"{min(col):10.4f} {max(col):11.4f}", flush=True)
    print("(geometric mean gridshift / Zeus replica over the 4 GPUs of the held-out workload)")


def defaults(traces: dict[str, list[TraceJob]]) -> None:
    print(f"{'workload':12s} {'gpu':8s} {'b0':>5s} {'default/oracle':>14s} {'gridshift/oracle':>16s} "
          f"{'zeus/oracle':>11s} {'gs/zeus':>8s}")
    rows = []
    for w, ts in traces.items():
        for t in ts:
            for b in t.batch_sizes:
                runs = t.target_epochs.get(b, ())
                if not runs or any(x is None or x > t.job.max_epochs for x in runs):
                    continue
                tb = dataclasses.replace(t, default_b=b)
                o = N * oracle(tb, eta=ETA)[0]
                g, z = mean_cost(tb, None), mean_cost(tb, None, zeus=True)
                rows.append(g / z)
                mark = "*" if b == t.default_b else " "
                print(f"{w:12s} {t.gpu:8s} {b:5d}{mark} {N * default_cost(tb, eta=ETA) / o:14.4f} {g / o:16.4f} "
                      f"{z / o:11.4f} {g / z:8.4f}", flush=True)
    print(f"{len(rows)} starts: geometric mean gridshift/zeus {geomean(rows):.4f}, worst {max(rows):.4f}, "
          f"{sum(r > 1 for r in rows)} above Zeus (* = the spec's default)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=SHARED)
    ap.add_argument("--lowo", action="store_true")
    ap.add_argument("--defaults", action="store_true")
    args = ap.parse_args()
    train = args.traces / "summary_train.csv"
    powers = sorted(args.traces.glob("summary_power_*.csv"))
    traces = {w: [load_trace_job(train, p, w) for p in powers] for w in trace_workloads(train)}
    if not (args.lowo or args.defaults):
        args.lowo = args.defaults = True
    if args.lowo:
        lowo(traces)
    if args.defaults:
        defaults(traces)


if __name__ == "__main__":
    main()
