"""The strategies the simulator compares, each one job on the true trace (see :mod:`simulation.simulate`).

Every function here runs one job from its nominal (cron) time and returns a :class:`JobOutcome`;
carbon is integrated exactly over the real, piecewise-constant trace (:class:`TruthGrid`), power
and speed per mode are the given :class:`scheduler.planner.ModeFigures`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Sequence

import numpy as np

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.planner import ModeFigures, Objective, PlanConstraints, PlanJob, plan_slots
from scheduler.planner.deciders import ThresholdDecider, plan_inputs
from scheduler.planner.shifting import best_start_over_modes
from scheduler.policy.types import AbsoluteRule, PlanRule, Policy, RelativeRule
from scheduler.run_spec import RunSpec
from simulation.sim_forecast import GridForecaster, StartGate, start_window

__all__ = ["JobOutcome", "TruthGrid", "best_static", "gridshift_run", "oracle_run", "static_run", "as_threshold_policy",
           "threshold_run"]

_J_PER_KWH = 3.6e6


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


class TruthGrid:
    """Values on a regular grid as a cumulative integral: exact means over any span (the last value holds after)."""

    def __init__(self, values: np.ndarray, step_s: float, origin_s: float = 0.0) -> None:
        self.values = np.asarray(values, dtype=float)
        self.step_s = step_s
        self.origin_s = origin_s
        self.cum = np.concatenate(([0.0], np.cumsum(self.values) * step_s))
        # the same numbers as Python floats, for integral(): a run integrates two points per slot, and
        # numpy's per-call overhead on scalars was 5 % of a 12 h year
        self._cum, self._vals = self.cum.tolist(), self.values.tolist()
        self._end = len(self.values) * step_s

    def F(self, t: np.ndarray | float) -> np.ndarray:
        x = np.asarray(t, dtype=float) - self.origin_s
        end = len(self.values) * self.step_s
        xc = np.clip(x, 0.0, end)
        i = np.minimum((xc // self.step_s).astype(np.int64), len(self.values) - 1)
        inside = self.cum[i] + (xc - i * self.step_s) * self.values[i]
        return inside + np.maximum(x - end, 0.0) * self.values[-1] + np.minimum(x, 0.0) * self.values[0]

    def _point(self, t: float) -> float:
        """:meth:`F` at one point, in the same floating-point operations."""
        x = t - self.origin_s
        xc = min(max(x, 0.0), self._end)
        i = min(int(xc // self.step_s), len(self._vals) - 1)
        inside = self._cum[i] + (xc - i * self.step_s) * self._vals[i]
        return inside + max(x - self._end, 0.0) * self._vals[-1] + min(x, 0.0) * self._vals[0]

    def integral(self, a: float, b: float) -> float:
        """``integral_a^b I(t) dt`` in g/kWh x s."""
        return float(self._point(float(b)) - self._point(float(a)))

    def slot_means(self, a: float, slot_s: float, n: int) -> np.ndarray:
        """Mean of each of ``n`` slots of ``slot_s`` from ``a``."""
        off = (a - self.origin_s) / self.step_s
        if slot_s == self.step_s and abs(off - round(off)) < 1e-9 and 0 <= round(off) and round(off) + n <= len(self.values):
            i = int(round(off))
            return self.values[i: i + n]
        edges = self.F(a + np.arange(n + 1) * slot_s)
        return np.diff(edges) / slot_s


def run_slots(truth: TruthGrid, modes: Sequence[ModeFigures], slot_modes: Sequence[int], a: float, slot_s: float,
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


def outcome_of(nominal: float, deadline: float, spans: list[tuple[float, float, int]], g: float, e: float,
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


def static_run(truth: TruthGrid, modes: Sequence[ModeFigures], m: int, start: float, work: float, nominal: float,
            deadline: float) -> JobOutcome:
    dur = work / modes[m].speed
    g = modes[m].power_w * truth.integral(start, start + dur) / _J_PER_KWH
    return JobOutcome(nominal, start, start + dur, deadline, g, modes[m].power_w * dur, ((start, start + dur, modes[m].name),))


def best_static(truth: TruthGrid, modes: Sequence[ModeFigures], earliest: float, deadline: float, work: float,
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
        return static_run(truth, modes, m, earliest, work, nominal, deadline)
    return static_run(truth, modes, best[1], best[2], work, nominal, deadline)


def _series(values: np.ndarray, origin: datetime, step_s: float, kind: str) -> IntensitySeries:
    step = timedelta(seconds=step_s)
    pts = tuple(IntensityPoint(start=origin + i * step, duration=step, g_per_kwh=float(v), kind=kind,  # type: ignore[arg-type]
                               forecast=i > 0, source="simulation")
                for i, v in enumerate(values))
    return IntensitySeries(points=pts)


def as_threshold_policy(policy: Policy) -> Policy:
    """The policy with a threshold rule: its own, or the default relative rule over the same modes."""
    rule = policy.rules
    if not isinstance(rule, PlanRule):
        return policy
    relative = RelativeRule(clean_mode=rule.clean_mode, dirty_mode=rule.dirty_mode, min_dwell_s=rule.min_dwell_s,
                            interval_s=rule.interval_s, horizon_s=43200.0)
    return policy.model_copy(update={"rules": relative})


def threshold_run(spec: RunSpec, truth: TruthGrid, t0: datetime, modes: Sequence[ModeFigures], forecaster: GridForecaster,
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
    return outcome_of(nominal_s, deadline_s, spans, g, e, modes)


def gridshift_run(spec: RunSpec, truth: TruthGrid, t0: datetime, modes: Sequence[ModeFigures], forecaster: GridForecaster, *,
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
        intensity = TruthGrid(forecaster.forecast(truth.values, i, n_grid), step, i * step).slot_means(at, slot, n_slots)
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
            run, left, dg, de = run_slots(truth, true_modes, [m], a, slot, left)
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
    return outcome_of(nominal_s, deadline_s, spans, g, e, modes)


def oracle_run(policy: Policy, truth: TruthGrid, t0: datetime, modes: Sequence[ModeFigures], *, nominal_s: float,
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
        run, left, dg, de = run_slots(truth, modes, [m], t + k * grid_s, grid_s, left)
        spans += run
        g += dg
        e += de
    return outcome_of(nominal_s, deadline_s, spans, g, e, modes)
