"""Mean cumulative cost over seeds, gridshift vs the Zeus replica vs the oracle, on every workload x GPU.

    PYTHONPATH=. python benchmarks/zeus_trace.py --train summary_train.csv --power summary_power_v100.csv [...]
        [--recurrences 50] [--seeds 0-4] [--eta 0.5] [--beta 2]

Defaults to the synthetic traces in tests/data/zeus/ (not the real NSDI'23 traces). Ratios are
against the oracle's expected cost per recurrence x recurrences (section 12 of the spec); all
figures are modelled from the traces.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from plans.errors import BadTraceFile
from plans.zeus_trace import JOBS, default_cost, load_trace_job, oracle, run_pair

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "zeus"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=Path, default=DATA / "summary_train.csv")
    ap.add_argument("--power", type=Path, nargs="+", default=sorted(DATA.glob("summary_power_*.csv")))
    ap.add_argument("--recurrences", type=int, default=50)
    ap.add_argument("--seeds", default="0-4")
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--beta", type=float, default=2.0)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    n = args.recurrences
    print(f"{'workload':13s} {'gpu':8s} {'gridshift/oracle':>16s} {'zeus/oracle':>12s} {'default/oracle':>14s}  gridshift<zeus")
    gaps = []
    for power in args.power:
        for w in JOBS:
            try:
                trace = load_trace_job(args.train, power, w)
            except BadTraceFile as exc:
                print(f"{w:13s} {power.stem:8s} skipped: {exc}")
                continue
            ours, zeus = [], []
            for s in seeds:
                g, z = run_pair(trace, recurrences=n, seed=s, eta=args.eta, beta=args.beta)
                ours.append(g.cumulative_cost)
                zeus.append(z.cumulative_cost)
            o = n * oracle(trace, eta=args.eta)[0]
            d = n * default_cost(trace, eta=args.eta)
            g_r, z_r = float(np.mean(ours)) / o, float(np.mean(zeus)) / o
            gaps.append((g_r - 1, z_r - 1))
            print(f"{w:13s} {trace.gpu:8s} {g_r:16.4f} {z_r:12.4f} {d / o:14.4f}  {'yes' if g_r < z_r else 'NO'}")
    if gaps:
        g, z = np.mean(gaps, axis=0)
        print(f"mean regret vs oracle over {len(gaps)} pairs: gridshift {g:.2%}, zeus replica {z:.2%} "
              f"(seeds {args.seeds}, {n} recurrences, eta {args.eta}, beta {args.beta}; modelled from traces)")


if __name__ == "__main__":
    main()
