"""The run loop: decide, re-plan, pace, pause. One loop for the product and the simulator. Pure.

:func:`run_loop` follows one job from its start to its end (or to a planned pause handed to a later
run), asking a :class:`scheduler.planner.deciders.Decider` "which mode now, and until when?" as a
:class:`scheduler.planner.RunPlan`. Everything with a side effect is the :class:`RunDriver`'s: the
clock, the intensity and its forecast, the job, the meter, the log. ``flows.supervise`` drives it
with the real job, the backend and the carbon monitor; ``simulation`` with a job on a trace and a
virtual clock. The same inputs give the same decisions.

1. read the signal (every interval, and at every new window; a failed read keeps the last one);
2. decide: the planner re-plans the work left at the speeds seen; threshold rules re-decide on the
   intensity now (an open-ended plan of one segment);
3. start the job in the plan's mode, or switch it;
4. let it run until the next re-decision (every ``interval_s``) or the plan's next mode change,
   whichever comes first, and count its progress (its report, else time x the mode's speed); a
   change of the run's power cap (a grid event heard by the driver, or the start or end of a cap
   window) re-decides at once, the dwell waived: the cap outranks it;
5. at a planned pause, stop a pausable job and start it again at the next window: here, after
   sleeping, or, past ``defer_pauses_over_s``, by returning with :attr:`LoopResult.next_window` set.

The forecast the decider sees is the one :class:`scheduler.loop.gate.ForecastChoice` names (the
do-no-harm gate): the source's own, one of the inputs it combined, or none at all, in which case the
decider plans on a flat signal and so gives the static plan (the frugal modes, re-planned only for
the pace and the deadline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Mapping, Protocol

from scheduler.loop.gate import TRUST_SOURCE, ForecastChoice
from scheduler.planner import RunPlan
from scheduler.planner.deciders import Decider
from scheduler.planner.grid import Signal, flat_signal
from scheduler.planner.power_cap import PowerCap

__all__ = ["DEFER_PAUSES_OVER_S", "LoopResult", "MIN_WAIT_S", "RunDriver", "STOPPED_EXIT_CODES", "SignalReading", "next_start", "pick_signal",
           "run_loop", "segment_end", "segment_reason"]

#: exit codes of a job that stopped as asked at a planned pause (0, 128 + SIGTERM, or killed by it)
STOPPED_EXIT_CODES = (0, 143, -15)
#: never wait less than this between two looks at the job (a plan boundary a moment away)
MIN_WAIT_S = 1.0
#: under a deployment, a planned pause longer than this ends the run and the next window is a
#: Scheduled flow run of its own (shorter ones are waited through in the run)
DEFER_PAUSES_OVER_S = 120.0


@dataclass(frozen=True)
class SignalReading:
    """One read of the signal: the forecast the source handed on, and the others the gate may pick.

    ``label`` names ``signal`` (e.g. ``forecast:fused``); ``alternatives`` are other forecasts by
    label (the inputs a combined forecast was made of); ``value_now`` is the value in force now.
    ``price``: the prices published by the read (a :class:`scheduler.planner.objective.PriceSignal`;
    None: no price source). Prices are not a forecast: the gate's choice never replaces them.
    """

    signal: Signal
    value_now: float
    label: str = ""
    alternatives: Mapping[str, Signal] = field(default_factory=dict)
    price: Signal | None = None


def pick_signal(reading: SignalReading, choice: ForecastChoice, t: datetime) -> Signal:
    """The forecast ``choice`` names in ``reading``; a flat one (the static plan) when it names none or one not read."""
    if choice.label == TRUST_SOURCE or choice.label == reading.label:
        return reading.signal
    if choice.label is not None and choice.label in reading.alternatives:
        return reading.alternatives[choice.label]
    return flat_signal(reading.value_now, t)


class RunDriver(Protocol):
    """What the loop acts through: the clock, the signal, the job and its meter, the log."""

    def now(self) -> datetime:
        """The time now."""

    def sleep(self, seconds: float) -> None:
        """Wait while the job is not running (a planned pause kept in this run)."""

    def read(self, t: datetime) -> SignalReading | None:
        """A fresh read of the signal at ``t``; None when it failed (the loop keeps the last one)."""

    def start(self, mode: str, reason: str, *, resuming: bool) -> None:
        """Start the job in ``mode`` (``resuming``: again after a pause, from its checkpoint)."""

    def switch(self, mode: str, reason: str) -> None:
        """Move the running job to ``mode``."""

    def wait(self, timeout_s: float) -> int | None:
        """Let the job run up to ``timeout_s``; its exit code if it ended, else None. Returns early
        (None) when the run's power cap may have changed (a grid event heard)."""

    def power_cap(self, t: datetime) -> PowerCap:
        """The run's power headroom as known at ``t`` (a site's or machine's cap, grid events); empty: none."""

    def progress(self) -> float | None:
        """The job's own report of its fraction done (0-1), or None."""

    def stop(self) -> int | None:
        """Stop the job at a planned pause (it checkpoints); its exit code."""

    def window_ended(self, *, ended_by: str, exit_code: int | None, work_s: float, measured: bool) -> None:
        """The job's window is over (it exited, paused, or the loop failed): close spans, account the window."""

    def decided(self, plan: RunPlan, t: datetime, *, first: bool) -> None:
        """A decision was made at ``t`` (report it; ``first``: the run's first)."""

    def log(self, line: str) -> None:
        """One line for the run's log."""

    def warn(self, note: str) -> None:
        """A warning for the run's report (the decider's notes)."""


@dataclass
class LoopResult:
    """How the loop ended: the job exited (``exit_code``), or it paused until ``next_window`` (a later run's)."""

    ended: Literal["exit", "deferred"]
    exit_code: int | None
    work_done_s: float
    decisions: int
    windows: int
    next_window: datetime | None = None


def next_start(plan: RunPlan, t: datetime) -> datetime | None:
    """The start of the plan's next run window after ``t`` (None: nothing planned after ``t``)."""
    return next((s.start for s in plan.segments if s.start > t), None)


def segment_end(plan: RunPlan, t: datetime) -> datetime | None:
    """When the plan's segment at ``t`` ends (a switch, a pause or the planned finish)."""
    return next((s.end for s in plan.segments if s.start <= t < s.end), None)


def segment_reason(plan: RunPlan, t: datetime) -> str:
    seg = next((s for s in plan.segments if s.start <= t < s.end), None)
    return seg.reason if seg is not None and seg.reason else plan.reason


class _Loop:
    """The state of one :func:`run_loop` call (the decider holds the work; the driver the job)."""

    def __init__(self, decider: Decider, driver: RunDriver, choice: ForecastChoice, interval_s: float,
                 windows: int) -> None:
        self.decider, self.driver, self.choice, self.interval_s = decider, driver, choice, interval_s
        self.windows, self.decisions = windows, 0
        self.reading: SignalReading | None = None
        self.cap = PowerCap()  # the cap the last decision planned under

    def read(self, t: datetime) -> None:
        fresh = self.driver.read(t)
        if fresh is not None:
            self.reading = fresh
        elif self.reading is None:
            raise RuntimeError("no signal to decide on: the first read failed")

    def decide(self, t: datetime, running: str | None = None, since: datetime | None = None) -> RunPlan:
        assert self.reading is not None
        self.decisions += 1
        signal = pick_signal(self.reading, self.choice, t)
        self.cap = self.driver.power_cap(t)
        plan = self.decider.decide(t, signal, running=running, since=since, started_before=self.windows > 0,
                                   price=self.reading.price, cap=self.cap)
        for note in self.decider.notes:
            self.driver.warn(note)
        self.decider.notes.clear()
        self.driver.decided(plan, t, first=self.decisions == 1)
        return plan

    def cap_moved(self, t: datetime, planned_at: datetime) -> bool:
        """Whether the power cap differs from the one planned under at ``planned_at`` (an event heard),
        or one of its windows started or ended since."""
        edge = self.cap.next_change(planned_at)
        if self.driver.power_cap(t) != self.cap or (edge is not None and edge <= t):
            self.driver.log(f"power cap now {self.driver.power_cap(t).describe(t) or 'none'}: re-planning at once")
            return True
        return False

    def until_cap_change(self, t: datetime) -> float | None:
        """Seconds until the cap's next window starts or ends (None: none ahead)."""
        edge = self.cap.next_change(t)
        return (edge - t).total_seconds() if edge is not None else None


def run_loop(decider: Decider, driver: RunDriver, *, interval_s: float, pausable: bool,
             defer_pauses_over_s: float | None = None, choice: ForecastChoice = ForecastChoice(),
             windows_before: int = 0, clean_mode: str = "") -> LoopResult:
    """Run the job to its end, or (see ``defer_pauses_over_s``) to a planned pause a later run resumes.

    ``windows_before``: windows this job already ran in earlier runs (a resumed pausable job; the
    decider carries their work). ``choice``: the forecast the decider plans on (the gate's verdict).
    ``clean_mode``: the mode to run in when a plan has nothing left to plan.
    """
    loop = _Loop(decider, driver, choice, interval_s, windows_before)
    while True:
        t = driver.now()
        loop.read(t)
        plan = loop.decide(t)
        mode = plan.mode_at(t)
        if mode is None:  # a pause: wait for the next window here, or hand it to a scheduled run
            nxt = next_start(plan, t)
            if nxt is not None:
                wait_s = (nxt - t).total_seconds()
                if defer_pauses_over_s is not None and wait_s > defer_pauses_over_s:
                    driver.log(f"next window at {nxt:%Y-%m-%d %H:%M} UTC: handing it to a scheduled run")
                    return LoopResult("deferred", None, decider.done_s, loop.decisions, loop.windows, next_window=nxt)
                driver.log(f"waiting {wait_s:.0f} s for the planned window at {nxt:%H:%M} UTC")
                edge = loop.until_cap_change(t)
                driver.sleep(max(min(wait_s, interval_s, edge if edge is not None else wait_s), MIN_WAIT_S))
                continue
            mode = plan.segments[0].mode if plan.segments else clean_mode  # nothing later: run now
        if loop.windows:
            decider.resumed()
        ended, rc = _run_window(loop, plan, mode, pausable=pausable)
        loop.windows += 1
        if ended == "exit":
            return LoopResult("exit", rc, decider.done_s, loop.decisions, loop.windows)


def _run_window(loop: _Loop, plan: RunPlan, mode: str, *, pausable: bool) -> tuple[str, int | None]:
    """Start (or resume) the job and follow ``plan`` until the job ends ("exit") or a planned pause ("pause")."""
    driver, decider, interval_s = loop.driver, loop.decider, loop.interval_s
    work_before = decider.done_s
    measured = False
    ended, rc = "exit", None
    try:
        driver.start(mode, segment_reason(plan, driver.now()), resuming=loop.windows > 0)
        last_t = last_plan_t = since = driver.now()
        while True:
            t = driver.now()
            until = [interval_s - (t - last_plan_t).total_seconds()]
            boundary = segment_end(plan, t)
            if boundary is not None:
                until.append((boundary - t).total_seconds())
            if (edge := loop.until_cap_change(t)) is not None:
                until.append(edge)
            rc = driver.wait(max(min(until), MIN_WAIT_S))
            t = driver.now()
            fraction = driver.progress()
            measured = measured or fraction is not None
            decider.advance(mode, (t - last_t).total_seconds(), fraction)
            last_t = t
            if rc is not None:
                break
            capped = loop.cap_moved(t, last_plan_t)
            if capped or (t - last_plan_t).total_seconds() >= interval_s - 1e-6:
                loop.read(t)
                plan = loop.decide(t, mode, None if capped else since)
                last_plan_t = t
            want = plan.mode_at(t)
            nxt = next_start(plan, t) if want is None and pausable else None
            if nxt is not None:
                driver.log(f"pausing until {nxt:%H:%M} UTC: {segment_reason(plan, nxt)}")
                rc = driver.stop()
                ended = "pause" if rc in STOPPED_EXIT_CODES else "exit"
                if ended == "exit":
                    driver.log(f"the job exited with {rc} when asked to checkpoint and stop")
                break
            if want is None:
                want = mode  # the plan expected the job done by now: it runs on as it is
            if want != mode:
                reason = segment_reason(plan, t)
                driver.log(f"switching {mode} -> {want}: {reason}")
                driver.switch(want, reason)
                mode, since = want, driver.now()
    finally:
        driver.window_ended(ended_by=ended, exit_code=rc, work_s=max(decider.done_s - work_before, 0.0),
                            measured=measured)
    return ended, rc
