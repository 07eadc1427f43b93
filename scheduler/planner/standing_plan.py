"""When a re-plan has nothing new to plan on, the plan in force stands. Pure.

The run loop re-plans every interval with the fresh forecast and the job's progress. A re-plan
made on the very forecast the plan in force was made on (the same slot means over its horizon),
with the job where that plan said it would be (its work left, its mode and since when) and nothing
else moved (the modes' figures, the objective, the power cap, the margin, the deadline), asks the
planner the question it has already answered: the planner is exact, so the rest of an optimal plan
is optimal from the state it reaches (up to the planner's work quantum). The decider then keeps the
plan instead of solving again (:class:`scheduler.planner.deciders.PlanDecider`); anything that
differs by more than rounding (a new forecast, a slower pace, a cap event) is re-planned as before.

It matters for forecasts that stand between their issues (an issued day-ahead forecast, a perfect
forecast in the simulator), where every re-plan of a 12 h job was a full solve of the same problem.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from scheduler.planner import RunPlan
from scheduler.planner.grid import Signal, slot_values
from scheduler.planner.solve import choose_quantum

__all__ = ["StandingPlan", "planned_state"]

#: the work the job may be off the plan by (relative to the plan's work left) and still be "where it said"
WORK_TOLERANCE = 1e-9
#: slot means closer than this (relative) are the same forecast
VALUE_TOLERANCE = 1e-12
#: a plan stands while its work quantum is at most this many times a fresh plan's: the quantum
#: shrinks with the work left (solve.choose_quantum), and a plan counted coarser than a re-plan would
#: count is solved again. Keeping every plan (no such bound) lost up to 0.027 points of saving on a
#: year; with 1.25 the timing shares of the 8 h and 12 h DE and GB years moved by -0.001 to +0.003
REFINE_RATIO = 1.25


def planned_state(plan: RunPlan, made_at: datetime, t: datetime, *, running: str | None,
                  since: datetime | None) -> tuple[float, str | None, datetime | None]:
    """What ``plan`` (made at ``made_at`` with the job in ``running`` since ``since``) says at ``t``:
    the work done since ``made_at`` (reference seconds), the mode running just before ``t`` (the loop
    re-plans before it switches) and since when it has run."""
    done = 0.0
    current: str | None = None
    begun: datetime | None = None
    prev_end: datetime | None = None
    prev_mode: str | None = None
    for s in plan.segments:
        if s.start >= t:
            break
        secs = (s.end - s.start).total_seconds()
        overlap = (min(s.end, t) - max(s.start, made_at)).total_seconds()
        if secs > 0 and overlap > 0:
            done += s.work_s * overlap / secs
        contiguous = prev_end is not None and prev_mode == s.mode and prev_end == s.start
        begun = begun if contiguous else s.start
        current = s.mode if s.end >= t else None
        prev_end, prev_mode = s.end, s.mode
    if current is not None and begun is not None and begun <= made_at and running == current:
        begun = since  # the run the plan began in (its dwell counts from the job's own switch)
    return done, current, begun if current is not None else None


@dataclass(frozen=True)
class StandingPlan:
    """The plan in force and what it was made on (see the module docstring); :meth:`made` builds it."""

    plan: RunPlan
    made_at: datetime
    slot_s: float
    values: np.ndarray            # the signal's slot means from ``made_at`` over the plan's horizon
    prices: np.ndarray | None     # the prices' slot means, the same slots (None: no prices)
    left_s: float                 # work left at ``made_at``
    running: str | None           # the mode running at ``made_at`` and since when
    since: datetime | None
    inputs: Hashable              # everything else the plan depends on, compared for equality
    quantum_s: float              # the planner's work quantum for it
    max_rounding: float

    @classmethod
    def made(cls, plan: RunPlan, t: datetime, *, deadline: datetime, series: Signal, price: Signal | None,
             speeds: Sequence[float], slot_s: float, max_rounding: float, left_s: float, running: str | None,
             since: datetime | None, inputs: Hashable) -> "StandingPlan":
        """``plan``, made at ``t`` on ``series`` (and ``price``) for ``left_s`` of work to ``deadline``."""
        n = max(int(math.ceil((deadline - t).total_seconds() / slot_s)) + 1, 1)
        return cls(plan=plan, made_at=t, slot_s=slot_s, values=slot_values(series, t, slot_s, n),
                   prices=slot_values(price, t, slot_s, n) if price is not None else None, left_s=left_s,
                   running=running, since=since, inputs=inputs,
                   quantum_s=_quantum(speeds, slot_s, left_s, max_rounding), max_rounding=max_rounding)

    def stands(self, t: datetime, series: Signal, price: Signal | None, *, left_s: float, running: str | None,
               since: datetime | None, inputs: Hashable, speeds: Sequence[float]) -> bool:
        """Whether a re-plan at ``t`` on ``series`` (and ``price``) would see nothing new: then the plan
        stands. ``left_s``, ``running``, ``since``: the job's work left, mode and since when;
        ``speeds``: the modes' speeds (a fresh plan's work quantum)."""
        if not self.plan.feasible or inputs != self.inputs or (price is None) != (self.prices is None):
            return False
        if self.quantum_s > REFINE_RATIO * _quantum(speeds, self.slot_s, left_s, self.max_rounding):
            return False
        k = (t - self.made_at).total_seconds() / self.slot_s
        shift = int(round(k))
        if shift < 0 or abs(k - shift) > 1e-9 or shift >= len(self.values):
            return False  # a re-plan off the plan's slot grid sees other slots
        done, mode, begun = planned_state(self.plan, self.made_at, t, running=self.running, since=self.since)
        if mode != running or (mode is not None and begun != since):
            return False
        if abs((self.left_s - done) - left_s) > WORK_TOLERANCE * max(self.left_s, 1.0):
            return False
        n = len(self.values) - shift
        if not _same(slot_values(series, t, self.slot_s, n), self.values[shift:]):
            return False
        return price is None or self.prices is None or _same(slot_values(price, t, self.slot_s, n), self.prices[shift:])


def _quantum(speeds: Sequence[float], slot_s: float, left_s: float, max_rounding: float) -> float:
    return choose_quantum(np.asarray(speeds, dtype=float), slot_s, max(left_s, 1.0), max_rounding=max_rounding)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= VALUE_TOLERANCE * np.maximum(np.abs(b), 1.0)))
