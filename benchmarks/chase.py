"""Chase-style check, honestly: carbon-aware power limits vs the BEST STATIC limit vs the maximum limit.

    PYTHONPATH=. python benchmarks/chase.py [--gb ../shared/data/carbon/lets-wait-awhile/gb_ci.csv]

A 40-hour job (at the maximum limit) replays a carbon trace; ``CarbonAware`` (eta 0.5, hysteresis
2 %, dwell 30 min, at most x1.05 slower than the maximum limit) re-chooses the limit every 30 minutes
from a perfect forecast. In the same run, every fixed limit within the same slowdown bound is
replayed too. The **best static limit** is the fixed one with the lowest value of the objective the
selector minimises (``eta * carbon + (1 - eta) * P_max * CI_max * time``). Carbon awareness is
credited only with its difference from that best static limit; most of the cut against the maximum
limit is a lower static limit's.

Traces: the packaged MISO trace (Chase's own replay trace, marginal, 3.5 days: one start) and GB
2020 (Let's Wait Awhile, average; a start every 7 days through 2020, means reported), whose file
defaults to ``../shared/data/carbon/lets-wait-awhile/gb_ci.csv`` when present. Profiles: the real
V100 cifar100/ShuffleNetV2 b=1024 shape of the Zeus traces (spec section 13) and a modelled H200
step (``backends.gpu_model``). Every figure is modelled from traces; nothing is measured here.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from carbon.providers.trace import load_sample_trace
from carbon.series import IntensitySeries
from plans.carbon_replay import ReplayResult, fixed_limit, modelled_profile, replay
from plans.power_limit import LimitMeasurement
from plans.selectors import CarbonAware

V100_CIFAR_T_S = [11.276667, 9.216667, 8.493333, 8.213333, 7.843333, 7.670000, 7.613333]
V100_CIFAR_E_J = [979.535, 1007.345, 1112.38, 1132.9189, 1249.05, 1368.46, 1428.95]
V100_CIFAR = tuple(LimitMeasurement(p, t, e) for p, t, e in zip(range(100, 251, 25), V100_CIFAR_T_S, V100_CIFAR_E_J))
GB_DEFAULT = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "carbon" / "lets-wait-awhile" / "gb_ci.csv"
JOB_H = 40.0


@dataclass(frozen=True)
class Comparison:
    """One start: the maximum limit, the best static limit and the carbon-aware selector."""

    at_max: ReplayResult
    best_static_w: float
    best_static: ReplayResult
    aware: ReplayResult


def _objective(r: ReplayResult, *, eta: float, max_power_w: float, max_ci: float) -> float:
    """The selector's objective over a whole run, in g: ``eta*carbon + (1-eta)*P_max*CI_max*T``."""
    return eta * r.carbon_g + (1.0 - eta) * max_power_w * max_ci * r.duration_s / 3.6e6


def compare(profile: tuple[LimitMeasurement, ...], series: IntensitySeries, *, eta: float, max_slowdown: float) -> Comparison:
    top = max(profile, key=lambda m: m.power_limit_w)
    steps = JOB_H * 3600.0 / top.time_per_step_s
    max_ci = max(series.window(series.start, series.start + timedelta(days=3)).values())
    eligible = [m for m in profile if m.time_per_step_s <= max_slowdown * top.time_per_step_s]
    static = {m.power_limit_w: replay(profile, series, steps=steps, choose=fixed_limit(m.power_limit_w)) for m in eligible}
    best_w = min(static, key=lambda w: (_objective(static[w], eta=eta, max_power_w=top.power_limit_w, max_ci=max_ci), -w))
    sel = CarbonAware(eta, max_ci_g_per_kwh=max_ci, hysteresis=0.02, min_dwell_s=1800.0, max_slowdown=max_slowdown)
    aware = replay(profile, series, steps=steps, choose=sel)
    return Comparison(static[top.power_limit_w], best_w, static[best_w], aware)


def starts(series: IntensitySeries, every: timedelta | None) -> list[IntensitySeries]:
    """The series from each start (every ``every``, leaving 4 days of trace), or just the whole one."""
    if every is None:
        return [series]
    out, t = [], series.start
    while t + timedelta(days=4) <= series.end:
        out.append(series.window(t, series.end))
        t += every
    return out


def report(name: str, profile_name: str, comps: list[Comparison]) -> None:
    def mean(f) -> float:
        return float(np.mean([f(c) for c in comps]))

    cut_best = mean(lambda c: 1 - c.best_static.carbon_g / c.at_max.carbon_g)
    slow_best = mean(lambda c: c.best_static.duration_s / c.at_max.duration_s - 1)
    cut_aware = mean(lambda c: 1 - c.aware.carbon_g / c.at_max.carbon_g)
    slow_aware = mean(lambda c: c.aware.duration_s / c.at_max.duration_s - 1)
    credit_c = mean(lambda c: 1 - c.aware.carbon_g / c.best_static.carbon_g)
    credit_t = mean(lambda c: c.aware.duration_s / c.best_static.duration_s - 1)
    limits = sorted({c.best_static_w for c in comps})
    switches = mean(lambda c: c.aware.switches)
    print(f"  {name:30s} {profile_name:30s} n={len(comps):2d}  best static {'/'.join(f'{w:g}' for w in limits):>9s} W: "
          f"carbon {-cut_best:+6.1%} time {slow_best:+5.1%} | carbon-aware: carbon {-cut_aware:+6.1%} time {slow_aware:+5.1%} "
          f"({switches:.1f} switches) | credit to carbon awareness (vs best static): carbon {-credit_c:+6.2%} time {credit_t:+5.2%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=Path, default=GB_DEFAULT if GB_DEFAULT.is_file() else None,
                    help="lets-wait-awhile gb_ci.csv")
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--max-slowdown", type=float, default=1.05)
    args = ap.parse_args()
    traces: dict[str, tuple[IntensitySeries, timedelta | None]] = {"MISO (Chase's trace, marginal)": (load_sample_trace(), None)}
    if args.gb:
        from carbon.trace_file import read_trace

        gb = read_trace(str(args.gb))
        gb = gb.window(datetime.fromisoformat("2020-01-01T00:00:00+00:00"), datetime.fromisoformat("2021-01-01T00:00:00+00:00"))
        traces["GB 2020 (average), weekly starts"] = (gb, timedelta(days=7))
    profiles = {"V100 cifar100 b=1024 (Zeus trace)": V100_CIFAR, "H200 step (modelled)": modelled_profile()}
    print(f"Chase-style replay, vs the maximum limit (modelled): eta {args.eta}, at most x{args.max_slowdown} slower, "
          f"{JOB_H:g} h job, 30 min control, perfect forecast")
    for tname, (series, every) in traces.items():
        for pname, prof in profiles.items():
            report(tname, pname, [compare(prof, s, eta=args.eta, max_slowdown=args.max_slowdown) for s in starts(series, every)])


if __name__ == "__main__":
    main()
