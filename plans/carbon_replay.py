"""Replay a carbon-intensity trace against a power-limit profile (a Chase-style check; modelled).

A job of fixed work (``steps``) starts at the series' start and runs without pause. Every control
interval the selector picks a limit for the forecast intensity of that interval (the trace itself
is the forecast: a perfect one), and the job runs at that limit's time and energy per step until
the interval ends or the work is done. Carbon is energy times the intensity in force.

:func:`modelled_profile` builds a profile from :mod:`backends.gpu_model` (an H200 running a
GEMM-heavy training step by default): every number from it is modelled, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Sequence

from backends.gpu_model import H200, TRAINING, GpuSpec, Workload, operating_point
from carbon.series import IntensitySeries
from plans.power_limit import LimitMeasurement
from plans.selectors import CarbonAware, CarbonState

__all__ = ["ReplayResult", "modelled_profile", "replay", "fixed_limit"]


@dataclass(frozen=True)
class ReplayResult:
    carbon_g: float
    energy_j: float
    duration_s: float
    switches: int
    limits_w: tuple[float, ...]
    measured: bool = False


def modelled_profile(
    spec: GpuSpec = H200, work: Workload = TRAINING, *, step_time_s: float = 1.0, step_w: float = 25.0
) -> tuple[LimitMeasurement, ...]:
    """Time and energy per step at each limit from ``spec.power_min_w`` to ``power_max_w`` (modelled)."""
    out = []
    p = spec.power_max_w
    while p >= spec.power_min_w - 1e-9:
        op = operating_point(spec, work, power_limit_w=p)
        t = step_time_s * op.time_factor
        out.append(LimitMeasurement(p, t, op.power_w * t))
        p -= step_w
    return tuple(out)


def fixed_limit(limit_w: float) -> Callable[[Sequence[LimitMeasurement], float, CarbonState | None, object], tuple[CarbonState | None, float]]:
    def choose(ms: Sequence[LimitMeasurement], ci: float, state: CarbonState | None, now: object) -> tuple[CarbonState | None, float]:
        return state, limit_w

    return choose


def _carbon_aware(selector: CarbonAware):
    def choose(ms: Sequence[LimitMeasurement], ci: float, state: CarbonState | None, now) -> tuple[CarbonState | None, float]:
        new, decision = selector.decide(ms, ci_g_per_kwh=ci, state=state, now=now)
        return new, decision.power_limit_w

    return choose


def replay(
    profile: Sequence[LimitMeasurement],
    series: IntensitySeries,
    *,
    steps: float,
    choose: CarbonAware | Callable,
    interval_s: float = 1800.0,
) -> ReplayResult:
    """Run ``steps`` of work from the start of ``series``, re-choosing the limit every ``interval_s``."""
    if steps <= 0 or interval_s <= 0:
        raise ValueError("steps and interval_s must be positive")
    by_limit = {m.power_limit_w: m for m in profile}
    pick = _carbon_aware(choose) if isinstance(choose, CarbonAware) else choose
    now = series.start
    state: CarbonState | None = None
    left, carbon, energy, elapsed = float(steps), 0.0, 0.0, 0.0
    limits: list[float] = []
    while left > 1e-12:
        point = series.at(now)
        if point is None:
            raise ValueError(f"the series ends before the job does (at {now.isoformat()})")
        ci = series.mean_over(now, now + timedelta(seconds=interval_s)) or point.g_per_kwh
        state, limit = pick(profile, ci, state, now)
        m = by_limit[limit]
        n = min(left, interval_s / m.time_per_step_s)
        dt = n * m.time_per_step_s
        e = n * m.energy_per_step_j
        # carbon over the slice at the intensity actually in force (not the forecast)
        carbon += e * (series.mean_over(now, now + timedelta(seconds=dt)) or ci) / 3.6e6
        energy += e
        elapsed += dt
        left -= n
        limits.append(limit)
        now = now + timedelta(seconds=dt)
    switches = sum(1 for a, b in zip(limits, limits[1:]) if a != b)
    return ReplayResult(carbon, energy, elapsed, switches, tuple(limits))
