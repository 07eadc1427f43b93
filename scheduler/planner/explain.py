"""One plain sentence per choice of a plan: the start, each segment's mode, each pause."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Sequence

import numpy as np

from scheduler.planner.objective import ObjectiveUnits, units_of

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.planner import ModeFigures, Objective, PlanJob, Segment

__all__ = ["explain"]


def _hm(t: datetime) -> str:
    return f"{t:%H:%M} UTC"


def _mean(c: np.ndarray, a: float, b: float, slot_s: float) -> float:
    i, j = int(a // slot_s), max(int(np.ceil(b / slot_s)), int(a // slot_s) + 1)
    part = c[i:min(j, len(c))]
    return float(part.mean()) if len(part) else float(c[-1])


def explain(segments: "Sequence[Segment]", modes: "Sequence[ModeFigures]", c: np.ndarray, *, slot_s: float,
            now: datetime, job: "PlanJob", objective: "Objective", first_slot: int, feasible: bool,
            margin_dropped: bool, deadline_margin_s: float,
            units: ObjectiveUnits | None = None) -> tuple[list[str], list[str]]:
    """(the plan's reasons, one reason per segment); ``c``: the slots' weights, spoken of in ``units``
    (default: g/kWh)."""
    u = units or units_of(None)
    reasons: list[str] = []
    if not segments:
        return ["nothing left to do"], []
    rel = lambda t: (t - now).total_seconds()  # noqa: E731
    frugal = min(modes, key=lambda m: m.joules_per_work_s)
    fastest = max(modes, key=lambda m: m.speed)
    by_name = {m.name: m for m in modes}
    if not feasible:
        late = (segments[-1].end - job.deadline).total_seconds() / 60 if job.deadline else 0.0
        reasons.append(f"the deadline cannot be met: even {fastest.name} mode without a break finishes at "
                       f"{_hm(segments[-1].end)}, {late:.0f} min late, so that is the plan")
    elif margin_dropped:
        reasons.append(f"the {deadline_margin_s / 60:.0f} min safety margin before the deadline leaves no room, "
                       "so the plan uses the deadline itself")
    if job.running_mode is None:
        start = segments[0].start
        earliest = now + timedelta(seconds=first_slot * slot_s)
        dur = rel(segments[-1].end) - rel(start)
        here = _mean(c, rel(start), rel(start) + dur, slot_s)
        if start > earliest + timedelta(seconds=1):
            there = _mean(c, first_slot * slot_s, first_slot * slot_s + dur, slot_s)
            reasons.append(f"start at {_hm(start)} rather than {_hm(earliest)}: the forecast over the run averages "
                           f"{u.text(here)} against {u.text(there)} starting at once{u.basis}")
        else:
            reasons.append(f"start at {_hm(start)}, the earliest allowed: no later start is forecast to be {u.lower} "
                           f"overall ({u.text(here)} over the run{u.basis})")
    seg_reasons: list[str] = []
    night = _mean(c, rel(segments[0].start), rel(segments[-1].end), slot_s)
    for k, s in enumerate(segments):
        m = by_name[s.mode]
        g = _mean(c, rel(s.start), rel(s.end), slot_s)
        span = f"{s.mode} {_hm(s.start)}-{_hm(s.end)}"
        if m.name == frugal.name:
            if len(segments) == 1 and m.name != fastest.name:
                saving = 1 - m.joules_per_work_s / fastest.joules_per_work_s
                why = (f"{s.mode} throughout: {saving:.0%} less energy per unit of work than {fastest.name} outweighs "
                       f"anything a faster finish could catch on this forecast ({u.text(g)}{u.basis})")
            else:
                saving = 1 - m.joules_per_work_s / fastest.joules_per_work_s
                why = f"{span} at ~{u.text(g)}{u.basis}: {saving:.0%} less energy per unit of work than {fastest.name}"
        else:
            extra = m.joules_per_work_s / frugal.joules_per_work_s - 1
            if objective.time_value_g_per_h > 0:
                worth = f"{objective.time_value_g_per_h:g} g" if objective.carbon_price is None else (
                    f"{objective.time_value_per_h:.3g} {objective.currency} ({objective.time_value_g_per_h:g} g at "
                    f"{objective.carbon_price:g} {objective.currency}/t)")
                why = (f"{span}: finishing sooner is worth {worth} per hour, more than its "
                       f"{extra:.0%} extra energy per unit of work over {frugal.name}")
            elif g < night * (1 - extra / 2):
                why = (f"{span}: {u.what} at ~{u.text(g)} is {u.good} enough against ~{u.text(night)} for the rest "
                       f"of the run that doing work faster now beats {frugal.name}'s {extra:.0%} energy saving")
            else:
                why = (f"{span}: the deadline leaves no room to do all the work in the slower {frugal.name} mode "
                       f"(it costs {extra:.0%} more energy per unit of work but works {m.speed / frugal.speed:.2f}x as fast)")
        seg_reasons.append(why)
        reasons.append(why)
        if k + 1 < len(segments) and segments[k + 1].start > s.end + timedelta(seconds=1):
            gap = _mean(c, rel(s.end), rel(segments[k + 1].start), slot_s)
            reasons.append(f"pause {_hm(s.end)}-{_hm(segments[k + 1].start)}: ~{u.text(gap)} there is {u.higher} than "
                           f"the run's ~{u.text(night)} by more than the {job.resume_overhead_s / 60:.0f} min resume "
                           "overhead costs")
    return reasons, seg_reasons


