"""Exact optima of sampled nights, solved in parallel with numpy alone (no gridshift import).

Run from the repo root, on inputs written by ``benchmarks/simulate_exact.py --save-nights``:
    python benchmarks/exact_nights.py nights.npz bounds.npz [--jobs 16] [--limit-s 220]

For every night and every problem in the file (``free``: no margin, no dwell; ``policy``: the
policy's deadline margin and dwell) it solves :func:`exact_slots.exact_dp` twice, speeds rounded up
(a lower bound of the exact optimum) and down (an upper bound). Solves are spread over ``--jobs``
processes; what is done when ``--limit-s`` runs out is written (NaN where a solve did not finish),
so a time-limited machine still returns every finished bound. Needs only numpy, so it runs where
the project's other dependencies are not installed.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exact_slots import exact_dp  # noqa: E402

_IN: dict[str, np.ndarray] = {}


def _solve(task: tuple[int, int, int]) -> tuple[int, int, int, float]:
    """(night, problem, bound) -> its exact value; problem 0 free, 1 the policy's; bound 0 lower, 1 upper."""
    k, prob, bound = task
    n = int(_IN["slots"][k]) - (int(_IN["margin_slots"]) if prob else 0)
    units = _IN["units_up"] if bound == 0 else _IN["units_down"]
    work = _IN["work_units_lo"] if bound == 0 else _IN["work_units_hi"]
    v = exact_dp(_IN["intensity"][k, :n], _IN["power_w"], units, slot_s=float(_IN["slot_s"]),
                 work_units=int(work), first_start=0, deadline_slots=n,
                 dwell_slots=int(_IN["dwell_slots"]) if prob else 1)
    return k, prob, bound, v


def choose_units(data: dict[str, np.ndarray], lo: int, hi: int) -> None:
    """Units per reference slot for each bound, from ``lo``..``hi``: the one whose rounding of the
    speeds (up for the lower bound, down for the upper) is the smallest share of any mode's speed.
    Any choice gives valid bounds (rounding up only makes modes faster, down slower; the work is
    rounded down for the lower bound and up for the upper); the best one gives the narrowest bracket."""
    speed, slot, work_s = np.asarray(data["speed"], dtype=float), float(data["slot_s"]), float(data["work_s"])
    us = np.arange(lo, hi + 1)
    x = us[:, None] * speed[None, :]
    u_up = int(us[np.argmin(((np.ceil(x - 1e-9) - x) / x).max(axis=1))])
    u_dn = int(us[np.argmin(((x - np.floor(x + 1e-9)) / x).max(axis=1))])
    data["units_up"] = np.ceil(u_up * speed - 1e-9).astype(np.int64)
    data["units_down"] = np.floor(u_dn * speed + 1e-9).astype(np.int64)
    data["work_units_lo"] = np.array(int(math.floor(work_s / slot * u_up + 1e-9)))
    data["work_units_hi"] = np.array(int(math.ceil(work_s / slot * u_dn - 1e-9)))
    data["units_chosen"] = np.array([u_up, u_dn])


def _stride(k: int) -> int:
    """0 for every 8th night, 1 for the other 4th, 2 for the other 2nd, 3 for the rest."""
    return next((i for i, s in enumerate((8, 4, 2)) if k % s == 0), 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("nights")
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    ap.add_argument("--limit-s", type=float, default=1e9)
    ap.add_argument("--problems", default="free,policy")
    ap.add_argument("--bounds", default="lower,upper", help="lower (speeds rounded up), upper (down), or both")
    ap.add_argument("--units-range", nargs=2, type=int, default=None, metavar=("LO", "HI"),
                    help="choose the units per bound from this range (see choose_units); default: the file's")
    args = ap.parse_args()
    data = dict(np.load(args.nights))
    if args.units_range:
        choose_units(data, *args.units_range)
    data.setdefault("work_units_lo", data["work_units"])
    data.setdefault("work_units_hi", data["work_units"])
    _IN.update(data)
    nights = len(data["slots"])
    probs = [p for p, name in enumerate(("free", "policy")) if name in args.problems.split(",")]
    # nights spread over the year first (every 8th, then every 4th, ...), all of a night's solves
    # together: a limit that stops the pool leaves whole nights from every season
    order = sorted(range(nights), key=lambda k: (_stride(k), k))
    kinds = [b for b, name in enumerate(("lower", "upper")) if name in args.bounds.split(",")]
    tasks = [(k, p, b) for k in order for p in probs for b in kinds]
    out = np.full((nights, 2, 2), np.nan)
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        it = pool.imap_unordered(_solve, tasks)
        for _ in tasks:
            left = args.limit_s - (time.perf_counter() - t0)
            try:
                k, p, b, v = it.next(timeout=max(left, 0.01))
            except multiprocessing.TimeoutError:
                break
            out[k, p, b] = v
        pool.terminate()
    np.savez(args.out, bounds=out, units=data.get("units_chosen", np.array([data["units"], data["units"]])))
    done = int(np.isfinite(out).sum())
    print(f"{done} of {len(tasks)} solves in {time.perf_counter() - t0:.1f} s on {args.jobs} processes")


if __name__ == "__main__":
    main()
