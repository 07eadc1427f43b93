"""Generalisation checks of the batch-size optimiser on the real Zeus NSDI'23 traces (modelled from traces).

    PYTHONPATH=. python benchmarks/zeus_trace.py [--traces ../shared/data/zeus/trace] [--lowo] [--defaults]

The headline table is ``gridshift bench zeus-trace --traces DIR``. This script adds two checks that
the optimiser is not fitted to the three public workloads:

- ``--lowo`` (leave one workload out): the optimiser's only constants are three priors
  (``prior_cv``, ``prior_shape_sd``, ``prior_weight``). For each workload, choose them on a 3x3x3
  grid by the geometric mean gridshift/Zeus on the OTHER two workloads, then report the held-out
  workload with that choice, next to the shipped defaults and the grid's best and worst.
- ``--defaults``: every batch size whose runs all reach the target becomes the default in turn (a
  different search problem each: start far below or above the optimum); gridshift vs the Zeus
  replica from the same start, and the oracle.

Seeds 0-4, 50 recurrences, eta 0.5, beta 2, as the acceptance. Zeus figures are the replica's here
(it matches Zeus's own simulator to 1e-6 on the defaults of the spec: tests/plans/test_zeus_real_traces.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np

from plans.batch_size import BatchSizeConfig
from plans.zeus_trace import GridshiftPolicy, JobInfo, ZeusReplica, load_trace_job, oracle, simulate, trace_workloads
from plans.zeus_trace.trace import TraceJob

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "zeus" / "trace"
SEEDS = range(5)
N = 50
ETA, BETA = 0.5, 2.0
DEFAULT_PRIORS = (0.1, 0.3, 2.0)


def mean_costs(trace: TraceJob, priors: tuple[float, float, float] | None) -> tuple[float, float]:
    """(gridshift, zeus replica) mean cumulative cost over the seeds."""
    info = JobInfo.of(trace, eta=ETA, beta=BETA)
    ours, zeus = [], []
    for s in SEEDS:
        cfg = None
        if priors is not None:
            cv, shape, w = priors
            cfg = BatchSizeConfig(info.batch_sizes, info.default_b, horizon=N, beta=BETA,
                                  prior_cv=cv, prior_shape_sd=shape, prior_weight=w)
        pol = GridshiftPolicy(info, rng=np.random.default_rng([s, 1]), config=cfg, horizon=N)
        ours.append(simulate(pol, trace, recurrences=N, seed=s, eta=ETA, beta=BETA).cumulative_cost)
        zeus.append(simulate(ZeusReplica(info, seed=s), trace, recurrences=N, seed=s, eta=ETA, beta=BETA).cumulative_cost)
    return float(np.mean(ours)), float(np.mean(zeus))


def geomean(xs: list[float]) -> float:
    return math.exp(float(np.mean(np.log(xs))))


def lowo(traces: dict[str, list[TraceJob]]) -> None:
    grid = list(itertools.product((0.05, 0.1, 0.2), (0.15, 0.3, 0.6), (1.0, 2.0, 4.0)))
    zeus = {w: [mean_costs(t, None)[1] for t in ts] for w, ts in traces.items()}
    ratio: dict[tuple, dict[str, float]] = {}
    for priors in grid:
        ratio[priors] = {w: geomean([mean_costs(t, priors)[0] / z for t, z in zip(ts, zeus[w])]) for w, ts in traces.items()}
    print("leave one workload out: priors (prior_cv, prior_shape_sd, prior_weight) chosen on the other workloads")
    print(f"{'held out':12s} {'chosen priors':>18s} {'held-out gs/zeus':>17s} {'shipped':>8s} {'grid best':>10s} {'grid worst':>11s}")
    for held in traces:
        train = [w for w in traces if w != held]
        pick = min(grid, key=lambda k: geomean([ratio[k][w] for w in train]))
        col = [ratio[k][held] for k in grid]
        print(f"{held:12s} {str(pick):>18s} {ratio[pick][held]:17.4f} {ratio[DEFAULT_PRIORS][held]:8.4f} {min(col):10.4f} {max(col):11.4f}")
    print("(geometric mean gridshift / Zeus replica over the 4 GPUs of the held-out workload)")


def defaults(traces: dict[str, list[TraceJob]]) -> None:
    print(f"{'workload':12s} {'gpu':8s} {'b0':>5s} {'gridshift/oracle':>16s} {'zeus/oracle':>11s} {'gs/zeus':>8s}")
    rows = []
    for w, ts in traces.items():
        for t in ts:
            o = N * oracle(t, eta=ETA)[0]
            for b in t.batch_sizes:
                runs = t.target_epochs.get(b, ())
                if not runs or any(x is None or x > t.job.max_epochs for x in runs):
                    continue
                g, z = mean_costs(dataclasses.replace(t, default_b=b), None)
                rows.append(g / z)
                mark = "*" if b == t.default_b else " "
                print(f"{w:12s} {t.gpu:8s} {b:5d}{mark} {g / o:16.4f} {z / o:11.4f} {g / z:8.4f}")
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
