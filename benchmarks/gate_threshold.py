"""How the do-no-harm gate's one constant (``scheduler.loop.gate.Z``) was chosen: on one half, confirmed on the other.

Run from the repository root (needs ``../shared/data``):

    nice .venv/bin/python benchmarks/gate_threshold.py [--policies nightly] [--traces de,gb,erco,isne,pjm]
        [--z 0,0.5,1,1.5,2,3] [--choose-on first|second]

For every shared trace and forecaster (as ``benchmarks/do_no_harm.py``) and both mode-figure sets (the measured V100
profile, the simulated backend's H200 model: ``simulate``'s default), each night is simulated
once under every forecast the gate may pick and once under none (the static plan), and each
forecast's record (its gain over the static plan, night by night) is kept. Any gate constant then
replays in no time: night by night it picks what the gate would have picked on the record before
that night, and takes that night's outcome. The script prints, per constant and per half of the
nights, the worst month and worst whole-half ratio to static efficiency over all traces and
forecasters, and the timing gain kept (kg, and as a share of the gain with every forecast trusted).
The constant is the one that keeps every month within x1.005 and every half within x1.001 on the
``--choose-on`` half with the most timing gain; the other half confirms it. Intensities measured;
energy and carbon modelled.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def _nightly_outcomes(policy: Any, series: Any, modes: Any, forecaster: Any) -> dict[str, Any]:
    """Per night: static efficiency's grams, the grams under each forced choice, and each forecast's gains."""
    import simulation.sim_gate as sim_gate
    from scheduler.loop.gate import STATIC, ForecastChoice
    from simulation.simulate import simulate

    forced: list[ForecastChoice] = []
    seen: list[Any] = []
    original = sim_gate.NightRecords.choice

    def choice(self: Any, k: int) -> ForecastChoice:
        if not seen:
            seen.append(self)
        return forced[0]

    sim_gate.NightRecords.choice = choice  # type: ignore[method-assign]
    try:
        forced.append(STATIC)
        base = simulate(policy, series, modes, forecaster, strategies=("static_efficiency",), workers=1)
        records = seen[0]
        grams = {None: [j.carbon_g for j in base.outcomes["gridshift"]]}
        for label in records.candidates:
            forced[0] = ForecastChoice(label)
            res = simulate(policy, series, modes, forecaster, strategies=("static_efficiency",), workers=1)
            grams[label] = [j.carbon_g for j in res.outcomes["gridshift"]]
    finally:
        sim_gate.NightRecords.choice = original  # type: ignore[method-assign]
    n = len(base.outcomes["gridshift"])
    gains = {label: [records.gain(label, k) for k in range(n)] for label in records.candidates}
    months = [f"{base.t0.timestamp() + j.nominal_s:.0f}" for j in base.outcomes["gridshift"]]
    from datetime import datetime, timezone

    months = [datetime.fromtimestamp(float(m), tz=timezone.utc).strftime("%Y-%m") for m in months]
    return {"static": [j.carbon_g for j in base.outcomes["static_efficiency"]], "grams": grams, "gains": gains,
            "months": months, "records": records}


def _replay(case: dict[str, Any], z: float, keep: range) -> dict[str, float]:
    """The gate with constant ``z`` over the whole trace; figures over the nights in ``keep``."""
    from scheduler.loop.gate import RECORD_NIGHTS, ForecastRecord, choose_forecast

    records = case["records"]
    per_month: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    total = [0.0, 0.0, 0.0]  # gridshift, static efficiency, every forecast trusted
    first = next(iter(case["grams"]))
    trusting = next(label for label in case["grams"] if label is not None)
    for k in keep:
        decision = records.nominals[k] + records.earliest_s
        past = [j for j in range(k - 1, -1, -1) if records.nominals[j] + records.deadline_s <= decision][:RECORD_NIGHTS]
        recs = [ForecastRecord(label, tuple(g for j in reversed(past) if (g := gains[j]) is not None))
                for label, gains in case["gains"].items()]
        label = choose_forecast(recs, z=z).label
        g = case["grams"][label if label in case["grams"] else first][k]
        m = case["months"][k]
        per_month[m][0] += g
        per_month[m][1] += case["static"][k]
        total[0] += g
        total[1] += case["static"][k]
        total[2] += case["grams"][trusting][k]
    worst = max((a / b for a, b in per_month.values()), default=1.0)
    return {"ratio": total[0] / total[1], "worst_month": worst, "gain_g": total[1] - total[0],
            "trusted_gain_g": total[1] - total[2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policies", default="nightly")
    ap.add_argument("--traces", default="de,gb,erco,isne,pjm")
    ap.add_argument("--forecasters", default="history,noisy10,noisy30,issued,fused,issued_moved,fused_moved")
    ap.add_argument("--z", default="0,0.5,1,1.5,2,3")
    ap.add_argument("--choose-on", default="first", choices=("first", "second"))
    ap.add_argument("--profiles", default="v100,model", help="v100 (the measured Zeus profile), model (the simulated backend's)")
    args = ap.parse_args()

    import do_no_harm as d
    from backends.simulated import SimulatedBackend
    from carbon.trace_file import read_trace
    from scheduler.planner.mode_figures import figures_for_policy
    from scheduler.policy.loader import load_policy

    zs = [float(x) for x in args.z.split(",")]
    cases = []
    for pname, prof in [(p, f) for p in args.policies.split(",") for f in args.profiles.split(",")]:
        ppath = REPO / "examples" / f"{pname}.yaml"
        policy = load_policy(ppath)
        if prof == "v100":
            modes = figures_for_policy(policy, profile=d.SHARED / "zeus" / "profiles" / "V100+resnet50+gpu0.csv",
                                       policy_path=ppath)
        else:
            modes = figures_for_policy(policy, backend=SimulatedBackend(), policy_path=ppath)
        for tname in args.traces.split(","):
            trel, arel = d.TRACES[tname]
            series = read_trace(d.SHARED / "carbon" / trel)
            for fname in args.forecasters.split(","):
                f = d._forecaster(fname, series, d.SHARED / "carbon" / arel if arel else None)
                if f is None:
                    continue
                case = _nightly_outcomes(policy, series, modes, f)
                case["name"] = f"{tname}/{pname}/{prof}/{fname}"
                cases.append(case)
                print(f"simulated {case['name']} ({len(case['static'])} nights)", flush=True)
    print(f"\n{'z':>5} {'half':<7} {'worst month':>22} {'worst half':>22} {'timing kg':>9} {'of trusted':>10}  verdict")
    for half in ("first", "second"):
        for z in zs:
            rows = []
            for case in cases:
                n = len(case["static"])
                keep = range(n // 2) if half == "first" else range(n // 2, n)
                rows.append((case["name"], _replay(case, z, keep)))
            wm = max(rows, key=lambda r: r[1]["worst_month"])
            wh = max(rows, key=lambda r: r[1]["ratio"])
            gain = sum(r[1]["gain_g"] for r in rows)
            trusted = sum(r[1]["trusted_gain_g"] for r in rows)
            ok = wm[1]["worst_month"] <= d.MONTH_BOUND and wh[1]["ratio"] <= d.WHOLE_BOUND
            print(f"{z:>5g} {half:<7} {wm[1]['worst_month']:>8.4f} {wm[0]:>13} {wh[1]['ratio']:>8.4f} {wh[0]:>13} "
                  f"{gain / 1000:>9.2f} {gain / trusted if trusted else 0:>10.2f}  {'ok' if ok else 'HARM'}",
                  flush=True)


if __name__ == "__main__":
    main()
