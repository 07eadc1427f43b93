"""Replay a policy's recurring job over a whole carbon trace, strategies side by side.

For every cron occurrence whose whole window lies inside the trace, each strategy runs the same job
(``expected_duration_s`` of work, counted in reference-mode seconds):

- **baseline**: start at the nominal (cron) time, reference (clean) mode throughout;
- **static_efficiency**: nominal start, the mode with the least energy per unit of work that meets
  the deadline: what a user picks with no carbon data at all;
- **best_static**: one mode and one start, the best pair with perfect foresight;
- **threshold**: the old rule (start from ``best_start_over_modes`` on the forecast, then the flow's
  :class:`scheduler.planner.deciders.ThresholdDecider`, percentile thresholds every interval), with the
  policy's clean/dirty modes;
- **gridshift**: the planner (:func:`scheduler.planner.plan_slots` on the flow's inputs,
  :func:`scheduler.planner.deciders.plan_inputs`, from the same :class:`scheduler.run_spec.RunSpec`) where the
  product calls it: once at the earliest start to choose the start (the deployment's planning run),
  then every ``rules.interval_s`` of the run a fresh forecast and a fresh plan with the work left, the
  running mode (dwell) and the deadline margin; it executes the plan until the next decision;
- **oracle**: the exact optimum with perfect foresight, no margin and no dwell, on the finest grid
  the other strategies use, so it bounds every one of them from below.

Carbon is integrated exactly over the real (piecewise-constant) trace. Power and speed per mode are
:class:`scheduler.planner.ModeFigures` (a measured profile, or a model: each says which), so energy
and carbon here are **modelled**; the intensities are real. Time is never read from the clock.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

import numpy as np

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.policy.cron import cron_occurrences
from scheduler.errors import PolicyError
from scheduler.planner.mode_figures import DECLARED
from scheduler.planner import ModeFigures, Objective, PlanConstraints, PlanJob, plan_slots
from scheduler.planner.deciders import ThresholdDecider, plan_inputs
from scheduler.run_spec import RunSpec, resolve_run
from scheduler.policy.types import AbsoluteRule, PlanRule, Policy, RelativeRule
from scheduler.planner.shifting import best_start_over_modes
from simulation.sim_forecast import GridForecaster, StartGate, start_window

__all__ = ["STRATEGIES", "JobOutcome", "SimulationResult", "nominal_starts", "simulate", "resample"]

_J_PER_KWH = 3.6e6
_MIN_JOBS_PER_WORKER = 16  # below this a worker costs more to start than it saves
STRATEGIES = ("baseline", "static_efficiency", "best_static", "threshold", "gridshift", "oracle")


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
    """Per-job outcomes per strategy, and what they were computed from."""

    t0: datetime
    step_s: float
    values: np.ndarray
    outcomes: dict[str, list[JobOutcome]]
    modes: tuple[ModeFigures, ...]
    forecast: str
    clean_mode: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def baseline(self) -> list[JobOutcome]:
        return self.outcomes["baseline"]

    @property
    def gridshift(self) -> list[JobOutcome]:
        return self.outcomes["gridshift"]

    @property
    def oracle(self) -> list[JobOutcome]:
        return self.outcomes["oracle"]

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object (grams, joules, seconds; energy and carbon modelled)."""

        def tot(jobs: list[JobOutcome], attr: str) -> float:
            return float(sum(getattr(j, attr) for j in jobs))

        base_g = tot(self.baseline, "carbon_g")
        pct = (lambda x: 100.0 * (1.0 - x / base_g) if base_g > 0 else 0.0)
        n = len(self.baseline)
        oracle_saving = base_g - tot(self.oracle, "carbon_g")
        strategies: dict[str, Any] = {}
        for name, jobs in self.outcomes.items():
            g = tot(jobs, "carbon_g")
            strategies[name] = {
                "carbon_g": g,
                "savings_pct": pct(g),
                "share_of_oracle_saving": (base_g - g) / oracle_saving if oracle_saving > 0 else None,
                "energy_j": tot(jobs, "energy_j"),
                "deadline_misses": sum(j.late for j in jobs),
                "mean_delay_s": float(np.mean([j.start_s - j.nominal_s for j in jobs])) if n else 0.0,
                "mean_duration_s": float(np.mean([j.end_s - j.start_s for j in jobs])) if n else 0.0,
                "mode_share": _mode_share(jobs),
            }
        s = strategies
        return {
            "jobs": n,
            "baseline_g": s["baseline"]["carbon_g"],
            "gridshift_g": s["gridshift"]["carbon_g"],
            "oracle_g": s["oracle"]["carbon_g"],
            "savings_pct": s["gridshift"]["savings_pct"],
            "oracle_savings_pct": s["oracle"]["savings_pct"],
            "deadline_misses": s["gridshift"]["deadline_misses"],
            "oracle_deadline_misses": s["oracle"]["deadline_misses"],
            "energy_baseline_j": s["baseline"]["energy_j"],
            "energy_gridshift_j": s["gridshift"]["energy_j"],
            "energy_oracle_j": s["oracle"]["energy_j"],
            "mean_delay_s": s["gridshift"]["mean_delay_s"],
            "mean_duration_baseline_s": s["baseline"]["mean_duration_s"],
            "mean_duration_gridshift_s": s["gridshift"]["mean_duration_s"],
            "mode_share": s["gridshift"]["mode_share"],
            "strategies": strategies,
            "forecast": self.forecast,
            "step_s": self.step_s,
            "trace_start": self.t0.isoformat(),
            "trace_end": (self.t0 + timedelta(seconds=self.step_s * len(self.values))).isoformat(),
            "modelled": True,
            "figures_measured": all(m.measured for m in self.modes),
            "figures_kind": _figures_kind(self.modes),
            "energy_source": "; ".join(sorted({m.source for m in self.modes})),
            "mode_power_w": {m.name: m.power_w for m in self.modes},
            "mode_speed": {m.name: m.speed for m in self.modes},
            "mode_slowdown": {m.name: 1.0 / m.speed for m in self.modes},
            "mode_source": {m.name: m.source for m in self.modes},
            **self.extra,
        }


def _figures_kind(modes: Sequence[ModeFigures]) -> str:
    """measured, declared (typed by hand, :data:`scheduler.planner.mode_figures.DECLARED`) or modelled."""
    if all(m.measured for m in modes):
        return "measured"
    return DECLARED if any(m.source.startswith(DECLARED) for m in modes) else "modelled"


def _mode_share(jobs: list[JobOutcome]) -> dict[str, float]:
    mode_s: dict[str, float] = {}
    for j in jobs:
        for a, b, m in j.spans:
            mode_s[m] = mode_s.get(m, 0.0) + (b - a)
    total = sum(mode_s.values()) or 1.0
    return {m: v / total for m, v in sorted(mode_s.items())}


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


class _Grid:
    """Values on a regular grid as a cumulative integral: exact means over any span (the last value holds after)."""

    def __init__(self, values: np.ndarray, step_s: float, origin_s: float = 0.0) -> None:
        self.values = np.asarray(values, dtype=float)
        self.step_s = step_s
        self.origin_s = origin_s
        self.cum = np.concatenate(([0.0], np.cumsum(self.values) * step_s))

    def F(self, t: np.ndarray | float) -> np.ndarray:
        x = np.asarray(t, dtype=float) - self.origin_s
        end = len(self.values) * self.step_s
        xc = np.clip(x, 0.0, end)
        i = np.minimum((xc // self.step_s).astype(np.int64), len(self.values) - 1)
        inside = self.cum[i] + (xc - i * self.step_s) * self.values[i]
        return inside + np.maximum(x - end, 0.0) * self.values[-1] + np.minimum(x, 0.0) * self.values[0]

    def integral(self, a: float, b: float) -> float:
        """``integral_a^b I(t) dt`` in g/kWh x s."""
        return float(self.F(b) - self.F(a))

    def slot_means(self, a: float, slot_s: float, n: int) -> np.ndarray:
        """Mean of each of ``n`` slots of ``slot_s`` from ``a``."""
        off = (a - self.origin_s) / self.step_s
        if slot_s == self.step_s and abs(off - round(off)) < 1e-9 and 0 <= round(off) and round(off) + n <= len(self.values):
            i = int(round(off))
            return self.values[i: i + n]
        edges = self.F(a + np.arange(n + 1) * slot_s)
        return np.diff(edges) / slot_s


def _run_slots(truth: _Grid, modes: Sequence[ModeFigures], slot_modes: Sequence[int], a: float, slot_s: float,
               left: float) -> tuple[list[tuple[float, float, int]], float, float, float]:
    """Execute per-slot modes from ``a`` on the true trace until ``left`` work is done: (spans, left, g, J)."""
    spans: list[tuple[float, float, int]] = []
    g = e = 0.0
    t = a
    for m in slot_modes:
        if left <= 1e-9:
            break
        if m >= 0:
            dt = min(slot_s, left / modes[m].speed)
            g += modes[m].power_w * truth.integral(t, t + dt) / _J_PER_KWH
            e += modes[m].power_w * dt
            left -= dt * modes[m].speed
            spans.append((t, t + dt, m))
        t += slot_s
    return spans, left, g, e


def _outcome(nominal: float, deadline: float, spans: list[tuple[float, float, int]], g: float, e: float,
             modes: Sequence[ModeFigures]) -> JobOutcome:
    merged: list[tuple[float, float, str]] = []
    for a, b, m in spans:
        name = modes[m].name
        if merged and merged[-1][2] == name and abs(merged[-1][1] - a) < 1e-6:
            merged[-1] = (merged[-1][0], b, name)
        else:
            merged.append((a, b, name))
    start = merged[0][0] if merged else nominal
    end = merged[-1][1] if merged else nominal
    return JobOutcome(nominal, start, end, deadline, g, e, tuple(merged))


def _static(truth: _Grid, modes: Sequence[ModeFigures], m: int, start: float, work: float, nominal: float,
            deadline: float) -> JobOutcome:
    dur = work / modes[m].speed
    g = modes[m].power_w * truth.integral(start, start + dur) / _J_PER_KWH
    return JobOutcome(nominal, start, start + dur, deadline, g, modes[m].power_w * dur, ((start, start + dur, modes[m].name),))


def _best_static(truth: _Grid, modes: Sequence[ModeFigures], earliest: float, deadline: float, work: float,
                 grid_s: float, nominal: float) -> JobOutcome:
    best: tuple[float, int, float] | None = None
    for m, fig in enumerate(modes):
        dur = work / fig.speed
        n = int(math.floor((deadline - earliest - dur) / grid_s + 1e-9)) + 1
        if n <= 0:
            continue
        starts = earliest + np.arange(n) * grid_s
        g = fig.power_w * (truth.F(starts + dur) - truth.F(starts)) / _J_PER_KWH
        k = int(np.argmin(g))
        if best is None or g[k] < best[0]:
            best = (float(g[k]), m, float(starts[k]))
    if best is None:  # no single mode fits: the fastest at the earliest start
        m = max(range(len(modes)), key=lambda i: modes[i].speed)
        return _static(truth, modes, m, earliest, work, nominal, deadline)
    return _static(truth, modes, best[1], best[2], work, nominal, deadline)


def _series(values: np.ndarray, origin: datetime, step_s: float, kind: str) -> IntensitySeries:
    step = timedelta(seconds=step_s)
    pts = tuple(IntensityPoint(start=origin + i * step, duration=step, g_per_kwh=float(v), kind=kind,  # type: ignore[arg-type]
                               forecast=i > 0, source="simulation")
                for i, v in enumerate(values))
    return IntensitySeries(points=pts)


def _threshold_policy(policy: Policy) -> Policy:
    """The policy with a threshold rule: its own, or the default relative rule over the same modes."""
    rule = policy.rules
    if not isinstance(rule, PlanRule):
        return policy
    relative = RelativeRule(clean_mode=rule.clean_mode, dirty_mode=rule.dirty_mode, min_dwell_s=rule.min_dwell_s,
                            interval_s=rule.interval_s, horizon_s=43200.0)
    return policy.model_copy(update={"rules": relative})


def _threshold(spec: RunSpec, truth: _Grid, t0: datetime, modes: Sequence[ModeFigures], forecaster: GridForecaster,
               *, nominal_s: float, min_gain: float, kind: str) -> JobOutcome:
    """The old rule: best_start_over_modes on the forecast at the earliest start, then the threshold
    decider (:class:`scheduler.planner.deciders.ThresholdDecider`) every interval."""
    job, rule = spec.job, spec.rules
    assert isinstance(rule, (AbsoluteRule, RelativeRule))
    idx = {m.name: i for i, m in enumerate(modes)}
    power = {m.name: m.power_w for m in modes}
    slowdown = {m.name: 1.0 / m.speed for m in modes}
    step = truth.step_s
    work_s = job.expected_duration_s
    assert job.deadline_s is not None
    deadline_s = nominal_s + job.deadline_s
    earliest_s = nominal_s + job.earliest_start_s
    plan_i = int(math.ceil(earliest_s / step - 1e-9))
    origin_s = plan_i * step
    horizon_n = int(math.ceil((deadline_s - origin_s) / step)) + 1
    fc = forecaster.forecast(truth.values, plan_i, horizon_n)
    clean, dirty = rule.clean_mode, rule.dirty_mode
    two = {m: (power[m], work_s * slowdown[m]) for m in (clean, dirty)}
    _, plan = best_start_over_modes(fc, two, step_s=step, earliest_s=0.0, deadline_s=deadline_s - origin_s,
                                    reference_start_s=nominal_s - origin_s, min_gain=min_gain,
                                    safety_margin_s=None)
    start_s = origin_s + plan.start_s
    horizon_s = getattr(rule, "horizon_s", rule.interval_s)
    # the flow's threshold decider, with the guard a fraction of the job before the deadline
    decider = ThresholdDecider(rule, spec.modes, expected_s=work_s, interval_s=rule.interval_s,
                               deadline=t0 + timedelta(seconds=deadline_s), slowdown=slowdown,
                               guard=t0 + timedelta(seconds=deadline_s - min(rule.interval_s, 0.05 * work_s)))
    t, left, running = start_s, work_s, None
    spans: list[tuple[float, float, int]] = []
    g = e = 0.0
    while left > 1e-6:
        i = min(int(t // step), len(truth.values) - 1)
        n = max(int(math.ceil(horizon_s / step)), 1)
        series = _series(forecaster.forecast(truth.values, i, n), t0 + timedelta(seconds=i * step), step, kind)
        now = t0 + timedelta(seconds=t)
        mode = running = decider.decide(now, series, running=running, since=None, started_before=False).segments[0].mode
        dt = min(rule.interval_s, left * slowdown[mode])
        g += power[mode] * truth.integral(t, t + dt) / _J_PER_KWH
        e += power[mode] * dt
        left -= dt / slowdown[mode]
        decider.advance(mode, dt, None)
        spans.append((t, t + dt, idx[mode]))
        t += dt
    return _outcome(nominal_s, deadline_s, spans, g, e, modes)


def _gridshift(spec: RunSpec, truth: _Grid, t0: datetime, modes: Sequence[ModeFigures], forecaster: GridForecaster, *,
               nominal_s: float, interval_s: float, pace_error: float = 0.0) -> JobOutcome:
    """The planner at the moments the product asks it (see the module docstring).

    As a deployment does it: one plan at the earliest start chooses the start (the cron's planning
    run, :func:`scheduler.planner.inputs.plan_start`); from the start on, the running flow re-plans every
    ``interval_s`` with a fresh forecast, the work left and the running mode. A pausable job that the
    plan pauses waits, without re-planning, for the plan's next window, where its next flow run plans again.

    ``pace_error``: the job really runs ``1 + pace_error`` times slower than its figures say in every
    mode. Plans use the figures until the job has run one interval, then the speeds seen (as
    :class:`scheduler.planner.deciders.WorkTracker` gives a job that reports its progress).
    """
    true_modes = tuple(replace(m, speed=m.speed / (1.0 + pace_error)) for m in modes) if pace_error else tuple(modes)
    ran_s = 0.0
    job, rules, constraints, objective = spec.job, spec.rules, spec.constraints, spec.objective
    assert isinstance(rules, PlanRule) and constraints is not None
    assert job.deadline_s is not None
    step = truth.step_s
    deadline_s = nominal_s + job.deadline_s
    earliest_s = nominal_s + job.earliest_start_s
    slot = constraints.slot_s
    pausable = job.checkpointable
    overhead = job.resume_overhead_s if pausable else 0.0
    names = {m.name: k for k, m in enumerate(modes)}
    steps = max(int(round(interval_s / slot)), 1)
    t, left = earliest_s, job.expected_duration_s
    mode: int | None = None
    since: float | None = None
    started = paused = False
    spans: list[tuple[float, float, int]] = []
    g = e = 0.0

    def plan(at: float) -> list[int]:
        i = min(int(at // step), len(truth.values) - 1)
        n_slots = int(math.ceil(max(deadline_s - at, 0.0) / slot)) + 1
        n_grid = int(math.ceil((at + n_slots * slot - i * step) / step)) + 1
        intensity = _Grid(forecaster.forecast(truth.values, i, n_grid), step, i * step).slot_means(at, slot, n_slots)
        # the flow's planner inputs (scheduler.planner.deciders.plan_inputs): the start has come for a job
        # that cannot pause, so only the modes are planned
        pj, cons = plan_inputs(modes, rules=rules, constraints=constraints, pausable=pausable,
                               resume_overhead_s=overhead, now=t0 + timedelta(seconds=at), work_s=left,
                               not_before=t0 + timedelta(seconds=max(at, earliest_s)),
                               deadline=t0 + timedelta(seconds=deadline_s),
                               running_mode=modes[mode].name if mode is not None else None,
                               running_since=t0 + timedelta(seconds=since) if since is not None else None,
                               resuming=paused, start_now=started and not pausable,
                               reference_start=t0 + timedelta(seconds=max(nominal_s, earliest_s)))
        seen = true_modes if ran_s >= interval_s - 1e-6 else modes  # the pace is measured after one interval
        p = plan_slots(intensity, pj, seen, now=t0 + timedelta(seconds=at), objective=objective,
                       constraints=cons, explain=False)
        return [names[x] if x is not None else -1 for x in p.slot_modes]

    if isinstance(forecaster, StartGate):  # do no harm: a forecast whose record shows no start gain keeps the cron start
        i0 = int(earliest_s // step)
        window = start_window(origin_s=i0 * step, reference_s=max(nominal_s, earliest_s),
                              latest_start_s=deadline_s - job.expected_duration_s, run_s=job.expected_duration_s, step_s=step)
        if not forecaster.trusts_start(truth.values, i0, window):
            t, started = max(nominal_s, earliest_s), True

    while left > 1e-9:
        todo = plan(t)
        if mode is None:  # not running: wait for the plan's (next) window, which then plans again
            wait = next((k for k, m in enumerate(todo) if m >= 0), len(todo))
            if wait > 0:
                t += wait * slot
                started = started or not pausable
                continue
        todo = todo[:steps] or [-1]
        if len(todo) < steps and todo[-1] >= 0:
            todo += [todo[-1]] * (steps - len(todo))
        for k, m in enumerate(todo):
            a = t + k * slot
            if m < 0:
                if mode is not None:
                    paused, mode, since = True, None, None
                    t = a
                    break
                continue
            if paused:
                left += overhead
                paused = False
            if m != mode:
                mode, since = m, a
            started = True
            run, left, dg, de = _run_slots(truth, true_modes, [m], a, slot, left)
            ran_s += sum(b - a_ for a_, b, _ in run)
            spans += run
            g += dg
            e += de
            if left <= 1e-9:
                break
        else:
            t += len(todo) * slot
        if t > deadline_s + 7 * 86400:  # cannot happen with a finite plan; keeps a bug from hanging
            raise RuntimeError("gridshift simulation did not finish")
    return _outcome(nominal_s, deadline_s, spans, g, e, modes)


def _oracle(policy: Policy, truth: _Grid, t0: datetime, modes: Sequence[ModeFigures], *, nominal_s: float,
            grid_s: float, objective: Objective) -> JobOutcome:
    """The exact optimum with perfect foresight, no margin and no dwell, on ``grid_s`` slots."""
    job = policy.job
    assert job.deadline_s is not None
    earliest_s = nominal_s + job.earliest_start_s
    deadline_s = nominal_s + job.deadline_s
    n = int(math.ceil((deadline_s - earliest_s) / grid_s)) + 1
    intensity = truth.slot_means(earliest_s, grid_s, n)
    now = t0 + timedelta(seconds=earliest_s)
    pausable = job.checkpointable
    pj = PlanJob(work_s=job.expected_duration_s, not_before=now, deadline=t0 + timedelta(seconds=deadline_s),
                 pausable=pausable, resume_overhead_s=job.resume_overhead_s if pausable else 0.0)
    plan = plan_slots(intensity, pj, modes, now=now, objective=objective,
                      constraints=PlanConstraints(slot_s=grid_s), explain=False)
    names = {m.name: k for k, m in enumerate(modes)}
    slot_modes = [names[s] if s is not None else -1 for s in plan.slot_modes]
    left = job.expected_duration_s
    spans: list[tuple[float, float, int]] = []
    g = e = 0.0
    t, resumed = earliest_s, False
    for k, m in enumerate(slot_modes):
        if m >= 0 and spans and resumed:
            left += pj.resume_overhead_s
        resumed = m < 0 and bool(spans)
        run, left, dg, de = _run_slots(truth, modes, [m], t + k * grid_s, grid_s, left)
        spans += run
        g += dg
        e += de
    return _outcome(nominal_s, deadline_s, spans, g, e, modes)


def _cost(j: JobOutcome, objective: Objective) -> float:
    return j.carbon_g + objective.time_value_g_per_h * (j.end_s - j.start_s) / 3600.0


def _gcd_s(*xs: float) -> float:
    out = 0
    for x in xs:
        out = math.gcd(out, int(round(x)))
    return float(max(out, 1))


@dataclass(frozen=True)
class _JobContext:
    """What every job of one simulation shares (sent once to each worker process)."""

    policy: Policy
    spec: RunSpec  # the planner's run specification, as the flow resolves it
    threshold_spec: RunSpec  # the threshold strategy's (the policy's own rule, or the default relative one)
    truth: _Grid
    t0: datetime
    modes: tuple[ModeFigures, ...]
    forecaster: GridForecaster
    wanted: tuple[str, ...]
    objective: Objective
    constraints: PlanConstraints
    interval_s: float
    grid_s: float
    min_gain: float
    kind: str
    pace_error: float = 0.0


def _simulate_job(ctx: _JobContext, ns: float) -> dict[str, JobOutcome]:
    """Every wanted strategy on the occurrence nominally at ``ns`` (trace seconds)."""
    job, truth, modes = ctx.policy.job, ctx.truth, ctx.modes
    assert job.deadline_s is not None
    dl = ns + job.deadline_s
    earliest = ns + job.earliest_start_s
    work = job.expected_duration_s
    clean = [m.name for m in modes].index(ctx.policy.rules.clean_mode)
    out: dict[str, JobOutcome] = {"baseline": _static(truth, modes, clean, ns, work, ns, dl)}
    if "static_efficiency" in ctx.wanted:
        fits = [k for k, m in enumerate(modes) if ns + work / m.speed <= dl + 1e-6] or [clean]
        frugal = min(fits, key=lambda k: modes[k].joules_per_work_s)
        out["static_efficiency"] = _static(truth, modes, frugal, ns, work, ns, dl)
    best = _best_static(truth, modes, earliest, dl, work, ctx.grid_s, ns)
    if "best_static" in ctx.wanted:
        out["best_static"] = best
    if "threshold" in ctx.wanted:
        out["threshold"] = _threshold(ctx.threshold_spec, truth, ctx.t0, modes, ctx.forecaster, nominal_s=ns,
                                      min_gain=ctx.min_gain, kind=ctx.kind)
    out["gridshift"] = _gridshift(ctx.spec, truth, ctx.t0, modes, ctx.forecaster, nominal_s=ns, interval_s=ctx.interval_s,
                                  pace_error=ctx.pace_error)
    # the DP's work quantum may cost it up to max_rounding against a schedule counted exactly; the
    # best single-mode schedule is in its search space, so the oracle is the better of the two
    dp = _oracle(ctx.policy, truth, ctx.t0, modes, nominal_s=ns, grid_s=ctx.grid_s, objective=ctx.objective)
    out["oracle"] = dp if _cost(dp, ctx.objective) <= _cost(best, ctx.objective) else best
    return out


#: the context forked workers inherit (set just before the pool forks), so it is not pickled to each
_FORKED: _JobContext | None = None


def _simulate_chunk(offsets: Sequence[float], ctx: _JobContext | None = None) -> list[dict[str, JobOutcome]]:
    ctx = ctx if ctx is not None else _FORKED
    assert ctx is not None
    return [_simulate_job(ctx, ns) for ns in offsets]


def _map_jobs(ctx: _JobContext, offsets: list[float], workers: int | None) -> list[dict[str, JobOutcome]]:
    """Jobs are independent: spread them over ``workers`` processes (default: one per core), in order.

    Forked workers inherit the context (trace, forecaster, a forecast archive) without copying or
    pickling it; only the job offsets and outcomes cross. Where fork is unavailable it runs in-process.
    """
    global _FORKED
    n = workers if workers is not None else (os.cpu_count() or 1)
    n = min(n, len(offsets) // _MIN_JOBS_PER_WORKER)
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return _simulate_chunk(offsets, ctx)
    chunks = [offsets[k::n] for k in range(n)]  # interleaved: each worker gets every season
    _FORKED = ctx
    try:
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_simulate_chunk, chunks))
    finally:
        _FORKED = None
    ordered: list[dict[str, JobOutcome]] = [{}] * len(offsets)
    for k, part in enumerate(parts):
        ordered[k::n] = part
    return ordered


def nominal_starts(cron: str, t0: datetime, end: datetime, *, tz: str, earliest_start_s: float,
                   deadline_s: float) -> list[datetime]:
    """The occurrences of ``cron`` in ``tz`` (read as Prefect and ``serve`` read it) whose whole
    window, from the earliest start to the deadline, lies in the trace ``[t0, end)``."""
    first = t0 + timedelta(seconds=max(-earliest_start_s, 0.0))
    last = end - timedelta(seconds=deadline_s)
    return [n for n in cron_occurrences(cron, first, end, tz=tz) if n <= last]


def simulate(
    policy: Policy,
    trace: IntensitySeries,
    modes: Sequence[ModeFigures],
    forecaster: GridForecaster,
    *,
    forecast_label: str = "daily-profile",
    min_gain: float = 0.03,
    strategies: Sequence[str] = STRATEGIES,
    workers: int | None = None,
    pace_error: float = 0.0,
) -> SimulationResult:
    """Replay ``policy``'s recurring job over ``trace`` (see the module docstring).

    ``workers``: processes to spread the jobs over (default: one per core; 1 runs in this process).
    The result does not depend on it: every forecaster answers from the trace and the decision time alone.
    ``pace_error``: the planner's job runs this much slower (relative) than its figures in every mode
    (a check of the deadline margin; the other strategies run at the figures).
    """
    job = policy.job
    if job.cron is None:
        raise PolicyError("job.cron: simulate needs a recurring job (set job.cron, e.g. '0 1 * * *')")
    if job.deadline_s is None:
        raise PolicyError("job.deadline_s: simulate needs a deadline to know how far a job may move")
    names = [m.name for m in modes]
    threshold_policy = _threshold_policy(policy)
    for m in (policy.rules.clean_mode, threshold_policy.rules.dirty_mode):
        if m not in names:
            raise PolicyError(f"modes.{m}: no power/speed figures for this mode")
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise PolicyError(f"unknown strategy {unknown[0]!r} (strategies: {', '.join(STRATEGIES)})")
    wanted = [s for s in STRATEGIES if s in strategies or s in ("baseline", "gridshift", "oracle")]
    t0, step, values = resample(trace)
    truth = _Grid(values, step)
    end = t0 + timedelta(seconds=step * len(values))
    nominals = nominal_starts(job.cron, t0, end, tz=job.timezone, earliest_start_s=job.earliest_start_s,
                              deadline_s=job.deadline_s)
    rule = policy.rules
    # a threshold policy is planned with its own dwell and interval, on slots of the trace's resolution
    plan_rule = rule if isinstance(rule, PlanRule) else PlanRule(clean_mode=rule.clean_mode, dirty_mode=rule.dirty_mode,
                                                                 min_dwell_s=rule.min_dwell_s, interval_s=rule.interval_s,
                                                                 slot_s=step)
    # the run specification the flow resolves: the product's constraints and objective (the same rounding bound too)
    spec = resolve_run(policy.model_copy(update={"rules": plan_rule}))
    constraints, objective = spec.constraints, spec.objective
    assert constraints is not None
    grid_s = _gcd_s(step, plan_rule.slot_s, plan_rule.interval_s, threshold_policy.rules.interval_s)
    ctx = _JobContext(policy=policy, spec=spec, threshold_spec=resolve_run(threshold_policy), truth=truth, t0=t0,
                      modes=tuple(modes), forecaster=forecaster, wanted=tuple(wanted), objective=objective, constraints=constraints,
                      interval_s=plan_rule.interval_s, grid_s=grid_s, min_gain=min_gain, kind=trace.kind,
                      pace_error=pace_error)
    offsets = [(n - t0).total_seconds() for n in nominals]
    out: dict[str, list[JobOutcome]] = {s: [] for s in wanted}
    for per_job in _map_jobs(ctx, offsets, workers):
        for name, outcome in per_job.items():
            out[name].append(outcome)
    margin = {"margin_s": constraints.deadline_margin_s,
              "kept_as": "pace reserve" if constraints.pace_tolerance > 0 else "time before the deadline",
              "pace_tolerance": constraints.pace_tolerance, "pace_error": pace_error}
    return SimulationResult(t0=t0, step_s=step, values=values, outcomes=out, modes=tuple(modes),
                            forecast=forecast_label, clean_mode=policy.rules.clean_mode,
                            extra={"deadline_margin": margin})
