"""Do no harm, whatever the forecast: gridshift against static efficiency, per forecaster, per month.

Run from the repository root (needs ``../shared/data``, or ``GRIDSHIFT_SHARED_DATA``):

    nice .venv/bin/python benchmarks/do_no_harm.py [--policies nightly,nightly_8h] [--profile v100|model]
        [--traces de,gb,erco,isne,pjm] [--forecasters history,noisy10,...] [--half first|second] [--json OUT]

For every shared trace (DE and GB 2020, the three DACF grids Jul-Dec 2021), every forecaster the
trace allows (history; the true future with 10 % and 30 % autocorrelated error; on the DACF grids
also the issued archive raw and fused, and that archive moved 12 h later, a forecast with no skill
for the night) and each policy, one ``simulate`` run prints in the same line:

- the whole-trace ratio of gridshift's grams to static efficiency's (the frugal mode at the cron
  time: what a user picks with no carbon data) -- the acceptance bound is x1.001;
- the worst calendar month's ratio (by the cron time's UTC month) -- bound x1.005;
- the timing share, (static efficiency - gridshift) / (static efficiency - oracle), and the mode
  share, (baseline - static efficiency) / (baseline - oracle): the parts of the oracle's saving
  that the forecast and the mode each give;
- grams saved by the timing part (static efficiency - gridshift), and deadline misses.

``--half first|second`` keeps only the jobs of the first or second half of each trace (for choosing
a constant on one half and confirming it on the other). Intensities and issued forecasts are
measured; energy and carbon are modelled from the mode figures (the measured V100 profile, or the
simulated backend's model).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHARED = Path(os.environ.get("GRIDSHIFT_SHARED_DATA", REPO.parent / "shared" / "data"))
TRACES = {
    "de": ("lets-wait-awhile/ger_ci.csv", None),
    "gb": ("lets-wait-awhile/gb_ci.csv", None),
    "erco": ("dacf/erco_2021_actual.csv", "dacf/erco_2021_dacf_issued.csv"),
    "isne": ("dacf/isne_2021_actual.csv", "dacf/isne_2021_dacf_issued.csv"),
    "pjm": ("dacf/pjm_2021_actual.csv", "dacf/pjm_2021_dacf_issued.csv"),
}
ALL_FORECASTERS = ("history", "noisy10", "noisy30", "issued", "fused", "issued_moved", "fused_moved")
WHOLE_BOUND, MONTH_BOUND = 1.001, 1.005


def _forecaster(name: str, series: Any, archive_path: Path | None) -> Any:
    from carbon.forecasts.issued import IssuedForecasts, read_issued_forecasts
    from simulation.sim_forecast import DailyProfileForecaster, FusedForecaster, IssuedForecaster, NoisyTraceForecaster
    from simulation.simulate import resample

    t0, step, _ = resample(series)
    if name == "history":
        return DailyProfileForecaster(step_s=step)
    if name.startswith("noisy"):
        return NoisyTraceForecaster(error=int(name[5:]) / 100.0, seed=0)
    if archive_path is None:
        return None
    real = read_issued_forecasts(archive_path)
    if name.endswith("_moved"):  # the same issues, each for 12 h later than it was: no skill for the night
        real = IssuedForecasts(issued_s=real.issued_s, valid_s=[v + 43200.0 for v in real.valid_s], values=real.values)
    raw = IssuedForecaster(real, origin_s=t0.timestamp(), step_s=step)
    if name.startswith("issued"):
        return raw
    return FusedForecaster({"archive": raw.as_issued, "history": DailyProfileForecaster(step_s=step).forecast},
                           step_s=step)


def _month(t0: datetime, nominal_s: float) -> str:
    return f"{t0 + timedelta(seconds=nominal_s):%Y-%m}"


def evaluate(result: Any, *, half: str | None = None) -> dict[str, Any]:
    """Whole-trace and per-month figures of one simulation (see the module docstring)."""
    out = result.outcomes
    n = len(out["gridshift"])
    keep = range(n)
    if half == "first":
        keep = range(n // 2)
    elif half == "second":
        keep = range(n // 2, n)
    sums: dict[str, float] = defaultdict(float)
    months: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    misses = 0
    for k in keep:
        m = _month(result.t0, out["gridshift"][k].nominal_s)
        for name in ("baseline", "static_efficiency", "gridshift", "oracle"):
            g = out[name][k].carbon_g
            sums[name] += g
            months[m][name] += g
        months[m]["jobs"] += 1
        misses += out["gridshift"][k].late
    b, s, g, o = sums["baseline"], sums["static_efficiency"], sums["gridshift"], sums["oracle"]
    per_month = {m: v["gridshift"] / v["static_efficiency"] for m, v in sorted(months.items())}
    worst = max(per_month, key=per_month.get) if per_month else ""
    return {
        "jobs": len(keep), "misses": misses, "ratio": g / s, "worst_month": worst,
        "worst_month_ratio": per_month.get(worst, float("nan")), "months": per_month,
        "timing_share": (s - g) / (s - o) if s > o else None, "mode_share": (b - s) / (b - o) if b > o else None,
        "timing_g": s - g, "oracle_share": (b - g) / (b - o) if b > o else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policies", default="nightly,nightly_8h")
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--forecasters", default=",".join(ALL_FORECASTERS))
    ap.add_argument("--profile", default="v100", choices=("v100", "model"))
    ap.add_argument("--half", choices=("first", "second"))
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--z", type=float, default=None, help="the gate's standard errors (default: the shipped Z)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not SHARED.exists():
        sys.exit(f"{SHARED}: the shared data folder is not here (set GRIDSHIFT_SHARED_DATA)")

    if args.z is not None:
        from scheduler.loop import gate

        gate.Z = args.z
    from backends.simulated import SimulatedBackend
    from carbon.trace_file import read_trace
    from scheduler.planner.mode_figures import figures_for_policy
    from scheduler.policy.loader import load_policy
    from simulation.simulate import simulate

    rows = []
    print(f"{'trace':<5} {'policy':<11} {'forecaster':<13} {'jobs':>4} {'miss':>4} {'whole':>7} {'worst month':>17} "
          f"{'timing':>7} {'mode':>6} {'oracle':>7} {'timing kg':>9} {'s':>5}  verdict", flush=True)
    for pname in args.policies.split(","):
        ppath = REPO / "examples" / f"{pname}.yaml"
        policy = load_policy(ppath)
        if args.profile == "v100":
            modes = figures_for_policy(policy, profile=SHARED / "zeus" / "profiles" / "V100+resnet50+gpu0.csv",
                                       policy_path=ppath)
        else:
            modes = figures_for_policy(policy, backend=SimulatedBackend(), policy_path=ppath)
        for tname in args.traces.split(","):
            trace_rel, archive_rel = TRACES[tname]
            series = read_trace(SHARED / "carbon" / trace_rel)
            for fname in args.forecasters.split(","):
                forecaster = _forecaster(fname, series, SHARED / "carbon" / archive_rel if archive_rel else None)
                if forecaster is None:
                    continue
                t = time.perf_counter()
                result = simulate(policy, series, modes, forecaster, strategies=("static_efficiency",),
                                  workers=args.workers)
                ev = evaluate(result, half=args.half)
                ev.update(trace=tname, policy=pname, forecaster=fname, seconds=time.perf_counter() - t)
                ok = ev["ratio"] <= WHOLE_BOUND and ev["worst_month_ratio"] <= MONTH_BOUND and ev["misses"] == 0
                ts = "-" if ev["timing_share"] is None else f"{ev['timing_share']:.3f}"
                ms = "-" if ev["mode_share"] is None else f"{ev['mode_share']:.3f}"
                os_ = "-" if ev["oracle_share"] is None else f"{ev['oracle_share']:.3f}"
                print(f"{tname:<5} {pname:<11} {fname:<13} {ev['jobs']:>4} {ev['misses']:>4} {ev['ratio']:>7.4f} "
                      f"{ev['worst_month']:>8} {ev['worst_month_ratio']:>8.4f} {ts:>7} {ms:>6} {os_:>7} "
                      f"{ev['timing_g'] / 1000:>9.2f} {ev['seconds']:>5.0f}  {'ok' if ok else 'HARM'}", flush=True)
                rows.append(ev)
    worst: dict[str, dict[str, Any]] = {}
    for r in rows:
        w = worst.get(r["forecaster"])
        if w is None or r["worst_month_ratio"] > w["worst_month_ratio"]:
            worst[r["forecaster"]] = r
    print("\nworst month per forecaster (bound x%.3f; whole trace x%.3f):" % (MONTH_BOUND, WHOLE_BOUND))
    for f, r in worst.items():
        print(f"  {f:<13} {r['worst_month_ratio']:.4f} ({r['trace']} {r['policy']} {r['worst_month']}); "
              f"worst whole trace {max(x['ratio'] for x in rows if x['forecaster'] == f):.4f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
