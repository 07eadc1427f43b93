"""Planner speed: one plan over 24 h of 5-min slots with 10 modes, against the old rule's decision.

Run from the repo root:
    .venv/bin/python benchmarks/planner.py [--repeats 30] [--work-h 3]
Prints the median and p99 wall time of ``scheduler.planner.plan_run`` (exact DP, with its reasons)
and of ``scheduler.planner.thresholds.decide`` (the old threshold rule: one mode for one instant, start shifting
included) on the same forecast, measured in the same run, and their ratio. Target: plan well under
100 ms. The intensities are synthetic (a daily cycle plus noise); no energy figure is reported.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--work-h", type=float, default=3.0)
    args = ap.parse_args()

    from carbon.series import IntensityPoint, IntensitySeries
    from scheduler.planner.thresholds import ModeState, decide
    from scheduler.planner import ModeFigures, PlanConstraints, PlanJob, plan_run
    from scheduler.policy.types import Policy

    now = datetime(2026, 1, 1, 21, tzinfo=timezone.utc)
    rng = np.random.default_rng(0)
    step = timedelta(minutes=5)
    pts = [IntensityPoint(start=now + i * step, duration=step,
                          g_per_kwh=float(300 + 100 * math.cos(i / 288 * 2 * math.pi) + rng.normal(0, 20)))
           for i in range(289)]
    series = IntensitySeries.of(pts)
    # ten power limits of a Zeus-like profile: speed falls faster than power below the knee
    modes = [ModeFigures(f"limit_{250 - 15 * i}w", power_w=227.0 - 13.0 * i, speed=1.0 - 0.004 * i * i - 0.01 * i,
                         source="synthetic") for i in range(10)]
    job = PlanJob(work_s=args.work_h * 3600, not_before=now, deadline=now + timedelta(hours=24))
    cons = PlanConstraints(min_dwell_s=900, deadline_margin_s=900, slot_s=300)

    def timed(fn) -> list[float]:
        fn()  # warm-up
        out = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return out

    plan_t = timed(lambda: plan_run(series, job, modes, now=now, constraints=cons))
    policy = Policy.model_validate({
        "carbon": {"provider": "static", "options": {"g_per_kwh": 300}},
        "modes": {"speed": {}, "efficiency": {"power_limit_fraction": 0.7}},
        "rules": {"kind": "relative", "horizon_s": 86400},
        "job": {"command": ["true"], "expected_duration_s": args.work_h * 3600, "deadline_s": 86400},
    })
    decide_t = timed(lambda: decide(policy, series, ModeState(), now=now, remaining_work_s=args.work_h * 3600,
                                    deadline=now + timedelta(hours=24), earliest=now))
    p = lambda xs, q: float(np.percentile(xs, q)) * 1e3  # noqa: E731
    print(f"24 h x 5 min slots x {len(modes)} modes, {args.work_h:g} h of work, {args.repeats} repeats")
    print(f"planner  plan_run  median {p(plan_t, 50):8.2f} ms   p99 {p(plan_t, 99):8.2f} ms   target < 100 ms: "
          f"{'ok' if p(plan_t, 50) < 100 else 'MISSED'}")
    print(f"old rule decide()  median {p(decide_t, 50):8.2f} ms   p99 {p(decide_t, 99):8.2f} ms")
    print(f"ratio planner / old rule (median) {p(plan_t, 50) / p(decide_t, 50):.1f}x")


if __name__ == "__main__":
    main()
