"""The strategies the simulator compares, each one job on the true trace (see :mod:`simulation.simulate`).

Every function here runs one job from its nominal (cron) time and returns a :class:`JobOutcome`;
carbon is integrated exactly over the real, piecewise-constant trace (:class:`TruthGrid`), and the
cost over the true prices when there are (:class:`simulation.sim_price.SimPrices`); power and speed
per mode are the given :class:`scheduler.planner.ModeFigures`. The two that decide as
they go, the planner and the threshold rule, run the product's own loop
(:func:`scheduler.loop.loop.run_loop`) through :class:`simulation.trace_run.TraceDriver`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable, Sequence

import numpy as np

from scheduler.loop.gate import ForecastChoice
from scheduler.loop.loop import SignalReading
from scheduler.planner import ModeFigures, Objective, PlanConstraints, PlanJob, plan_slots
from scheduler.planner.deciders import Decider, ThresholdDecider, make_decider
from scheduler.planner.grid import GridSignal
from scheduler.planner.shifting import best_start_over_modes
from scheduler.policy.types import AbsoluteRule, PlanRule, Policy, RelativeRule
from scheduler.run_spec import RunSpec
from simulation.sim_forecast import GridForecaster
from simulation.sim_gate import grid_reader
from simulation.sim_price import SimPrices
from simulation.trace_run import TraceDriver, run_job_on_trace

__all__ = ["JobOutcome", "TruthGrid", "as_threshold_policy", "best_static", "gridshift_run", "oracle_run", "pace_modes",
           "static_run", "threshold_run"]

_J_PER_KWH = 3.6e6
#: the work quantum of a priced optimum: a cost-only plan on known prices comes within the default 1 % of it,
#: so the optimum is counted five times finer (a carbon optimum keeps the planner's default, as before prices)
_ROUNDING_PRICED = 0.002


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
    planned_on: str = ""  # gridshift: the forecast the do-no-harm gate let it plan on ("" : none, the static plan)
    cost: float | None = None  # currency, at the true prices (None: no prices)

    def value(self, carbon_price: float | None) -> float:
        """The outcome on an objective: grams, or cost + carbon_price x tonnes."""
        return self.carbon_g if carbon_price is None else carbon_price * self.carbon_g / 1e6 + (self.cost or 0.0)

    @property
    def late(self) -> bool:
        return self.end_s > self.deadline_s + 1e-6


class TruthGrid(GridSignal):
    """The true trace: values on the simulator's grid, seconds counted from ``epoch`` (the trace's start)."""

    def slot_means(self, a: float | datetime, slot_s: float, n: int) -> np.ndarray:  # type: ignore[override]
        """Mean of each of ``n`` slots of ``slot_s`` from ``a`` (trace seconds, or a time)."""
        return self.slot_means_s(a if isinstance(a, (int, float)) else self.seconds(a), slot_s, n)


def run_slots(truth: TruthGrid, modes: Sequence[ModeFigures], slot_modes: Sequence[int], a: float, slot_s: float,
               left: float, prices: SimPrices | None = None) -> tuple[list[tuple[float, float, int]], float, float, float, float]:
    """Execute per-slot modes from ``a`` on the true trace until ``left`` work is done: (spans, left, g, J, cost)."""
    spans: list[tuple[float, float, int]] = []
    g = e = k = 0.0
    t = a
    for m in slot_modes:
        if left <= 1e-9:
            break
        if m >= 0:
            dt = min(slot_s, left / modes[m].speed)
            g += modes[m].power_w * truth.integral(t, t + dt) / _J_PER_KWH
            e += modes[m].power_w * dt
            k += prices.cost(modes[m].power_w, t, t + dt) if prices is not None else 0.0
            left -= dt * modes[m].speed
            spans.append((t, t + dt, m))
        t += slot_s
    return spans, left, g, e, k


def outcome_of(nominal: float, deadline: float, spans: list[tuple[float, float, int]], g: float, e: float,
             modes: Sequence[ModeFigures], cost: float | None = None) -> JobOutcome:
    merged: list[tuple[float, float, str]] = []
    for a, b, m in spans:
        name = modes[m].name
        if merged and merged[-1][2] == name and abs(merged[-1][1] - a) < 1e-6:
            merged[-1] = (merged[-1][0], b, name)
        else:
            merged.append((a, b, name))
    start = merged[0][0] if merged else nominal
    end = merged[-1][1] if merged else nominal
    return JobOutcome(nominal, start, end, deadline, g, e, tuple(merged), cost=cost)


def static_run(truth: TruthGrid, modes: Sequence[ModeFigures], m: int, start: float, work: float, nominal: float,
            deadline: float, prices: SimPrices | None = None) -> JobOutcome:
    dur = work / modes[m].speed
    g = modes[m].power_w * truth.integral(start, start + dur) / _J_PER_KWH
    cost = prices.cost(modes[m].power_w, start, start + dur) if prices is not None else None
    return JobOutcome(nominal, start, start + dur, deadline, g, modes[m].power_w * dur, ((start, start + dur, modes[m].name),),
                      cost=cost)


def best_static(truth: TruthGrid, modes: Sequence[ModeFigures], earliest: float, deadline: float, work: float,
                 grid_s: float, nominal: float, prices: SimPrices | None = None,
                 carbon_price: float | None = None) -> JobOutcome:
    """One mode and one start on ``grid_s`` steps, the best on the objective (grams; or, with
    ``carbon_price``, cost + carbon priced) with perfect foresight."""
    best: tuple[float, int, float] | None = None
    for m, fig in enumerate(modes):
        dur = work / fig.speed
        n = int(math.floor((deadline - earliest - dur) / grid_s + 1e-9)) + 1
        if n <= 0:
            continue
        starts = earliest + np.arange(n) * grid_s
        g = fig.power_w * (truth.F(starts + dur) - truth.F(starts)) / _J_PER_KWH
        if carbon_price is not None and prices is not None:
            P = prices.truth
            g = carbon_price * g / 1e6 + fig.power_w * (P.F(starts + dur) - P.F(starts)) / 3.6e9
        k = int(np.argmin(g))
        if best is None or g[k] < best[0]:
            best = (float(g[k]), m, float(starts[k]))
    if best is None:  # no single mode fits: the fastest at the earliest start
        m = max(range(len(modes)), key=lambda i: modes[i].speed)
        return static_run(truth, modes, m, earliest, work, nominal, deadline, prices)
    return static_run(truth, modes, best[1], best[2], work, nominal, deadline, prices)


def as_threshold_policy(policy: Policy) -> Policy:
    """The policy with a threshold rule: its own, or the default relative rule over the same modes."""
    rule = policy.rules
    if not isinstance(rule, PlanRule):
        return policy
    relative = RelativeRule(clean_mode=rule.clean_mode, dirty_mode=rule.dirty_mode, min_dwell_s=rule.min_dwell_s,
                            interval_s=rule.interval_s, horizon_s=43200.0)
    return policy.model_copy(update={"rules": relative})


def pace_modes(modes: Sequence[ModeFigures], pace_error: float) -> tuple[ModeFigures, ...]:
    """The modes as the job really runs them: ``1 + pace_error`` times slower than their figures."""
    return tuple(replace(m, speed=m.speed / (1.0 + pace_error)) for m in modes) if pace_error else tuple(modes)


def threshold_run(spec: RunSpec, truth: TruthGrid, t0: datetime, modes: Sequence[ModeFigures], forecaster: GridForecaster,
                  *, nominal_s: float, min_gain: float, pace_error: float = 0.0,
                  prices: SimPrices | None = None) -> JobOutcome:
    """The old rule: best_start_over_modes on the forecast at the earliest start, then the threshold
    decider (:class:`scheduler.planner.deciders.ThresholdDecider`) every interval, in the run loop.

    The job reports no progress (the rule counts time at the modes' slowdowns, as it did)."""
    job, rule = spec.job, spec.rules
    assert isinstance(rule, (AbsoluteRule, RelativeRule))
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
    horizon_s = getattr(rule, "horizon_s", rule.interval_s)
    n = max(int(math.ceil(horizon_s / step)), 1)
    read = grid_reader(forecaster, truth, "", lambda s, i: n)
    # the flow's threshold decider, with the guard a fraction of the job before the deadline
    decider = ThresholdDecider(rule, spec.modes, expected_s=work_s, interval_s=rule.interval_s,
                               deadline=t0 + timedelta(seconds=deadline_s), slowdown=slowdown,
                               guard=t0 + timedelta(seconds=deadline_s - min(rule.interval_s, 0.05 * work_s)))
    driver = TraceDriver(truth, pace_modes(modes, pace_error), work_s=work_s, read=read, reports_progress=False,
                         prices=prices)
    run_job_on_trace(driver, lambda done, windows: decider, start_s=origin_s + plan.start_s, interval_s=rule.interval_s,
                     pausable=False, choice=ForecastChoice(), clean_mode=clean, give_up_s=deadline_s + 7 * 86400)
    return outcome_of(nominal_s, deadline_s, driver.spans, driver.carbon_g, driver.energy_j, modes, driver.cost)


def gridshift_run(spec: RunSpec, truth: TruthGrid, modes: Sequence[ModeFigures], read: Callable[[float], SignalReading],
                  *, nominal_s: float, start_s: float, choice: ForecastChoice, pace_error: float = 0.0,
                  prices: SimPrices | None = None) -> JobOutcome:
    """The planner where the product asks it, from the start the planning run chose (``start_s``).

    From the start on, the training run re-plans every ``rules.interval_s`` on the forecast ``read``
    gives (the one ``choice`` names; none: the static plan), with the work left and the running mode;
    a planned pause longer than the deferral threshold ends the run and the next window plans again
    (:func:`simulation.trace_run.run_job_on_trace`). ``pace_error``: the job really runs ``1 +
    pace_error`` times slower than its figures in every mode; it reports its progress, so plans use
    the figures until a mode has run one interval, then the speeds seen
    (:class:`scheduler.planner.deciders.WorkTracker`). ``prices``: the run is costed at the true prices
    (what it plans on comes with ``read``).
    """
    job = spec.job
    assert isinstance(spec.rules, PlanRule) and job.deadline_s is not None
    deadline_s = nominal_s + job.deadline_s
    pausable = job.checkpointable
    deadline = truth.epoch + timedelta(seconds=deadline_s) if truth.epoch is not None else None
    driver = TraceDriver(truth, pace_modes(modes, pace_error), work_s=job.expected_duration_s, read=read,
                         reports_progress=True, resume_overhead_s=job.resume_overhead_s if pausable else 0.0,
                         prices=prices)

    def decider(done_s: float, windows: int) -> Decider:  # each run (window) of the job decides anew, as a flow run does
        return make_decider(spec, modes, deadline=deadline, pausable=pausable, done_s=done_s, explain=False)

    run_job_on_trace(driver, decider, start_s=start_s, interval_s=spec.interval_s, pausable=pausable, choice=choice,
                     clean_mode=spec.clean_mode, give_up_s=deadline_s + 7 * 86400)
    return outcome_of(nominal_s, deadline_s, driver.spans, driver.carbon_g, driver.energy_j, modes, driver.cost)


def oracle_run(policy: Policy, truth: TruthGrid, t0: datetime, modes: Sequence[ModeFigures], *, nominal_s: float,
            grid_s: float, objective: Objective, prices: SimPrices | None = None) -> JobOutcome:
    """The exact optimum of ``objective`` with perfect foresight (of carbon, and of the prices), no margin
    and no dwell, on ``grid_s`` slots."""
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
    price = prices.truth.slot_means_s(earliest_s, grid_s, n) if prices is not None and objective.priced else None
    plan = plan_slots(intensity, pj, modes, now=now, objective=objective,
                      constraints=PlanConstraints(slot_s=grid_s, max_rounding=_ROUNDING_PRICED if objective.priced else 0.01),
                      explain=False, price=price)
    names = {m.name: k for k, m in enumerate(modes)}
    slot_modes = [names[s] if s is not None else -1 for s in plan.slot_modes]
    left = job.expected_duration_s
    spans: list[tuple[float, float, int]] = []
    g = e = cost = 0.0
    t, resumed = earliest_s, False
    for k, m in enumerate(slot_modes):
        if m >= 0 and spans and resumed:
            left += pj.resume_overhead_s
        resumed = m < 0 and bool(spans)
        run, left, dg, de, dk = run_slots(truth, modes, [m], t + k * grid_s, grid_s, left, prices)
        spans += run
        g += dg
        e += de
        cost += dk
    return outcome_of(nominal_s, deadline_s, spans, g, e, modes, cost if prices is not None else None)
