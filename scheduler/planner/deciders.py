"""The deciders: what the run loop asks "which mode now, and until when?", as one plan type.

The run loop (:func:`flows.supervise.run_loop`) and the simulator ask a :class:`Decider` the same
two things, with their own clocks: ``advance(mode, wall_s, fraction)`` (the job ran ``wall_s`` in
``mode``; ``fraction`` is its own progress report, if any) and ``decide(t, series, ...)`` (the plan
from ``t`` on). Both deciders answer with a :class:`scheduler.planner.RunPlan`, so the loop re-decides,
dwells, switches, pauses and reports through one path:

- :class:`PlanDecider` (``rules.kind: plan``): the planner's receding-horizon plan of the work left
  (:func:`plan_work`), counted by a :class:`WorkTracker` at the speeds seen;
- :class:`ThresholdDecider` (``rules.kind: absolute|relative``): :func:`scheduler.planner.thresholds.decide_by_rule`
  every interval, as an open-ended plan of one segment in the chosen mode (a threshold rule predicts
  no finish, energy or carbon: those figures are zero and never reported), with the deadline guard
  at the slowdowns seen.

Pure: time, forecasts and progress are arguments; no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Mapping, Protocol, Sequence

from carbon.series import IntensitySeries
from scheduler.planner.thresholds import Decision, ModeState, decide_by_rule
from scheduler.planner import ModeFigures, Objective, PlanConstraints, PlanJob, RunPlan, Segment, plan_run
from scheduler.planner.grid import Signal, as_series
from scheduler.planner.power_cap import PowerCap
from scheduler.planner.standing_plan import StandingPlan
from scheduler.policy.types import AbsoluteRule, Mode, PlanRule, RelativeRule
from scheduler.run_spec import RunSpec

__all__ = ["Decider", "PlanDecider", "ThresholdDecider", "WorkTracker", "first_decision", "make_decider", "plan_inputs",
           "plan_work", "without_prices"]

#: what a priced objective does when no price could be read (a source down since the run began)
NO_PRICES = "no prices could be read: planning on carbon alone (objective.carbon_price set aside) until they can"


def without_prices(objective: Objective, price: Signal | None) -> tuple[Objective, str | None]:
    """The objective a plan can use: a priced one needs prices; without any it plans on carbon alone and says so."""
    if objective.priced and price is None:
        return replace(objective, carbon_price=None), NO_PRICES
    return objective, None

#: a threshold decision holds until the loop re-decides: its one segment has no planned end
_OPEN_END = timedelta(days=36500)


def plan_inputs(figures: Sequence[ModeFigures], *, rules: PlanRule, constraints: PlanConstraints, pausable: bool,
                resume_overhead_s: float, now: datetime, work_s: float, not_before: datetime, deadline: datetime | None,
                running_mode: str | None = None, running_since: datetime | None = None, resuming: bool = False,
                start_now: bool = False, reference_start: datetime | None = None,
                pace_measured: bool = True) -> tuple[PlanJob, PlanConstraints]:
    """The planner's job and constraints for ``work_s`` reference seconds, seen at ``now`` (see
    :func:`plan_work`); the simulator hands them to :func:`scheduler.planner.plan_slots` on its own grid."""
    if not pace_measured:  # no progress seen: the margin stays time before the deadline, not a pace reserve
        constraints = replace(constraints, pace_tolerance=0.0)
    if start_now and running_mode is None:
        running_mode = rules.clean_mode
        running_since = now - timedelta(seconds=rules.min_dwell_s)
    if deadline is None:
        slowest = min(f.speed for f in figures)
        deadline = max(now, not_before) + timedelta(seconds=work_s / slowest + constraints.slot_s)
        pausable = False
        constraints = replace(constraints, deadline_margin_s=0.0)  # no deadline the user set: nothing to keep a margin before
    # past the deadline the plan can only be the fastest finish; the planner wants a deadline ahead
    deadline = max(deadline, now)
    job = PlanJob(work_s=max(work_s, 1.0), not_before=not_before, deadline=deadline, pausable=pausable,
                  resume_overhead_s=resume_overhead_s, running_mode=running_mode, running_since=running_since,
                  resuming=resuming, reference_start=reference_start)
    # a margin reaching back past now leaves no room, which the planner answers by dropping it: do
    # so here already, so it never sees a horizon that ends before now
    left_s = (deadline - now).total_seconds()
    return job, replace(constraints, deadline_margin_s=min(constraints.deadline_margin_s, left_s))


def plan_work(series: Signal, figures: Sequence[ModeFigures], *, rules: PlanRule, constraints: PlanConstraints,
              objective: Objective, pausable: bool, resume_overhead_s: float, now: datetime, work_s: float,
              not_before: datetime, deadline: datetime | None, running_mode: str | None = None,
              running_since: datetime | None = None, resuming: bool = False, start_now: bool = False,
              reference_start: datetime | None = None, pace_measured: bool = True, explain: bool = True,
              price: Signal | None = None, power_cap: PowerCap | None = None) -> RunPlan:
    """The planner's plan for ``work_s`` reference seconds, seen at ``now``.

    A job without a deadline starts at once: it is planned against the finish of its slowest mode
    from ``not_before``, so the planner chooses its modes but has no room to shift it. ``start_now``:
    the start is not the planner's to choose (a flow run whose start has come); it plans the modes
    from ``now`` on, as if the job were already running with its dwell served. ``reference_start``:
    the start a user would pick (the cron time); the plan leaves it only for more than ``min_gain``.
    ``pace_measured=False``: no progress report seen yet, so no pace reserve (see :func:`plan_inputs`).
    ``series`` is a forecast series or values on a grid (:mod:`scheduler.planner.grid`); ``explain=False``
    skips the plan's sentences. ``price``: the prices published by ``now`` (the plan is costed on them,
    and a priced objective plans on them). ``power_cap``: the run's power headroom over time
    (:mod:`scheduler.planner.power_cap`).
    """
    job, constraints = plan_inputs(figures, rules=rules, constraints=constraints, pausable=pausable,
                                   resume_overhead_s=resume_overhead_s, now=now, work_s=work_s, not_before=not_before,
                                   deadline=deadline, running_mode=running_mode, running_since=running_since,
                                   resuming=resuming, start_now=start_now, reference_start=reference_start,
                                   pace_measured=pace_measured)
    return plan_run(series, job, figures, now=now, objective=objective, constraints=constraints, explain=explain,
                    price=price, power_cap=power_cap)


@dataclass
class WorkTracker:
    """Work done (reference seconds) and the pace seen per mode, for re-planning.

    ``total_s`` is the whole job in reference seconds (``job.expected_duration_s``); ``done_s`` starts
    at the work of earlier windows when a paused job resumes. A mode's pace is trusted once it has
    been watched for ``min_watch_s`` of wall time.
    """

    total_s: float
    figures: Mapping[str, ModeFigures]
    done_s: float = 0.0
    min_watch_s: float = 600.0
    _seen: dict[str, list[float]] = field(default_factory=dict)  # mode -> [wall s, work s gained]
    _reported_s: float | None = None  # the work the job's last report showed
    watched_s: float = 0.0  # wall time the job has run under this tracker

    @property
    def reported(self) -> bool:
        """True once the job has reported its progress (its pace is then measured, not assumed)."""
        return self._reported_s is not None

    @property
    def left_s(self) -> float:
        return max(self.total_s - self.done_s, 0.0)

    def advance(self, mode: str, wall_s: float, fraction: float | None = None) -> None:
        """``wall_s`` seconds ran in ``mode``; ``fraction`` is the job's own report of its progress, if any."""
        if wall_s <= 0:
            return
        self.watched_s += wall_s
        if fraction is None:
            self.done_s = min(self.done_s + wall_s * self.speed(mode), self.total_s)
            return
        reported = min(max(fraction * self.total_s, 0.0), self.total_s)
        # only reports measure the pace (the model would just confirm itself), and only against the
        # previous report, so a resume's overhead put back by the first report is not taken for speed
        previous = self._reported_s if self._reported_s is not None else self.done_s
        seen = self._seen.setdefault(mode, [0.0, 0.0])
        seen[0] += wall_s
        seen[1] += max(reported - previous, 0.0)
        self.done_s = self._reported_s = reported

    def resumed(self, overhead_s: float) -> None:
        """A resume costs ``overhead_s`` reference seconds of work (reloading, redone steps)."""
        self.done_s = max(self.done_s - overhead_s, 0.0)

    def observed_speed(self, mode: str) -> float | None:
        wall_s, work_s = self._seen.get(mode, (0.0, 0.0))
        return work_s / wall_s if wall_s >= self.min_watch_s and work_s > 0 else None

    def speed(self, mode: str) -> float:
        """The speed to plan ``mode`` with: as seen, else its figure scaled like the modes seen (the
        slowest such ratio, so an unwatched mode is never assumed faster than the evidence allows)."""
        seen = self.observed_speed(mode)
        if seen is not None:
            return seen
        ratios = [s / self.figures[m].speed for m in self._seen if m in self.figures
                  if (s := self.observed_speed(m)) is not None]
        return self.figures[mode].speed * min(ratios, default=1.0)

    def planning_figures(self, order: Sequence[str]) -> list[ModeFigures]:
        """The figures in ``order`` with the speeds seen so far (source notes the correction)."""
        out: list[ModeFigures] = []
        for name in order:
            f = self.figures[name]
            s = self.speed(name)
            if abs(s - f.speed) > 1e-9 * f.speed:
                f = replace(f, speed=s, source=f"{f.source}; speed {s:.3f} as seen in this run (modelled {f.speed:.3f})")
            out.append(f)
        return out


class Decider(Protocol):
    """The run loop's one question, asked of the planner and of threshold rules alike."""

    planned: bool  # True: a planner's plan (segments, pauses, predicted figures, work windows in the report)
    notes: list[str]  # warnings for the run's report, each once; the loop logs and drains them

    @property
    def done_s(self) -> float:
        """Work done so far, reference seconds."""

    def advance(self, mode: str, wall_s: float, fraction: float | None) -> None:
        """The job ran ``wall_s`` seconds in ``mode``; ``fraction``: its own progress report (0-1) or None."""

    def resumed(self) -> None:
        """The job starts again after a pause (a resume costs its overhead)."""

    def decide(self, t: datetime, series: Signal, *, running: str | None, since: datetime | None,
               started_before: bool, price: Signal | None = None, cap: PowerCap = PowerCap()) -> RunPlan:
        """The plan from ``t`` on; ``running``/``since``: the mode in force and since when (None:
        not running, or a dwell the cap waived); ``started_before``: an earlier window of this job
        ran; ``price``: the prices published by ``t`` (None: no price source); ``cap``: the run's power
        headroom (:mod:`scheduler.planner.power_cap`)."""


class PlanDecider:
    """The planner, re-planning the work left at the speeds seen (see :func:`plan_work`)."""

    planned = True

    def __init__(self, spec: RunSpec, figures: Sequence[ModeFigures], *, deadline: datetime | None, pausable: bool,
                 done_s: float = 0.0, explain: bool = True, cap_figures: Sequence[ModeFigures] = ()) -> None:
        self.rules, self.constraints, self.objective = spec.rules, spec.constraints, spec.objective
        self.explain = explain  # False: plans without their sentences (the simulator reads only the modes)
        self.resume_overhead_s = spec.job.resume_overhead_s
        self.reports_progress, self.interval_s = spec.job.reports_progress, spec.interval_s
        self.notes: list[str] = []
        self._pace_warned = self._prices_warned = False
        self.deadline, self.pausable = deadline, pausable
        self.order = [f.name for f in figures]
        # power limits between the modes, planned with only under a cap (RunSpec.cap_figures)
        self.cap_order = [f.name for f in cap_figures if f.name not in self.order]
        self.tracker = WorkTracker(total_s=spec.job.expected_duration_s,
                                   figures={f.name: f for f in (*cap_figures, *figures)}, done_s=done_s,
                                   min_watch_s=spec.interval_s)
        self._standing: StandingPlan | None = None  # the plan in force, kept while nothing new is seen

    @property
    def done_s(self) -> float:
        return self.tracker.done_s

    def advance(self, mode: str, wall_s: float, fraction: float | None) -> None:
        self.tracker.advance(mode, wall_s, fraction)

    def resumed(self) -> None:
        self.tracker.resumed(self.resume_overhead_s)

    def decide(self, t: datetime, series: Signal, *, running: str | None, since: datetime | None,
               started_before: bool, price: Signal | None = None, cap: PowerCap = PowerCap()) -> RunPlan:
        # the flow run's start has come (deploy/serve chose it, or the user ran it now): a job that
        # cannot pause starts at once, and the plan chooses its modes
        assert isinstance(self.rules, PlanRule)
        # a pace reserve in place of the margin holds only for a run that measures its pace: a job
        # that said it reports progress and has not within an interval keeps the margin as time
        measured = self.tracker.reported or self.tracker.watched_s < self.interval_s
        if self.reports_progress and not measured and not self._pace_warned:
            self._pace_warned = True
            self.notes.append(f"{t:%H:%M}: job.reports_progress is set but the job has reported no progress in "
                              f"{self.tracker.watched_s:.0f} s; the deadline margin is kept as time from now on")
        objective, note = without_prices(self.objective, price)
        if note and not self._prices_warned:
            self._prices_warned = True
            self.notes.append(f"{t:%H:%M}: {note}")
        live = cap.ends_by(t)
        # the cap's modes only while a cap is ahead, or to leave the one running (the planner then drops it)
        extra = [m for m in self.cap_order if live or m == running]
        figures = self.tracker.planning_figures([*self.order, *extra])
        left_s = self.tracker.left_s
        inputs = (tuple(figures), objective, measured, started_before, live,
                  min(self.constraints.deadline_margin_s, (self.deadline - t).total_seconds()) if self.deadline else None)
        speeds = [f.speed for f in figures]
        kept = self._standing
        if kept is not None and kept.stands(t, series, price, left_s=left_s, running=running, since=since,
                                            inputs=inputs, speeds=speeds):
            return kept.plan
        start_now = not started_before and not self.pausable
        plan = plan_work(series, figures, rules=self.rules, constraints=self.constraints, objective=objective,
                         pausable=self.pausable, resume_overhead_s=self.resume_overhead_s, now=t, work_s=left_s,
                         not_before=t, deadline=self.deadline, running_mode=running, running_since=since,
                         start_now=start_now, resuming=started_before and running is None, pace_measured=measured,
                         explain=self.explain, price=price, power_cap=live)
        # a plan stands only on a fixed deadline (without one the horizon moves with every re-plan) and
        # not when made to start now (it assumed a dwell already served, which the next re-plan may not)
        self._standing = None
        if self.deadline is not None and not (start_now and running is None):
            self._standing = StandingPlan.made(
                plan, t, deadline=self.deadline, series=series, price=price, speeds=speeds,
                slot_s=float(self.constraints.slot_s), max_rounding=self.constraints.max_rounding, left_s=left_s,
                running=running, since=since, inputs=inputs)
        return plan


class ThresholdDecider:
    """Threshold rules every interval (:func:`scheduler.planner.thresholds.decide_by_rule`), as open-ended plans.

    Progress is tracked in clean-mode seconds: time spent in a mode counts ``1 / slowdown[mode]``
    (default: the mode figures' speed, else ``1 + max_slowdown``), so the deadline guard sees the work
    really left, and it keeps one control interval in hand because the next re-decision is that far
    away. When the job reports its progress, the work left comes from it instead, and each mode's
    slowdown is re-estimated from the progress it actually made, so a job that runs slower than
    modelled in the dirty mode is moved to the clean mode before it can miss the deadline.
    """

    planned = False

    def __init__(self, rule: AbsoluteRule | RelativeRule, modes: Mapping[str, Mode], *, expected_s: float,
                 interval_s: float, deadline: datetime | None, slowdown: Mapping[str, float] | None = None,
                 first: Decision | None = None, guard: datetime | None = None,
                 power: Mapping[str, float] | None = None) -> None:
        self.rule, self.modes, self.expected_s, self.interval_s = rule, modes, expected_s, interval_s
        self.notes: list[str] = []  # threshold rules have no warnings of their own (the loop's guard says)
        self.deadline, self.given, self.first = deadline, dict(slowdown or {}), first
        self.power = dict(power or {})  # each mode's power (W), for a power cap
        # the deadline guard keeps one control interval in hand (the simulator names its own)
        self.guard = guard if guard is not None else (deadline - timedelta(seconds=interval_s) if deadline else None)
        self.factors = {m: self.given.get(m, 1.0 + (modes[m].max_slowdown or 0.0)) for m in modes}
        self.factors[rule.clean_mode] = 1.0
        self.state = ModeState()
        self.work_s = 0.0
        self.remaining_s = expected_s
        self.last_fraction = 0.0
        self.observed: dict[str, list[float]] = {}  # mode -> [wall seconds, work seconds gained]

    @property
    def done_s(self) -> float:
        return self.work_s

    def resumed(self) -> None:  # threshold rules never pause the job
        pass

    def advance(self, mode: str, wall_s: float, fraction: float | None) -> None:
        clean = self.rule.clean_mode
        self.work_s += wall_s / self.factors.get(mode, 1.0)
        self.remaining_s = max(self.expected_s - self.work_s, 0.0)
        if fraction is None:
            return
        seen = self.observed.setdefault(mode, [0.0, 0.0])
        seen[0] += wall_s
        seen[1] += max((fraction - self.last_fraction) * self.expected_s, 0.0)
        self.last_fraction = fraction
        clean_rate = self.observed.get(clean, [0.0, 0.0])
        # the clean mode's observed wall seconds per expected second (1.0 until it has been seen)
        base = clean_rate[0] / clean_rate[1] if clean_rate[1] > 0 and clean_rate[0] >= self.interval_s else 1.0
        # the work left in clean-mode seconds at the pace actually seen, the same unit as the factors
        # (which are relative to that pace), so a job slower than expected everywhere is not taken
        # for one with time to spare
        self.remaining_s = max(self.expected_s * (1.0 - fraction), 0.0) * base
        for m, (wall, work) in self.observed.items():
            if m != clean and wall >= self.interval_s and work > 0:
                self.factors[m] = max(wall / work / base, 1.0)

    def decide(self, t: datetime, series: Signal, *, running: str | None, since: datetime | None,
               started_before: bool, price: Signal | None = None, cap: PowerCap = PowerCap()) -> RunPlan:
        series = as_series(series)  # threshold rules decide on carbon alone (a priced objective needs the planner)
        if running is None and self.first is not None:  # the flow's opening decision (first_decision)
            decision = self.first
        else:
            # the dwell counts from the decision that switched (the loop switches at once)
            decision = decide_by_rule(self.rule, self.modes, series, self.state, now=t,
                                      remaining_work_s=self.remaining_s, deadline=self.guard, slowdown=self.factors)
        decision = self._under_cap(decision, cap, t)
        self.state = ModeState(decision.mode, t) if self.state.mode is None else self.state.switch(decision.mode, t)
        end = t + _OPEN_END
        seg = Segment(start=t, end=end, mode=decision.mode, work_s=self.remaining_s, energy_j=0.0, carbon_g=0.0,
                      reason=decision.reason)
        return RunPlan(start=t, segments=(seg,), energy_j=0.0, carbon_g=0.0, finish=end, feasible=True,
                       reasons=(decision.reason,))


    def _under_cap(self, decision: Decision, cap: PowerCap, t: datetime) -> Decision:
        """The rule's mode, or under a cap that refuses it the fastest mode that fits (the least-power one if none)."""
        room = cap.at(t)
        if self.power.get(decision.mode, 0.0) <= room + 1e-6:
            return decision
        fits = [m for m in self.modes if self.power.get(m, float("inf")) <= room + 1e-6]
        mode = (min(fits, key=lambda m: self.factors.get(m, 1.0)) if fits
                else min(self.modes, key=lambda m: self.power.get(m, float("inf"))))
        window = cap.binding(t)
        why = f"the power cap of {room:.0f} W ({window.why if window else 'in force'}) leaves room for {mode}"
        return replace(decision, mode=mode, reason=f"{why}, not {decision.mode} ({decision.reason})")


def first_decision(rule: AbsoluteRule | RelativeRule, modes: Mapping[str, Mode], series: IntensitySeries, *,
                   expected_s: float, now: datetime, deadline: datetime | None) -> Decision:
    """Threshold rules' opening decision, made when the job starts (before the device is opened):
    the whole job's work against the deadline itself, at the modes' declared slowdowns."""
    return decide_by_rule(rule, modes, series, now=now, start_at=now, remaining_work_s=expected_s, deadline=deadline)


def make_decider(spec: RunSpec, figures: Sequence[ModeFigures], *, deadline: datetime | None, pausable: bool,
                 done_s: float = 0.0, first: Decision | None = None,
                 slowdown: Mapping[str, float] | None = None, explain: bool = True,
                 cap_figures: Sequence[ModeFigures] = ()) -> Decider:
    """The spec's decider: the planner, or its threshold rules (``slowdown`` overrides the figures'
    time factors; ``first``: the opening decision, see :func:`first_decision`; without it the
    opening decision is made like every later one, on the guard). ``cap_figures``: power limits
    between the modes that the planner may use under a power cap (:meth:`scheduler.run_spec.RunSpec.cap_figures`)."""
    if spec.planned:
        if not figures:
            raise ValueError("the planner needs the modes' figures (RunSpec.mode_figures)")
        return PlanDecider(spec, figures, deadline=deadline, pausable=pausable, done_s=done_s, explain=explain,
                           cap_figures=cap_figures)
    rule = spec.rules
    assert isinstance(rule, (AbsoluteRule, RelativeRule))
    factors = dict(slowdown) if slowdown else {}
    for f in figures:
        factors.setdefault(f.name, 1.0 / f.speed)
    return ThresholdDecider(rule, spec.modes, expected_s=spec.job.expected_duration_s, interval_s=spec.interval_s,
                            deadline=deadline, slowdown=factors, first=first, power={f.name: f.power_w for f in figures})
