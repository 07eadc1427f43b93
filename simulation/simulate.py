"""Replay a policy's recurring job over a whole carbon trace: baseline vs gridshift vs oracle.

For every cron occurrence whose whole window lies inside the trace, three strategies run the same
job (``expected_duration_s`` of work, measured in clean-mode seconds):

- **baseline**: start at the nominal (cron) time, clean (speed) mode throughout;
- **gridshift**: at the earliest allowed start the planner takes a forecast it could have had
  (``forecaster``: the built-in daily-profile forecaster on past data, or the trace plus error),
  picks the start with :func:`scheduler.shifting.best_start_over_modes` (minimum gain and safety
  margin), then every ``rules.interval_s`` re-decides the mode with :func:`scheduler.decide.decide`
  on a fresh forecast (hysteresis, minimum dwell, deadline guard with progress tracking);
- **oracle**: the same levers with perfect foresight (perfect forecast, no minimum gain, no margin).

Carbon is integrated exactly over the real (piecewise-constant) trace. Power and speed per mode
come from a :class:`ModeModel` (the simulated backend's GPU model unless a measured profile is
given), so every figure here is **modelled**. Time is never read from the clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.decide import ModeState, decide
from scheduler.cron import cron_occurrences
from scheduler.errors import PolicyError
from scheduler.policy import Policy
from scheduler.shifting import best_start_over_modes
from simulation.sim_forecast import GridForecaster, PerfectForecaster

__all__ = ["ModeModel", "JobOutcome", "SimulationResult", "simulate", "resample",
           "model_from_backend", "model_from_profile"]

_J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class ModeModel:
    """Power (W) and time factor (relative to the clean mode) of each mode, and whether modelled."""

    power_w: dict[str, float]
    slowdown: dict[str, float]
    modelled: bool = True
    source: str = "simulated backend GPU model"


@dataclass(frozen=True)
class JobOutcome:
    """One job under one strategy: when it ran, in which modes, what it cost."""

    nominal_s: float
    start_s: float
    end_s: float
    deadline_s: float
    carbon_g: float
    energy_j: float
    spans: tuple[tuple[float, float, str], ...]  # (start_s, end_s, mode) in trace seconds

    @property
    def late(self) -> bool:
        return self.end_s > self.deadline_s + 1e-6


@dataclass
class SimulationResult:
    """Totals per strategy plus the per-job outcomes (for plots)."""

    t0: datetime
    step_s: float
    values: np.ndarray
    baseline: list[JobOutcome]
    gridshift: list[JobOutcome]
    oracle: list[JobOutcome]
    model: ModeModel
    forecast: str
    clean_mode: str
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object (grams, joules, seconds; every figure modelled)."""

        def tot(jobs: list[JobOutcome], attr: str) -> float:
            return float(sum(getattr(j, attr) for j in jobs))

        base_g, gs_g, or_g = tot(self.baseline, "carbon_g"), tot(self.gridshift, "carbon_g"), tot(self.oracle, "carbon_g")
        mode_s: dict[str, float] = {}
        for j in self.gridshift:
            for a, b, m in j.spans:
                mode_s[m] = mode_s.get(m, 0.0) + (b - a)
        total_s = sum(mode_s.values()) or 1.0
        n = len(self.baseline)
        pct = (lambda x: 100.0 * (1.0 - x / base_g) if base_g > 0 else 0.0)
        return {
            "jobs": n,
            "baseline_g": base_g,
            "gridshift_g": gs_g,
            "oracle_g": or_g,
            "savings_pct": pct(gs_g),
            "oracle_savings_pct": pct(or_g),
            "deadline_misses": sum(j.late for j in self.gridshift),
            "oracle_deadline_misses": sum(j.late for j in self.oracle),
            "energy_baseline_j": tot(self.baseline, "energy_j"),
            "energy_gridshift_j": tot(self.gridshift, "energy_j"),
            "energy_oracle_j": tot(self.oracle, "energy_j"),
            "mean_delay_s": float(np.mean([j.start_s - j.nominal_s for j in self.gridshift])) if n else 0.0,
            "mean_duration_baseline_s": float(np.mean([j.end_s - j.start_s for j in self.baseline])) if n else 0.0,
            "mean_duration_gridshift_s": float(np.mean([j.end_s - j.start_s for j in self.gridshift])) if n else 0.0,
            "mode_share": {m: s / total_s for m, s in sorted(mode_s.items())},
            "forecast": self.forecast,
            "step_s": self.step_s,
            "trace_start": self.t0.isoformat(),
            "trace_end": (self.t0 + timedelta(seconds=self.step_s * len(self.values))).isoformat(),
            "modelled": self.model.modelled,
            "energy_source": self.model.source,
            "mode_power_w": dict(self.model.power_w),
            "mode_slowdown": dict(self.model.slowdown),
            **self.extra,
        }


def resample(series: IntensitySeries, step_s: float | None = None) -> tuple[datetime, float, np.ndarray]:
    """(origin, step_s, values) on a regular grid; the value in force at each step (gaps carry forward).

    ``step_s`` defaults to the trace's median spacing.
    """
    if len(series) < 2:
        raise ValueError("a trace needs at least two points to be simulated")
    starts = np.array([p.start.timestamp() for p in series.points])
    vals = np.array([p.g_per_kwh for p in series.points])
    step = float(np.median(np.diff(starts))) if step_s is None else float(step_s)
    t0 = starts[0]
    end = series.points[-1].end.timestamp()
    grid = t0 + np.arange(int((end - t0) // step)) * step
    idx = np.searchsorted(starts, grid, side="right") - 1
    return datetime.fromtimestamp(t0, tz=timezone.utc), step, vals[np.clip(idx, 0, len(vals) - 1)]


class _Trace:
    """The real trace as a cumulative integral, for exact carbon over any span."""

    def __init__(self, values: np.ndarray, step_s: float) -> None:
        self.values = values
        self.step_s = step_s
        self.cum = np.concatenate(([0.0], np.cumsum(values) * step_s))

    def integral(self, a: float, b: float) -> float:
        """``integral_a^b I(t) dt`` in g/kWh x s (a, b in trace seconds)."""
        edges_end = len(self.values) * self.step_s

        def to(t: float) -> float:
            tc = min(max(t, 0.0), edges_end)
            i = min(int(tc // self.step_s), len(self.values) - 1)
            inside = self.cum[i] + (tc - i * self.step_s) * self.values[i]
            return inside + max(t - edges_end, 0.0) * self.values[-1]

        return to(b) - to(a)


def _series(values: np.ndarray, origin: datetime, step_s: float, kind: str) -> IntensitySeries:
    step = timedelta(seconds=step_s)
    pts = tuple(IntensityPoint(start=origin + i * step, duration=step, g_per_kwh=float(v), kind=kind,  # type: ignore[arg-type]
                               forecast=i > 0, source="simulation")
                for i, v in enumerate(values))
    return IntensitySeries(points=pts)


def _run_job(policy: Policy, trace: _Trace, t0: datetime, model: ModeModel, forecaster: GridForecaster, *,
             nominal_s: float, min_gain: float, safety_margin_s: float | None, guard_margin_s: float,
             kind: str) -> JobOutcome:
    job, rule = policy.job, policy.rules
    step = trace.step_s
    work_s = job.expected_duration_s
    earliest_s = nominal_s + job.earliest_start_s
    assert job.deadline_s is not None
    deadline_s = nominal_s + job.deadline_s
    plan_i = int(math.ceil(earliest_s / step - 1e-9))
    origin_s = plan_i * step
    horizon_n = int(math.ceil((deadline_s - origin_s) / step)) + 1
    fc = forecaster.forecast(trace.values, plan_i, horizon_n)
    clean = rule.clean_mode
    order = [clean] + [m for m in model.power_w if m != clean]
    modes = {m: (model.power_w[m], work_s * model.slowdown[m]) for m in order}
    _, plan = best_start_over_modes(fc, modes, step_s=step, earliest_s=0.0, deadline_s=deadline_s - origin_s,
                                    reference_start_s=nominal_s - origin_s, min_gain=min_gain,
                                    safety_margin_s=safety_margin_s)
    start_s = origin_s + plan.start_s

    # mid-run: re-decide every interval on a fresh forecast; the guard deadline keeps a margin
    horizon_s = getattr(rule, "horizon_s", rule.interval_s)
    guard = t0 + timedelta(seconds=deadline_s - guard_margin_s)
    t, left, state = start_s, work_s, ModeState()
    spans: list[tuple[float, float, str]] = []
    carbon_g = energy_j = 0.0
    while left > 1e-6:
        i = min(int(t // step), len(trace.values) - 1)
        n = max(int(math.ceil(horizon_s / step)), 1)
        series = _series(forecaster.forecast(trace.values, i, n), t0 + timedelta(seconds=i * step), step, kind)
        now = t0 + timedelta(seconds=t)
        mode = decide(policy, series, state, now=now, remaining_work_s=left, deadline=guard,
                      slowdown=model.slowdown).mode
        state = state.switch(mode, now)
        dt = min(rule.interval_s, left * model.slowdown[mode])
        carbon_g += model.power_w[mode] * trace.integral(t, t + dt) / _J_PER_KWH
        energy_j += model.power_w[mode] * dt
        left -= dt / model.slowdown[mode]
        if spans and spans[-1][2] == mode and abs(spans[-1][1] - t) < 1e-6:
            spans[-1] = (spans[-1][0], t + dt, mode)
        else:
            spans.append((t, t + dt, mode))
        t += dt
    return JobOutcome(nominal_s, start_s, t, deadline_s, carbon_g, energy_j, tuple(spans))


def simulate(
    policy: Policy,
    trace: IntensitySeries,
    model: ModeModel,
    forecaster: GridForecaster,
    *,
    forecast_label: str = "daily-profile",
    min_gain: float = 0.03,
    safety_margin_s: float | None = None,
) -> SimulationResult:
    """Replay ``policy``'s recurring job over ``trace`` (see the module docstring)."""
    job = policy.job
    if job.cron is None:
        raise PolicyError("job.cron: simulate needs a recurring job (set job.cron, e.g. '0 1 * * *')")
    if job.deadline_s is None:
        raise PolicyError("job.deadline_s: simulate needs a deadline to know how far a job may move")
    for m in (policy.rules.clean_mode, policy.rules.dirty_mode):
        if m not in model.power_w or m not in model.slowdown:
            raise PolicyError(f"modes.{m}: no power/slowdown figures for this mode")
    t0, step, values = resample(trace)
    tr = _Trace(values, step)
    end = t0 + timedelta(seconds=step * len(values))
    first = t0 + timedelta(seconds=max(-job.earliest_start_s, 0.0))
    last = end - timedelta(seconds=job.deadline_s)
    nominals = [n for n in cron_occurrences(job.cron, first, end) if n <= last]
    kind = trace.kind
    base: list[JobOutcome] = []
    gs: list[JobOutcome] = []
    orc: list[JobOutcome] = []
    clean = policy.rules.clean_mode
    interval = policy.rules.interval_s
    perfect = PerfectForecaster()
    for nominal in nominals:
        ns = (nominal - t0).total_seconds()
        dur = job.expected_duration_s * model.slowdown[clean]
        g = model.power_w[clean] * tr.integral(ns, ns + dur) / _J_PER_KWH
        base.append(JobOutcome(ns, ns, ns + dur, ns + job.deadline_s, g, model.power_w[clean] * dur,
                               ((ns, ns + dur, clean),)))
        gs.append(_run_job(policy, tr, t0, model, forecaster, nominal_s=ns, min_gain=min_gain,
                           safety_margin_s=safety_margin_s, guard_margin_s=min(interval, 0.05 * job.expected_duration_s),
                           kind=kind))
        orc.append(_run_job(policy, tr, t0, model, perfect, nominal_s=ns, min_gain=0.0, safety_margin_s=0.0,
                            guard_margin_s=0.0, kind=kind))
    return SimulationResult(t0=t0, step_s=step, values=values, baseline=base, gridshift=gs, oracle=orc, model=model,
                            forecast=forecast_label, clean_mode=clean)


def model_from_backend(policy: Policy, backend: Any) -> ModeModel:
    """Power and time factor of each policy mode from a backend's model (``operating_point``/``slowdown``).

    Time factors are taken relative to the clean mode, so the clean mode's is 1.0.
    """
    from scheduler.modes import resolve_settings

    caps = backend.capabilities()
    power: dict[str, float] = {}
    slow: dict[str, float] = {}
    for name, mode in policy.modes.items():
        settings = resolve_settings(mode, caps)
        power[name] = float(backend.operating_point(settings).power_w) * max(len(caps.devices), 1)
        slow[name] = float(backend.slowdown(settings))
    ref = slow[policy.rules.clean_mode]
    return ModeModel(power_w=power, slowdown={k: v / ref for k, v in slow.items()}, modelled=not backend.measured,
                     source=f"{backend.name} backend model ({caps.devices[0].name if caps.devices else 'GPU'})")


def model_from_profile(data: dict[str, Any], where: str = "<profile>") -> ModeModel:
    """A measured profile: ``{"modes": {"speed": {"power_w": 690, "slowdown": 1.0}, ...}}``."""
    modes = data.get("modes") if isinstance(data, dict) else None
    if not isinstance(modes, dict) or not modes:
        raise PolicyError(f"{where}: a profile needs a 'modes' object with power_w and slowdown per mode")
    power: dict[str, float] = {}
    slow: dict[str, float] = {}
    for name, fig in modes.items():
        try:
            power[name], slow[name] = float(fig["power_w"]), float(fig["slowdown"])
        except (KeyError, TypeError, ValueError):
            raise PolicyError(f"{where}: modes.{name}: needs numeric power_w and slowdown") from None
        if power[name] <= 0 or slow[name] <= 0:
            raise PolicyError(f"{where}: modes.{name}: power_w and slowdown must be positive")
    return ModeModel(power_w=power, slowdown=slow, modelled=bool(data.get("modelled", False)),
                     source=str(data.get("source", where)))
