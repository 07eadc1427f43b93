"""Price and carbon in one plan: a year of DE-LU 2020 and half a year of ERCOT 2021, at several carbon prices.

Run from the repo root (the shared data beside the repository):
    nice .venv/bin/python benchmarks/price_carbon.py [--shared ../shared] [--workers 1] [--json OUT.json]

For each grid (real hourly day-ahead prices and the real carbon trace they pair with) and each
objective, ``gridshift simulate examples/nightly.yaml --trace CARBON --price-trace PRICES`` is run and
its strategies are printed side by side: carbon, cost, deadline misses, and each against the two exact
single-objective optima computed in the same run (least carbon, least cost: perfect foresight, no
margin, no dwell), with what a tonne avoided costs between them. The objectives: none (carbon only,
as before prices: cost reported, not planned on), ``carbon_price`` 0 (cost only), 85 per tonne (about
the EU ETS price of 2023) and 500 per tonne (a high one). ERCOT's prices are USD, DE-LU's EUR; the same
numbers are used as carbon prices in each currency.

What is measured and what is modelled: intensities and prices are real (the data's READMEs say where
from); energy is modelled from the simulated H200's mode figures, so carbon and cost are modelled.
Day-ahead prices are read as published (SDAC: 13:00 Europe/Berlin the day before; ERCOT: 13:30
America/Chicago); the carbon forecast is the built-in one on past data, under the do-no-harm gate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CARBON_PRICES: tuple[float | None, ...] = (None, 0.0, 85.0, 500.0)
ORDER = ("baseline", "static_efficiency", "best_static", "threshold", "gridshift", "oracle", "oracle_carbon", "oracle_cost")
LABEL = {"static_efficiency": "static efficiency", "best_static": "best static (foresight)",
         "oracle": "oracle (objective)", "oracle_carbon": "least carbon (exact)", "oracle_cost": "least cost (exact)"}


def grids(shared: Path) -> list[dict[str, Any]]:
    return [
        {"name": "DE-LU 2020", "carbon": shared / "data/carbon/lets-wait-awhile/ger_ci.csv",
         "prices": shared / "data/price/de_lu_dayahead_2020.csv", "market": "SDAC"},
        {"name": "ERCOT Jul-Dec 2021", "carbon": shared / "data/carbon/dacf/erco_2021_actual.csv",
         "prices": shared / "data/price/ercot_hubavg_dayahead_2021.csv", "market": "ERCOT"},
    ]


def run(grid: dict[str, Any], carbon_price: float | None, workers: int) -> dict[str, Any]:
    cmd = [str(REPO / ".venv" / "bin" / "gridshift"), "simulate", str(REPO / "examples" / "nightly.yaml"),
           "--trace", str(grid["carbon"]), "--price-trace", str(grid["prices"]), "--price-market", grid["market"],
           "--workers", str(workers), "--json"]
    if carbon_price is not None:
        cmd += ["--carbon-price", f"{carbon_price:g}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def table(grid: dict[str, Any], carbon_price: float | None, s: dict[str, Any]) -> list[str]:
    p = s["price"]
    cur = p["currency"]
    head = (f"{grid['name']}: {s['jobs']} nights, objective {p['objective']}  "
            f"[{s['runtime_s']:.0f} s; {p['tradeoff']['sentence']}]")
    lines = [head, f"  {'strategy':<26} {'CO2 kg':>8} {'cost ' + cur:>10} {'misses':>6} {'cost vs least-cost':>19} "
                   f"{'CO2 vs least-carbon':>20}"]
    for name in ORDER:
        st = s["strategies"].get(name)
        if st is None:
            continue
        vs = p["against_optima"][name]
        lines.append(f"  {LABEL.get(name, name):<26} {st['carbon_g'] / 1000:>8.1f} {st['cost']:>10.2f} "
                     f"{st['deadline_misses']:>6} {_pct(vs['cost_over_cost_optimum']):>19} "
                     f"{_pct(vs['carbon_over_carbon_optimum']):>20}")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.2f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="write every run's summary here")
    args = ap.parse_args()
    found = [g for g in grids(args.shared) if g["carbon"].is_file() and g["prices"].is_file()]
    if not found:
        sys.exit(f"no shared data under {args.shared} (give --shared)")
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; energy modelled (simulated H200 "
          "figures), intensities and prices real")
    t0 = time.perf_counter()
    kept: list[dict[str, Any]] = []
    for grid in found:
        for cp in CARBON_PRICES:
            s = run(grid, cp, args.workers)
            kept.append({"grid": grid["name"], "carbon_price": cp, "summary": s})
            print("\n".join(table(grid, cp, s)), end="\n\n", flush=True)
    print(f"{time.perf_counter() - t0:.0f} s in all; load after: {os.getloadavg()[0]:.2f} (1 min)")
    if args.json is not None:
        args.json.write_text(json.dumps(kept, sort_keys=True, indent=1))


if __name__ == "__main__":
    main()
