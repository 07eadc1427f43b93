"""A year at a power-capped site, with grid events and without: the cap held in every slot, carbon, misses.

Run from the repo root (a trace of each grid; the DE one is in ../shared, the ERCOT one ships):
    nice .venv/bin/python benchmarks/site_cap_year.py ../shared/data/carbon/lets-wait-awhile/ger_ci.csv --events de
    nice .venv/bin/python benchmarks/site_cap_year.py carbon/data/traces/ERCO.csv --events ercot
    (--events FILE replays a file in gridshift curtail's shape: {"events": [GridEvent JSON, ...]};
     --limit N: the first N nights; --exact: a MILP per night says whether a plan meeting every deadline exists;
     --json: one JSON object)

Every night ``--runs`` copies of examples/nightly.yaml's job (3 h at full speed, 21:00-08:00 UTC, one GPU
each) arrive at one site whose ``power_cap_w`` (default 1500 W) is below their summed speed-mode power
(4 x 700 W on the simulated H200). Strategies per night (``simulation/site_cap.py``): uncapped (each
run alone, the cap ignored: its over-cap slots are counted), one after another (placement), gridshift
(placement, then the runs planned together where one misses). Each is run twice: without events, and
with the event set, which lowers the site's cap while it lasts (announced when the night's window
opens). Printed side by side: slots over the cap, misses, carbon, and with ``--exact`` the nights where
a plan meeting every deadline exists and gridshift's misses on them.

Modelled: power and speed per mode (the simulated H200's model, power limits between the modes from its
range). Measured: the grid intensities (the traces). The event sets are illustrative, not the grids'
real calls: ERCOT's shipped trace covers 2021-07..12, so the shape of its February 2021 emergency (one
event of four days and a half, 2021-02-15 07:20 to 02-19 15:00 UTC) is replayed in August at half the
cap, with a week of evening-peak events (22:00-02:00 UTC, 800 W); DE gets the same shapes in January
and December 2020.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

UTC = timezone.utc


def event_set(name: str, site: str) -> list:  # type: ignore[type-arg]
    """The named illustrative event set (see the module docstring), or a file of events."""
    from carbon.events import EventStore, GridEvent, site_scope

    if name not in ("de", "ercot"):
        return EventStore(Path(name)).load()
    year, long_start, week = (2020, datetime(2020, 1, 20, 7, 20, tzinfo=UTC), datetime(2020, 12, 7, 22, tzinfo=UTC)) \
        if name == "de" else (2021, datetime(2021, 8, 15, 7, 20, tzinfo=UTC), datetime(2021, 8, 23, 22, tzinfo=UTC))
    scope = site_scope(site)
    out = [GridEvent(long_start, long_start + timedelta(days=4, hours=7, minutes=40), scope, reduce_pct=50.0,
                     source="illustrative", reason=f"an emergency the shape of ERCOT's of February 2021, in {year}",
                     id=f"{name}-emergency")]
    out += [GridEvent(week + timedelta(days=d), week + timedelta(days=d, hours=4), scope, cap_w=800.0,
                      source="illustrative", reason="evening peak", id=f"{name}-peak-{d}") for d in range(7)]
    return out


def _policy(cap_w: float, site: str):  # type: ignore[no-untyped-def]
    import yaml

    from scheduler.policy.types import Policy

    raw = yaml.safe_load((REPO / "examples/nightly.yaml").read_text())
    raw["sites"] = [{"name": site, "work_pool": "gpu", "gpus_per_node": 8, "power_cap_w": cap_w,
                     "carbon": {"provider": "static", "options": {"country": "USA"}}}]
    return Policy.model_validate(raw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--events", default="ercot", help="de, ercot (illustrative sets) or a file of events")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--cap-w", type=float, default=1500.0)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from backends.simulated import SimulatedBackend
    from carbon.trace_file import read_trace
    from scheduler.planner.mode_figures import figures_for_policy
    from scheduler.run_spec import resolve_run
    from simulation.site_cap import simulate_site_cap

    site = "dc"
    pol = _policy(args.cap_w, site)
    modes = figures_for_policy(pol, backend=SimulatedBackend(), all_limits=False)
    modes += resolve_run(pol).cap_figures()
    truth = read_trace(args.trace)
    events = event_set(args.events, site)
    out: dict[str, object] = {"trace": args.trace, "events": [e.describe() for e in events],
                              "modes": {m.name: [round(m.power_w), round(m.speed, 3)] for m in modes}}
    began = time.perf_counter()
    for label, evs in (("without events", []), ("with events", events)):
        res = simulate_site_cap(pol, site, truth, modes, runs=args.runs, events=evs, limit=args.limit,
                                exact=args.exact)
        out[label] = res.summary()
    out["runtime_s"] = round(time.perf_counter() - began, 1)
    if args.json:
        print(json.dumps(out, sort_keys=True, default=str))
        return
    print(f"site cap {args.cap_w:.0f} W, {args.runs} runs a night; trace {args.trace}; {out['runtime_s']} s")
    print("modes (W, speed): " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in out["modes"].items()))  # type: ignore[union-attr]
    for e in events:
        print("  event " + e.describe())
    for label in ("without events", "with events"):
        s = out[label]
        assert isinstance(s, dict)
        print(f"{label}: {s['nights']} nights, {s['slots']} slots ({s['event_slots']} under an event, "
              f"{s['event_nights']} nights), gridshift's highest summed power {s['max_power_w']:.0f} W")
        print(f"  {'strategy':<20} {'slots over cap':>15} {'misses':>7} {'CO2 kg':>10}")
        for k in s["carbon_g"]:
            print(f"  {k:<20} {s['slots_over_cap'][k]:>15} {s['misses'][k]:>7} {s['carbon_g'][k] / 1000:>10.2f}")
        if s["exact_feasible_nights"] is not None:
            print(f"  exact: {s['exact_feasible_nights']} nights where a plan meets every deadline, gridshift misses "
                  f"{s['misses_where_feasible']} runs on them; {s['exact_unknown_nights']} nights undecided")
        print(f"  joint plans: {s['joint_plans']}")
    print("modelled: power and speed per mode (simulated H200); measured: the intensities (the trace)")


if __name__ == "__main__":
    main()
