"""Chase-style check: carbon-aware power limits vs the fixed maximum limit, replaying real carbon traces.

    PYTHONPATH=. python benchmarks/chase.py [--gb /path/to/lets-wait-awhile/gb_ci.csv]

Profiles: (1) the real V100 cifar100/ShuffleNetV2 b=1024 profile shape published with the Zeus
NSDI'23 traces (shared/docs/zeus-trace-simulator.md section 13); (2) a modelled H200 profile from
backends.gpu_model (modelled, not measured). Carbon: the packaged MISO trace (Chase's own replay
trace, marginal) and optionally the GB trace of "Let's Wait Awhile" (average). A 40-hour job (at the
maximum limit) starts at the trace start; the limit is re-chosen every 30 minutes from a perfect
forecast. Every figure is modelled from traces; nothing is measured on hardware here.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from carbon.providers.trace import load_sample_trace
from carbon.series import IntensitySeries
from plans.carbon_replay import fixed_limit, modelled_profile, replay
from plans.power_limit import LimitMeasurement
from plans.selectors import CarbonAware

V100_CIFAR_T_S = [11.276667, 9.216667, 8.493333, 8.213333, 7.843333, 7.670000, 7.613333]
V100_CIFAR_E_J = [979.535, 1007.345, 1112.38, 1132.9189, 1249.05, 1368.46, 1428.95]
V100_CIFAR = tuple(LimitMeasurement(p, t, e) for p, t, e in zip(range(100, 251, 25), V100_CIFAR_T_S, V100_CIFAR_E_J))


def run_one(profile: tuple[LimitMeasurement, ...], series: IntensitySeries, *, eta: float, max_slowdown: float, job_h: float = 40.0) -> dict[str, float]:
    top = max(profile, key=lambda m: m.power_limit_w)
    steps = job_h * 3600.0 / top.time_per_step_s
    base = replay(profile, series, steps=steps, choose=fixed_limit(top.power_limit_w))
    max_ci = max(series.window(series.start, series.start + timedelta(days=3)).values())
    sel = CarbonAware(eta, max_ci_g_per_kwh=max_ci, hysteresis=0.02, min_dwell_s=1800.0, max_slowdown=max_slowdown)
    ours = replay(profile, series, steps=steps, choose=sel)
    return {
        "carbon_fixed_max_g": base.carbon_g,
        "carbon_aware_g": ours.carbon_g,
        "carbon_cut": 1.0 - ours.carbon_g / base.carbon_g,
        "slowdown": ours.duration_s / base.duration_s - 1.0,
        "switches": float(ours.switches),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", help="lets-wait-awhile gb_ci.csv (optional second trace)")
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--max-slowdown", type=float, default=1.05)
    args = ap.parse_args()
    traces = {"MISO (packaged, marginal)": load_sample_trace()}
    if args.gb:
        from carbon.trace_file import read_trace

        traces["GB 2020 (lets-wait-awhile, average)"] = read_trace(args.gb)
    profiles = {"V100 cifar100 b=1024 (Zeus trace)": V100_CIFAR, "H200 transformer step (modelled)": modelled_profile()}
    print(f"Chase-style replay: eta={args.eta}, max slowdown x{args.max_slowdown}, 40 h job, 30 min control interval (modelled)")
    for tname, series in traces.items():
        for pname, prof in profiles.items():
            r = run_one(prof, series, eta=args.eta, max_slowdown=args.max_slowdown)
            print(
                f"  {tname:36s} {pname:34s} fixed max {r['carbon_fixed_max_g'] / 1000:8.2f} kg  carbon-aware "
                f"{r['carbon_aware_g'] / 1000:8.2f} kg  cut {r['carbon_cut']:6.1%}  slowdown {r['slowdown']:5.1%}  switches {int(r['switches'])}"
            )


if __name__ == "__main__":
    main()
