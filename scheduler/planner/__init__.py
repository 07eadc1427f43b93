"""The planner: when a job runs, in which modes, and where it pauses. Pure; the only place that decides.

``plan_run(series, job, modes, now=...)`` solves exactly (dynamic programming over forecast slots,
work left and mode; see :mod:`scheduler.planner.solve`):

    minimise  carbon (g) + objective.time_value_g_per_h x hours until the finish

or, with ``objective.carbon_price`` (currency per tonne) and the prices published by ``now``,

    minimise  cost + carbon_price x tonnes + that time value in currency

(one weight per slot, :func:`scheduler.planner.objective.objective_weights`), subject to the deadline (minus ``constraints.deadline_margin_s``), a minimum dwell per mode,
contiguous running unless the job is pausable (each resume costs ``resume_overhead_s`` of work),
and no start before ``job.not_before``. When the margin leaves no room the margin is dropped; when
the deadline itself cannot be met the plan is the fastest finish and ``feasible`` is False.
Every choice comes with one plain sentence (``RunPlan.reasons``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Sequence

import numpy as np

from carbon.series import as_utc
from scheduler.planner.objective import explain as explain_plan
from scheduler.planner.grid import Signal, signal_end, slot_values
from scheduler.planner.objective import PriceSignal, objective_weights, time_value_per_h, units_of
from scheduler.planner.power_cap import PowerCap, cap_mask, cap_reasons, modes_under_cap
from scheduler.planner.slot_plan import account, fastest_allowed, fastest_slots, fits
from scheduler.planner.solve import choose_quantum, solve_slots

__all__ = ["ModeFigures", "PlanJob", "Objective", "PlanConstraints", "PowerCap", "Segment", "RunPlan", "pace_reserve_holds",
           "plan_run", "plan_slots"]


@dataclass(frozen=True)
class ModeFigures:
    """What one mode costs and how fast it works."""

    name: str
    power_w: float   # mean power of the job in this mode (all its GPUs), W
    speed: float     # work per wall second in reference (clean-mode) seconds: 1.0 = the clean mode, 0.8 = 1.25x slower
    source: str = "unspecified"
    measured: bool = False
    only_under_cap: bool = False  # a power limit between the policy's modes: used only where a power cap binds

    @property
    def joules_per_work_s(self) -> float:
        """Energy per reference second of work."""
        return self.power_w / self.speed


@dataclass(frozen=True)
class PlanJob:
    """The work to place."""

    work_s: float                            # work left, reference-mode seconds
    not_before: datetime                     # earliest start, tz-aware
    deadline: datetime | None = None
    pausable: bool = False
    resume_overhead_s: float = 0.0           # extra reference-mode seconds of work per resume
    running_mode: str | None = None          # the mode running now when re-planning mid-run
    running_since: datetime | None = None
    resuming: bool = False                   # paused with work done: starting again is a resume (costs the overhead)
    reference_start: datetime | None = None  # the start a user would pick (the cron time): kept unless min_gain is beaten


@dataclass(frozen=True)
class Objective:
    time_value_g_per_h: float = 0.0          # grams CO2 worth one hour earlier finish (0 = carbon only)
    carbon_price: float | None = None        # currency per tonne CO2: minimise cost + carbon priced (0 = cost only); None = carbon only
    currency: str = ""                       # the prices' currency (for the sentences)

    @property
    def priced(self) -> bool:
        """True when the plan minimises cost + carbon_price x tonnes (it then needs prices)."""
        return self.carbon_price is not None

    @property
    def time_value_per_h(self) -> float:
        """An hour's earlier finish in the objective's units (:func:`scheduler.planner.objective.time_value_per_h`)."""
        return time_value_per_h(self.time_value_g_per_h, self.carbon_price)


@dataclass(frozen=True)
class PlanConstraints:
    min_dwell_s: float = 0.0
    deadline_margin_s: float = 0.0
    slot_s: float = 300.0
    max_rounding: float = 0.01      # share of the work the solver's count of a plan may be off by (solve.choose_quantum); past it the plan says so
    min_gain: float = 0.0           # move the start off job.reference_start only for at least this relative forecast gain
    # > 0: the margin may be kept as a pace reserve instead of idle time (see pace_reserve_holds): the
    # relative slowdown it must absorb, detected at the next re-plan, which comes at most replan_s later
    pace_tolerance: float = 0.0
    replan_s: float = 0.0


@dataclass(frozen=True)
class Segment:
    start: datetime
    end: datetime
    mode: str
    work_s: float
    energy_j: float
    carbon_g: float
    reason: str
    cost: float | None = None   # currency, at the prices the plan stood on (None: no prices)


@dataclass(frozen=True)
class RunPlan:
    """A plan: segments in time order; pauses are the gaps between them."""

    start: datetime
    segments: tuple[Segment, ...]
    energy_j: float
    carbon_g: float
    finish: datetime
    feasible: bool
    reasons: tuple[str, ...]
    slot_modes: tuple[str | None, ...] = field(default=(), repr=False)  # mode per slot from ``start`` (None = waiting)
    rounding: float = 0.0       # share of the work the solver's count of this plan was off by (its work quantum's error)
    max_rounding: float = 0.01  # the bound it was planned under (PlanConstraints.max_rounding); past it, a reason warns
    cost: float | None = None   # currency, at the prices the plan stood on (None: planned without prices)

    @property
    def rounding_exceeded(self) -> bool:
        """True when the solver's count of this plan is off by more than its bound (the reasons say so)."""
        return self.rounding > self.max_rounding

    @property
    def reason(self) -> str:
        """Every choice's sentence, in one line."""
        return "; ".join(self.reasons)

    def mode_at(self, t: datetime) -> str | None:
        """The planned mode at ``t``; None before the start, in a pause, or after the finish."""
        for s in self.segments:
            if s.start <= t < s.end:
                return s.mode
        return None

    def windows(self) -> list[tuple[datetime, datetime]]:
        """Run windows: adjacent segments merged."""
        out: list[tuple[datetime, datetime]] = []
        for s in self.segments:
            if out and abs((s.start - out[-1][1]).total_seconds()) < 1e-6:
                out[-1] = (out[-1][0], s.end)
            else:
                out.append((s.start, s.end))
        return out


def plan_slots(intensity: np.ndarray, job: PlanJob, modes: Sequence[ModeFigures], *, now: datetime,
               objective: Objective = Objective(), constraints: PlanConstraints = PlanConstraints(),
               explain: bool = True, price: np.ndarray | None = None, power_cap: PowerCap | None = None) -> RunPlan:
    """:func:`plan_run` on intensities already cut into slots of ``constraints.slot_s`` from ``now``.

    ``intensity`` must cover the deadline (or the whole horizon of a job without one). ``explain=False``
    skips the sentences (the simulator re-plans thousands of times and reads only the slots).
    ``price``: the price per MWh of each slot (as long as ``intensity``); the plan's cost is reported
    with it, and a priced objective (``objective.carbon_price``) needs it.
    ``power_cap``: the run's power headroom over time (:mod:`scheduler.planner.power_cap`): in each slot
    only the modes whose power fits it; modes ``only_under_cap`` only where it binds.
    """
    now = as_utc(now)
    weights = objective_weights(intensity, price, objective.carbon_price)
    slot = float(constraints.slot_s)
    modes, mask = modes_under_cap(list(modes), power_cap, job.running_mode, now, slot, len(intensity))
    names = [m.name for m in modes]
    power = np.array([m.power_w for m in modes], dtype=float)
    speed = np.array([m.speed for m in modes], dtype=float)
    first = max(int(math.ceil((as_utc(job.not_before) - now).total_seconds() / slot - 1e-9)), 0)
    dwell = max(int(math.ceil(constraints.min_dwell_s / slot - 1e-9)), 1)
    running = names.index(job.running_mode) if job.running_mode in names else None
    forced = 0
    if running is not None:
        first = 0
        held = (now - as_utc(job.running_since)).total_seconds() if job.running_since else constraints.min_dwell_s
        forced = max(int(math.ceil((constraints.min_dwell_s - held) / slot - 1e-9)), 0)

    def horizon(margin_s: float) -> int:
        if job.deadline is None:
            return len(weights)
        return min(int(math.floor(((as_utc(job.deadline) - now).total_seconds() - margin_s) / slot + 1e-9)), len(weights))

    common = dict(slot_s=slot, work_s=job.work_s, first_start=first, dwell_slots=dwell, pausable=job.pausable,
                  resume_overhead_s=job.resume_overhead_s, resuming=job.resuming,
                  time_value_g_per_h=objective.time_value_per_h, running_mode=running, running_forced_slots=forced,
                  quantum_s=choose_quantum(speed, slot, job.work_s, max_rounding=constraints.max_rounding),
                  allowed=mask)
    margin_dropped = False

    def solve(margin_s: float):  # type: ignore[no-untyped-def]
        sp = solve_slots(weights, power, speed, deadline_slots=horizon(margin_s), **common)  # type: ignore[arg-type]
        if sp.feasible and constraints.min_gain > 0 and job.reference_start is not None and running is None:
            # a forecast's best start is its most optimistic one (the optimiser's curse): leave the reference
            # start only when the forecast gain is larger than the forecast can be trusted for
            ref = max(int(math.ceil((as_utc(job.reference_start) - now).total_seconds() / slot - 1e-9)), first)
            fixed = solve_slots(weights, power, speed, deadline_slots=horizon(margin_s),
                                **{**common, "first_start": ref}, last_start=ref)  # type: ignore[arg-type]
            # a priced objective may be negative (paid to use energy): the gain is relative to its size
            keep = (fixed.objective * (1.0 - constraints.min_gain) if fixed.objective >= 0
                    else fixed.objective - constraints.min_gain * abs(fixed.objective))
            if fixed.feasible and sp.objective > keep:
                sp = fixed
        return sp

    sp = None
    as_reserve = False
    # under a cap the fastest mode is not always allowed, which the pace reserve counts on
    if constraints.pace_tolerance > 0 and constraints.deadline_margin_s > 0 and job.deadline is not None and mask is None:
        # the margin as a pace reserve: the plan may use the time up to the deadline while, from every
        # point of it, the work left still fits at the fastest mode slowed by pace_tolerance
        left_s = (as_utc(job.deadline) - now).total_seconds()
        reserve = solve(0.0)
        need = job.work_s + reserve.resumes * (job.resume_overhead_s if job.pausable else 0.0)
        if reserve.feasible and pace_reserve_holds(reserve.modes, speed, slot_s=slot, work_s=need, left_s=left_s,
                                                   tolerance=constraints.pace_tolerance,
                                                   replan_s=constraints.replan_s):
            sp, as_reserve = reserve, True
    if sp is None:
        sp = solve(constraints.deadline_margin_s)
    if not sp.feasible and constraints.deadline_margin_s > 0:
        sp = solve_slots(weights, power, speed, deadline_slots=horizon(0.0), **common)  # type: ignore[arg-type]
        margin_dropped = sp.feasible
    over_cap = False
    if not sp.feasible and mask is not None and power_cap:  # the fastest finish the cap allows
        # past the horizon too: a run that must wait for headroom waits as long as the cap's windows say
        ahead = [(w.end - now).total_seconds() for w in power_cap.windows if w.end is not None]
        n_ext = len(intensity) + int(math.ceil((max(ahead, default=0.0) + job.work_s / float(speed.min())) / slot)) + 1
        mask_ext = cap_mask(power_cap.slot_headroom(now, slot, n_ext), modes)
        mask_ext = mask if mask_ext is None else mask_ext
        sp = fastest_allowed(0 if running is not None else first, job.work_s, speed, power, slot, mask_ext,
                             pausable=job.pausable, running=running is not None,
                             resuming=job.pausable and job.resuming and running is None,
                             resume_overhead_s=job.resume_overhead_s if job.pausable else 0.0)
        over_cap = not fits(sp.modes, mask_ext)
    elif not sp.feasible:
        # a paused job that starts again resumes: the fastest finish does the resume's work too
        overhead = job.resume_overhead_s if job.pausable and job.resuming and running is None else 0.0
        sp = fastest_slots(0 if running is not None and forced else first, job.work_s, speed, slot,
                           resume_overhead_s=overhead)
    c = _extended(intensity, len(sp.modes))
    ran, energy, carbon, finish_s = account(sp.modes, c, power, speed, slot_s=slot, work_s=job.work_s,
                                            resume_overhead_s=job.resume_overhead_s if job.pausable else 0.0,
                                            resumes=sp.resumes)
    pr = _extended(price, len(sp.modes)) if price is not None else None
    cost = (account(sp.modes, pr, power, speed, slot_s=slot, work_s=job.work_s, resumes=sp.resumes,
                    resume_overhead_s=job.resume_overhead_s if job.pausable else 0.0)[2] / _KWH_PER_MWH
            if pr is not None else None)
    segments: list[tuple[int, int, int, float]] = []  # (first slot, last slot, mode, seconds in last slot)
    for k, (m, rk) in enumerate(zip(sp.modes.tolist(), ran.tolist())):  # Python numbers: a 12 h plan has ~150 slots
        if m < 0 or rk <= 0:
            continue
        if segments and segments[-1][2] == m and segments[-1][1] == k - 1 and segments[-1][3] >= slot - 1e-9:
            segments[-1] = (segments[-1][0], k, m, rk)
        else:
            segments.append((k, k, m, rk))
    at = lambda s: now + timedelta(seconds=s)  # noqa: E731
    built: list[Segment] = []
    for a, b, m, last in segments:
        secs = (b - a) * slot + last
        e = power[m] * secs
        g = float(np.sum(power[m] * ran[a:b + 1] * c[a:b + 1]) / 3.6e6)
        k = float(np.sum(power[m] * ran[a:b + 1] * pr[a:b + 1]) / 3.6e9) if pr is not None else None
        built.append(Segment(start=at(a * slot), end=at(a * slot + secs), mode=names[m], work_s=float(speed[m] * secs),
                             energy_j=float(e), carbon_g=g, reason="", cost=k))
    start = built[0].start if built else at(first * slot)
    finish = at(finish_s) if built else start
    feasible = (sp.feasible or (job.deadline is not None and finish <= as_utc(job.deadline))) and not over_cap
    if job.deadline is None:
        feasible = True
    if not explain:
        return RunPlan(start=start, segments=tuple(built), energy_j=energy, carbon_g=carbon, finish=finish,
                       feasible=feasible, reasons=(), slot_modes=tuple(names[m] if m >= 0 else None for m in sp.modes),
                       rounding=sp.rounding, max_rounding=constraints.max_rounding, cost=cost)
    w = c if weights is intensity else _extended(weights, len(sp.modes))
    reasons, seg_reasons = explain_plan(built, list(modes), w, slot_s=slot, now=now, job=job, objective=objective,
                                   first_slot=first, feasible=feasible, margin_dropped=margin_dropped,
                                   deadline_margin_s=constraints.deadline_margin_s,
                                   units=units_of(objective.carbon_price, objective.currency))
    if as_reserve and job.deadline is not None and finish > as_utc(job.deadline) - timedelta(seconds=constraints.deadline_margin_s):
        reasons.append(f"it may finish within the {constraints.deadline_margin_s / 60:.0f} min deadline margin: the job "
                       f"reports its progress, so the margin is kept as a pace reserve (a slowdown of up to "
                       f"{constraints.pace_tolerance:.0%} seen at the next re-plan is caught up in faster modes)")
    if mask is not None and power_cap:
        reasons, seg_reasons = cap_reasons(reasons, seg_reasons, built, list(modes), power_cap, now=now,
                                           feasible=feasible, deadline=job.deadline, over_cap=over_cap)
    if sp.rounding > constraints.max_rounding:
        reasons.append(f"warning: the planner's work count of this plan is off by {sp.rounding:.1%} of the work, more "
                       f"than its {constraints.max_rounding:.0%} bound, so the plan may cost that much more than "
                       "the exact optimum")
    built = [Segment(s.start, s.end, s.mode, s.work_s, s.energy_j, s.carbon_g, r, s.cost)
             for s, r in zip(built, seg_reasons)]
    slot_modes = tuple(names[m] if m >= 0 else None for m in sp.modes)
    return RunPlan(start=start, segments=tuple(built), energy_j=energy, carbon_g=carbon, finish=finish,
                   feasible=feasible, reasons=tuple(reasons), slot_modes=slot_modes, rounding=sp.rounding,
                   max_rounding=constraints.max_rounding, cost=cost)


_KWH_PER_MWH = 1000.0


def _extended(values: np.ndarray, n: int) -> np.ndarray:
    """``values`` with the last one held out to ``n`` slots (a plan that runs past its signal)."""
    return np.concatenate((values, np.full(max(n - len(values), 0), values[-1] if len(values) else 0.0)))


def pace_reserve_holds(modes: np.ndarray, speed: np.ndarray, *, slot_s: float, work_s: float, left_s: float,
                       tolerance: float, replan_s: float) -> bool:
    """Does a slot plan keep a pace reserve in place of a deadline margin?

    ``modes``: mode index per slot from now (-1 waiting), ``speed`` per mode, ``work_s`` the work
    the plan must do, ``left_s`` seconds from now to the deadline. The reserve is for a job that
    turns out up to ``tolerance`` slower (relative) than planned, from any moment on; a run that
    measures its progress sees it at its next re-plan, at most ``replan_s`` later, and re-plans the
    work left at the pace seen. It holds when at every slot boundary ``t`` of the run

        t + replan_s x tolerance + work_left(t) x (1 + tolerance) / fastest speed <= deadline

    (the work lost before the slowdown is seen is at most ``replan_s x tolerance`` of fastest-mode
    time; the rest fits at the fastest mode slowed by ``tolerance``), and the run ends at least
    ``replan_s x tolerance`` before the deadline (a slowdown after the last re-plan). The left side
    is linear between boundaries, so the boundaries suffice. A plan at the fixed margin ``M`` with
    ``tolerance = M / work`` at the fastest mode satisfies the first condition, not always the second.
    """
    modes = np.asarray(modes)
    run = modes >= 0
    if not run.any():
        return True
    fastest = float(np.max(speed))
    work = np.where(run, speed[np.maximum(modes, 0)] * slot_s, 0.0)
    done = np.concatenate(([0.0], np.cumsum(work)))  # work done by each slot boundary, at the planned speeds
    last = int(np.searchsorted(done, work_s - 1e-9))  # the boundary at or after which the work is done
    if last >= len(done):
        return False  # the plan does not finish the work
    k_end = last - 1  # the slot the work runs out in
    finish = k_end * slot_s + max(work_s - done[k_end], 0.0) / speed[modes[k_end]]
    lag = replan_s * tolerance
    if finish + lag > left_s + 1e-6:
        return False
    begin = int(np.argmax(run))
    k = np.arange(begin, last)  # boundaries from the run's start to the last one before the finish
    left = np.maximum(work_s - done[k], 0.0)
    return bool(np.all(k * slot_s + lag + left * (1.0 + tolerance) / fastest <= left_s + 1e-6))


def plan_run(series: Signal, job: PlanJob, modes: Sequence[ModeFigures], *, now: datetime,
             objective: Objective = Objective(), constraints: PlanConstraints = PlanConstraints(),
             explain: bool = True, price: Signal | None = None, power_cap: PowerCap | None = None) -> RunPlan:
    """The optimal plan for ``job`` on the forecast ``series`` (see the module docstring).

    ``series`` is an intensity series or values on a grid (:mod:`scheduler.planner.grid`), averaged
    into slots of ``constraints.slot_s`` from ``now``; past its end the last value is carried forward.
    Without a deadline the horizon is the series' end, stretched when needed so that the slowest mode
    can finish. ``explain=False`` skips the sentences and ``power_cap`` limits the power per slot (see
    :func:`plan_slots`). ``price``: prices per
    MWh published by ``now`` (a :class:`scheduler.planner.objective.PriceSignal`: later ones are held
    at its tail value, and the plan says so); needed by a priced objective, else only costed.
    """
    if objective.priced and price is None:
        raise ValueError("objective.carbon_price needs prices: no price source was read")
    if not modes:
        raise ValueError("plan_run needs at least one mode")
    now = as_utc(now)
    slot = float(constraints.slot_s)
    slowest = min(m.speed for m in modes)
    if job.deadline is not None:
        end = as_utc(job.deadline)
    else:
        end = max(signal_end(series, now), as_utc(job.not_before))
    lead = max((as_utc(job.not_before) - now).total_seconds(), 0.0)
    need = lead + (job.work_s + job.resume_overhead_s) / slowest + 2 * max(constraints.min_dwell_s, slot)
    n = max(int(math.ceil(max((end - now).total_seconds(), need if job.deadline is None else 0.0) / slot)) + 1, 1)
    intensity = slot_values(series, now, slot, n)
    prices = slot_values(price, now, slot, n) if price is not None else None
    plan = plan_slots(intensity, job, modes, now=now, objective=objective, constraints=constraints, explain=explain,
                      price=prices, power_cap=power_cap)
    if (explain and objective.priced and isinstance(price, PriceSignal) and plan.segments
            and plan.finish > price.published_end):
        cur = price.currency or objective.currency
        plan = replace(plan, reasons=(*plan.reasons, f"prices after {price.published_end:%Y-%m-%d %H:%M} UTC are not "
                                      f"published yet: the plan holds them at the last published day's mean, "
                                      f"{price.tail_per_mwh:.1f} {cur}/MWh, and re-plans when they are"))
    return plan
