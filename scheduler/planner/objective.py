"""The planner's objective over carbon and cost, as one weight per slot, computed outside the solver.

The solver (:mod:`scheduler.planner.solve`) prices a slot as ``weight[t] x energy``; what the weight
is, is decided here, in one pure function (:func:`objective_weights`):

- **carbon only** (no ``objective.carbon_price``, as before prices came in): the weight is the
  intensity, g/kWh, and the plan minimises grams;
- **priced** (``carbon_price`` in currency per tonne CO2, 0 = cost only): the weight is
  ``carbon_price x g/kWh / 1e6 + price / 1000``, currency per kWh (price per MWh, as markets
  publish it), and the plan minimises cost + carbon_price x tonnes.

``objective.time_value_g_per_h`` is "an hour earlier finish is worth this many grams" in both: under
a priced objective those grams are worth ``carbon_price`` per tonne, so an hour is worth
``time_value_g_per_h x carbon_price / 1e6`` currency (:func:`time_value_per_h`). The figures a plan
reports (grams, cost) are computed apart, from the true signals, never from the weights.

Prices reach the planner as a :class:`PriceSignal`: the prices published by the decision's moment on
a regular grid, then one value held for every later slot (:func:`price_tail`, the mean of the last
published day: the planner is told nothing of their shape it does not know).

The plan's sentences speak in the objective's units (:class:`ObjectiveUnits`): :func:`explain` gives
one plain sentence per choice of a plan (the start, each segment's mode, each pause).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from carbon.prices.series import PriceSeries
from scheduler.planner.grid import GridSignal

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.planner import ModeFigures, Objective, PlanJob, Segment

__all__ = ["ObjectiveUnits", "PriceSignal", "explain", "objective_weights", "price_grid", "price_signal", "price_tail",
           "time_value_per_h", "units_of"]

_G_PER_TONNE = 1e6
_KWH_PER_MWH = 1000.0
#: the published prices the tail's mean is taken over
TAIL_S = 86400.0


def objective_weights(intensity_g_per_kwh: np.ndarray, price_per_mwh: np.ndarray | None,
                      carbon_price: float | None) -> np.ndarray:
    """Per-slot weight per kWh: g/kWh (``carbon_price`` None), else currency/kWh (see the module docstring).

    Carbon only returns ``intensity_g_per_kwh`` itself, so a plan without a price objective is the
    same computation, bit for bit, as before prices existed.
    """
    if carbon_price is None:
        return intensity_g_per_kwh
    if price_per_mwh is None:
        raise ValueError("objective.carbon_price prices carbon against the energy's price: the planner needs prices")
    c = np.asarray(intensity_g_per_kwh, dtype=float)
    p = np.asarray(price_per_mwh, dtype=float)
    n = min(len(c), len(p))
    return carbon_price * c[:n] / _G_PER_TONNE + p[:n] / _KWH_PER_MWH


def time_value_per_h(time_value_g_per_h: float, carbon_price: float | None) -> float:
    """An hour's earlier finish in the objective's units: grams, or (priced) those grams' worth in currency."""
    if carbon_price is None:
        return time_value_g_per_h
    return time_value_g_per_h * carbon_price / _G_PER_TONNE


@dataclass(frozen=True)
class ObjectiveUnits:
    """How the plan's sentences speak of a weight: its text, and the words for better and worse."""

    text: Callable[[float], str]
    lower: str      # "cleaner" / "cheaper"
    good: str       # "clean" / "cheap"
    higher: str     # "dirtier" / "dearer"
    what: str       # "the grid" / "energy"
    basis: str = ""  # what a priced weight holds, said once a sentence: " as price + carbon at 85 EUR/t"


def units_of(carbon_price: float | None, currency: str = "") -> ObjectiveUnits:
    """The words for weights of an objective (carbon only: g/kWh; priced: currency/MWh, carbon included)."""
    if carbon_price is None:
        return ObjectiveUnits(lambda v: f"{v:.0f} g/kWh", "cleaner", "clean", "dirtier", "the grid")
    cur = currency or "currency"
    basis = f" as price + carbon at {carbon_price:g} {cur}/t" if carbon_price > 0 else " as price"
    return ObjectiveUnits(lambda v: f"{v * _KWH_PER_MWH:.1f} {cur}/MWh", "cheaper", "cheap", "dearer", "energy", basis)


class PriceSignal(GridSignal):
    """Prices per MWh published by a moment, on a regular grid; after ``published_end`` the tail value holds."""

    def __init__(self, values: np.ndarray, step_s: float, origin_s: float, epoch: datetime, *,
                 published_end: datetime, tail_per_mwh: float, currency: str = "") -> None:
        super().__init__(np.append(np.asarray(values, dtype=float), tail_per_mwh), step_s, origin_s, epoch=epoch)
        self.published_end, self.tail_per_mwh, self.currency = published_end, float(tail_per_mwh), currency


def price_tail(values: np.ndarray, step_s: float) -> float:
    """What later, unpublished prices are planned at: the mean of the last published day (all there is, if less)."""
    n = max(int(round(TAIL_S / step_s)), 1)
    tail = np.asarray(values, dtype=float)[-n:]
    return float(tail.mean()) if len(tail) else 0.0


def price_signal(series: PriceSeries, now: datetime) -> PriceSignal | None:
    """The prices of ``series`` published by ``now`` as the planner's signal (None: none published).

    The grid's step is the series' shortest interval; a gap or an interval longer than the step
    holds its price (gaps carry the last price forward, as the intensity's do).
    """
    known = series.known_at(now)
    if not known:
        return None
    step, idx = price_grid(known)
    values = np.array(known.values())[idx]
    origin = known.start
    return PriceSignal(values, step, 0.0, origin, published_end=origin + timedelta(seconds=len(idx) * step),
                       tail_per_mwh=price_tail(values, step), currency=known.currency)


def price_grid(series: PriceSeries) -> tuple[float, np.ndarray]:
    """A non-empty series on a regular grid from its first start: the step (its shortest interval, seconds) and,
    per grid cell, the index of the point in force (a gap or a longer interval holds its price)."""
    pts = series.points
    step = min(p.duration for p in pts).total_seconds()
    origin = pts[0].start
    n = int(math.ceil((series.end - origin).total_seconds() / step - 1e-9))
    starts = np.array([(p.start - origin).total_seconds() for p in pts])
    return step, np.clip(np.searchsorted(starts, np.arange(n) * step, side="right") - 1, 0, len(pts) - 1)

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


