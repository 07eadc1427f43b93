"""The priced plan where the price goes below zero: every DE-LU 2020 half-day with a negative hour.

Run from the repo root:
    nice .venv/bin/python benchmarks/below_zero_prices.py [--shared ../shared] [--baseline REV] [--hours 4]

For each 12 h window of 2020 (00:00 and 12:00 UTC) with at least one negative day-ahead price, a
job of ``--hours`` of work is planned in it, from the window's start to its end, at carbon prices 0
(cost only) and 85 per tonne, dwell 5 and 30 min, 5-min slots, by:

- ``at once``: the simplest plan a user could pick instead, the fast mode from the first slot;
- ``planner``: ``scheduler.planner.plan_slots`` of the working tree;
- ``baseline``: the same with ``scheduler/planner/solve.py`` from git revision ``--baseline`` (optional);
- ``exact``: the optimum of the same slotted problem by ``exact_slots.exact_dp`` (whole work units,
  nothing rounded, no code shared with the planner).

Each plan's value is its true objective (cost + carbon price x carbon) on the real prices and
intensities. The gap to the exact optimum is printed in units of the job's energy valued at the
window's largest weight (the objective itself can net to about zero when the price changes sign), and
the gain over ``at once`` in the objective's currency.

What is measured and what is modelled: prices (netztransparenz.de via fritzthekid/smard-utils) and
intensities (``ger_ci.csv``, hourly means) are real; the two modes (300 W at full speed, 210 W at 0.8)
are modelled figures, as in ``tests/scheduler/test_objective.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from carbon.prices.trace import read_price_trace  # noqa: E402
from carbon.trace_file import read_trace  # noqa: E402
from exact_slots import exact_dp  # noqa: E402
from scheduler.planner import ModeFigures, Objective, PlanConstraints, PlanJob, plan_slots  # noqa: E402
from scheduler.planner.objective import objective_weights  # noqa: E402

SLOT = 300.0
UNITS = 200  # exact_dp's work units per reference slot: speeds 1.0 and 0.8 are whole
MODES = [ModeFigures("speed", 300.0, 1.0), ModeFigures("efficiency", 210.0, 0.8)]


def hourly(points, start: datetime, hours: int, value) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Hourly means of a series' points from ``start`` on (a point counts in the hour it starts in)."""
    sums, counts = np.zeros(hours), np.zeros(hours)
    for p in points:
        h = int((p.start - start).total_seconds() // 3600)
        if 0 <= h < hours:
            sums[h] += value(p)
            counts[h] += 1
    return sums / np.maximum(counts, 1)


def windows(prices: np.ndarray, hours: int = 12) -> list[int]:
    """Start hours (every 12 h) of the windows with a negative price."""
    return [h for h in range(0, len(prices) - hours + 1, 12) if prices[h:h + hours].min() < 0]


def baseline_planner(rev: str) -> ModuleType:
    """``scheduler.planner`` with ``solve.py`` taken from git revision ``rev`` (the rest from the working tree)."""
    text = subprocess.run(["git", "show", f"{rev}:scheduler/planner/solve.py"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "solve_baseline.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("solve_baseline", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def value_of(plan, carbon_price: float) -> float:  # type: ignore[no-untyped-def]
    return carbon_price * plan.carbon_g / 1e6 + plan.cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--baseline", help="git revision whose solve.py to compare with (e.g. 5b0a36b)")
    ap.add_argument("--hours", type=float, default=4.0, help="the job's work at full speed, hours")
    args = ap.parse_args()
    price_file = args.shared / "data/price/de_lu_dayahead_2020.csv"
    carbon_file = args.shared / "data/carbon/lets-wait-awhile/ger_ci.csv"
    if not price_file.is_file() or not carbon_file.is_file():
        sys.exit(f"below_zero_prices: needs {price_file} and {carbon_file} (the shared data)")
    t0 = datetime(2020, 1, 1, tzinfo=timezone.utc)
    year_h = 366 * 24
    prices = hourly(read_price_trace(price_file).points, t0, year_h, lambda p: p.per_mwh)
    carbon = hourly(read_trace(carbon_file).points, t0, year_h, lambda p: p.g_per_kwh)
    found = windows(prices)
    print(f"DE-LU 2020: {int((prices < 0).sum())} negative hours, {len(found)} 12 h windows with one; "
          f"job {args.hours:g} h of work in 12 h; modes modelled (300 W x1.0, 210 W x0.8), prices and carbon real")

    import scheduler.planner as planner

    current = planner.solve_slots
    old = baseline_planner(args.baseline).solve_slots if args.baseline else None
    power = np.array([m.power_w for m in MODES])
    units = np.array([round(m.speed * UNITS) for m in MODES])
    work_s = args.hours * 3600
    rows: dict[tuple[float, int], dict[str, list[float]]] = {}
    started = time.monotonic()
    for i, h in enumerate(found):
        now = t0 + timedelta(hours=h)
        c, p = np.repeat(carbon[h:h + 12], 12), np.repeat(prices[h:h + 12], 12)
        n = len(c)
        job = PlanJob(work_s=work_s, not_before=now, deadline=now + timedelta(hours=12))
        for cp in (0.0, 85.0):
            w = objective_weights(c, p, cp)
            scale = float(np.max(np.abs(w))) * MODES[0].power_w * work_s / 3.6e6
            at_once = float(np.sum(w[:int(round(work_s / SLOT))]) * MODES[0].power_w * SLOT / 3.6e6)
            for dwell in (1, 6):
                cons = PlanConstraints(slot_s=SLOT, min_dwell_s=dwell * SLOT)
                objective = Objective(carbon_price=cp)
                exact = exact_dp(w, power, units, slot_s=SLOT, work_units=int(round(work_s / SLOT * UNITS)),
                                 first_start=0, deadline_slots=n, dwell_slots=dwell)
                row = rows.setdefault((cp, dwell), {"planner": [], "baseline": [], "gain": [], "exact_gain": [],
                                                    "baseline_gain": []})
                mine = value_of(plan_slots(c, job, MODES, now=now, objective=objective, price=p, constraints=cons), cp)
                row["planner"].append((mine - exact) / scale)
                row["gain"].append(at_once - mine)
                row["exact_gain"].append(at_once - exact)
                if old is not None:
                    planner.solve_slots = old  # plan_slots calls the package's name
                    try:
                        theirs = value_of(plan_slots(c, job, MODES, now=now, objective=objective, price=p,
                                                     constraints=cons), cp)
                    finally:
                        planner.solve_slots = current
                    row["baseline"].append((theirs - exact) / scale)
                    row["baseline_gain"].append(at_once - theirs)
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{len(found)} windows, {time.monotonic() - started:.0f} s", file=sys.stderr)
    print("\ngap to the exact optimum, in units of the job's energy at the window's largest weight "
          "(0 = exact); gain over 'at once' in EUR")
    print(f"{'carbon price':>12} {'dwell':>6} {'planner: mean':>14} {'max':>8} {'>1%':>4}"
          + (f" {'baseline: mean':>15} {'max':>8} {'>1%':>4}" if old else "")
          + f" {'gain: planner':>14} {'exact':>9} {'share':>7}" + (f" {'baseline share':>15}" if old else ""))
    for (cp, dwell), row in sorted(rows.items()):
        gap, base = np.array(row["planner"]), np.array(row["baseline"])
        gain, best = sum(row["gain"]), sum(row["exact_gain"])
        line = f"{cp:>12g} {dwell * SLOT / 60:>4.0f} m {gap.mean():>14.5f} {gap.max():>8.5f} {int((gap > 0.01).sum()):>4}"
        if old:
            line += f" {base.mean():>15.5f} {base.max():>8.5f} {int((base > 0.01).sum()):>4}"
        line += f" {gain:>14.4f} {best:>9.4f} {gain / best if best else float('nan'):>7.4f}"
        print(line + (f" {sum(row['baseline_gain']) / best if best else float('nan'):>15.4f}" if old else ""))
    print(f"({len(found)} windows x {len(rows)} settings, {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
