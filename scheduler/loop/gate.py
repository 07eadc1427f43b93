"""Do no harm, whatever the forecast: a forecast leaves the static plan only as far as its record shows it pays.

The **static plan** is what a user with no carbon data runs: the job at its cron time in the modes
with the least energy for the deadline (the planner on a flat signal). A forecast moves the start
and the modes away from it; whether that paid on a past night is known once the night is over:

    gain = (static plan's grams - the forecast's plan's grams) / static plan's grams

both plans costed on what was then observed. Under a priced objective (``objective.carbon_price``) the
gain is on the objective, cost + carbon_price x tonnes, and the static plan is the planner on a flat
carbon signal and the published day-ahead prices (prices are known, not forecast: the static plan
moves its start to the cheap hours, and only the carbon forecast has to earn its place). The forecast's plan is the one the planning run made
at that night's earliest start (start and modes, as it stood then: :meth:`NightPlanner.start_plan`),
so a night's gain needs only what was forecast before it and what was observed after it. The
**record** of a forecast is its gains on the last :data:`RECORD_NIGHTS` finished nights.

:func:`choose_forecast` trusts the forecast whose record has the highest lower confidence bound of
its mean gain, ``mean - Z x standard error``, if that bound is above zero and the record has at least
:data:`MIN_NIGHTS` nights; otherwise nothing is trusted and tonight runs the static plan. A combined
forecast (the fusion of a provider's forecast and the history forecast) is scored beside each of its
inputs, so it is never trusted beyond the better of them on the same nights.

The same rules serve the product (records read from the forecast archive) and the simulator
(records replayed from the trace), on the planner's own plans. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Mapping, Sequence

from scheduler.planner import ModeFigures, RunPlan
from scheduler.planner.deciders import plan_work
from scheduler.planner.grid import GridSignal, Signal, flat_signal
from scheduler.policy.types import PlanRule
from scheduler.run_spec import RunSpec

__all__ = ["MIN_NIGHTS", "RECORD_NIGHTS", "STATIC", "TRUST_SOURCE", "Z", "ForecastChoice", "ForecastRecord",
           "NightPlanner", "choose_forecast", "plan_cost", "plan_grams"]

#: the label that means "the forecast the source handed on" (no gate, or a gate that trusts it)
TRUST_SOURCE = ""
#: finished nights a record holds (four weeks: the history forecaster's own window, not tuned here)
RECORD_NIGHTS = 28
#: nights a record needs before a forecast may leave the static plan (a week: every weekday once)
MIN_NIGHTS = 7
#: standard errors the mean gain must clear: the smallest that kept every month within x1.005 on the
#: first half of every shared trace, both mode-figure sets, confirmed on the second half
#: (benchmarks/gate_threshold.py; docs/scheduling.md "Do no harm")
Z = 1.5


@dataclass(frozen=True)
class ForecastChoice:
    """The forecast a run plans on: ``label`` (:data:`TRUST_SOURCE`: the source's own), or None: none, the static plan."""

    label: str | None = TRUST_SOURCE
    reason: str = ""

    @property
    def static(self) -> bool:
        return self.label is None


STATIC = ForecastChoice(None, "no forecast: the static plan")


@dataclass(frozen=True)
class ForecastRecord:
    """One forecast's gains over the static plan on past nights, oldest first."""

    label: str
    gains: tuple[float, ...]

    @property
    def nights(self) -> int:
        return len(self.gains)

    @property
    def mean(self) -> float:
        return sum(self.gains) / len(self.gains) if self.gains else 0.0

    def lower_bound(self, z: float = Z) -> float:
        """``mean - z x standard error`` of the gains (-inf with fewer than two)."""
        n = len(self.gains)
        if n < 2:
            return -math.inf
        m = self.mean
        var = sum((g - m) ** 2 for g in self.gains) / (n - 1)
        return m - z * math.sqrt(var / n)


def choose_forecast(records: Sequence[ForecastRecord], *, z: float = Z, min_nights: int = MIN_NIGHTS,
                    names: Mapping[str, str] | None = None) -> ForecastChoice:
    """The forecast to plan tonight on: the best record whose lower bound is above zero, else none (see the module).

    ``names`` gives each label a name for the reason (default: the label).
    """
    named = names or {}
    said = lambda r: named.get(r.label, r.label)  # noqa: E731
    scored = [r for r in records if r.nights >= min_nights]
    if not scored:
        few = max((r.nights for r in records), default=0)
        return ForecastChoice(None, f"no forecast has a record of {min_nights} finished nights yet ({few} so far): "
                                    "the static plan (cron start, frugal modes) until one shows a gain")
    best = max(scored, key=lambda r: r.lower_bound(z))
    others = "; ".join(f"{said(r)} {r.mean:+.1%}" for r in scored if r is not best)
    tail = f" (others: {others})" if others else ""
    if best.lower_bound(z) <= 0.0:
        return ForecastChoice(None, f"no forecast has paid on its record: {said(best)} gained {best.mean:+.1%} a night "
                                    f"over the static plan on the last {best.nights} nights, not clear of its "
                                    f"night-to-night spread{tail}; the static plan (cron start, frugal modes)")
    return ForecastChoice(best.label, f"{said(best)}: it gained {best.mean:+.1%} a night over the static plan on the "
                                      f"last {best.nights} nights{tail}")


def plan_grams(plan: RunPlan, observed: GridSignal, figures: Mapping[str, ModeFigures]) -> float:
    """What ``plan`` (run as planned, at its figures' speeds) would have emitted on ``observed`` (g)."""
    g = 0.0
    for s in plan.segments:
        a, b = observed.seconds(s.start), observed.seconds(s.end)
        g += figures[s.mode].power_w * observed.integral(a, b) / 3.6e6
    return g


def plan_cost(plan: RunPlan, prices: GridSignal, figures: Mapping[str, ModeFigures]) -> float:
    """What ``plan`` (run as planned) would have cost at ``prices`` (per MWh): currency."""
    return plan_grams(plan, prices, figures) / 1000.0


class NightPlanner:
    """One night's start decision as the planning run makes it: on a forecast, or on none (the static plan).

    ``nominal`` is the night's cron time; the job may start from ``nominal + earliest_start_s`` and
    must end by ``nominal + deadline_s``. Plans skip their sentences unless ``explain``.
    """

    def __init__(self, spec: RunSpec, figures: Sequence[ModeFigures], *, explain: bool = False) -> None:
        assert isinstance(spec.rules, PlanRule) and spec.constraints is not None
        self.spec, self.figures, self.explain = spec, list(figures), explain
        self.objective = spec.objective
        self.by_name = {f.name: f for f in figures}
        self._static: dict[tuple[float, float], RunPlan] = {}

    def window(self, nominal: datetime, now: datetime | None = None) -> tuple[datetime, datetime, datetime | None]:
        """(earliest start, the start a user would pick, deadline) of the night at ``nominal``, seen at ``now``."""
        job = self.spec.job
        earliest = nominal + timedelta(seconds=job.earliest_start_s)
        if now is not None:
            earliest = max(earliest, now)
        deadline = nominal + timedelta(seconds=job.deadline_s) if job.deadline_s is not None else None
        if deadline is None:
            earliest = max(earliest, nominal)
        return earliest, max(nominal, earliest), deadline

    def _plan(self, signal: Signal, *, now: datetime, not_before: datetime, deadline: datetime | None,
              reference: datetime | None, start_now: bool, price: Signal | None = None) -> RunPlan:
        spec = self.spec
        assert isinstance(spec.rules, PlanRule) and spec.constraints is not None
        return plan_work(signal, self.figures, rules=spec.rules, constraints=spec.constraints, objective=spec.objective,
                         pausable=spec.job.checkpointable, resume_overhead_s=spec.job.resume_overhead_s, now=now,
                         work_s=spec.job.expected_duration_s, not_before=not_before, deadline=deadline,
                         reference_start=reference, start_now=start_now, explain=self.explain, price=price)

    def start_plan(self, signal: Signal, *, nominal: datetime, now: datetime | None = None,
                   price: Signal | None = None) -> RunPlan:
        """The plan the planning run makes on ``signal`` at the night's earliest start (or ``now``, if later);
        ``price``: the prices published then (a priced objective plans on them)."""
        earliest, reference, deadline = self.window(nominal, now)
        at = earliest if now is None else now
        return self._plan(signal, now=at, not_before=earliest, deadline=deadline, reference=reference, start_now=False,
                          price=price if self.objective.priced else None)

    def static_plan(self, *, nominal: datetime, now: datetime | None = None, price: Signal | None = None,
                    value_now: float = 100.0) -> RunPlan:
        """The static plan: the job at the start a user would pick, its modes planned on a flat signal.

        Under a priced objective: the planning run's plan on a flat carbon signal at ``value_now``
        (the intensity then) and the published ``price``: start and modes chosen on the prices alone.
        """
        if self.objective.priced:
            earliest, _, _ = self.window(nominal, now)
            return self.start_plan(flat_signal(value_now, earliest), nominal=nominal, now=now, price=price)
        _, reference, deadline = self.window(nominal, now)
        key = ((deadline - reference).total_seconds() if deadline is not None else -1.0, reference.timestamp() % 60)
        if key not in self._static:  # the same shape every night: plan it once, move it to each night
            self._static[key] = self._plan(flat_signal(100.0, reference), now=reference, not_before=reference,
                                           deadline=deadline, reference=None, start_now=True)
        plan = self._static[key]
        return _moved(plan, reference - plan.start) if plan.segments else plan

    def value(self, plan: RunPlan, observed: GridSignal, prices: GridSignal | None = None) -> float:
        """``plan``'s objective on what was observed: grams, or (priced) cost + carbon_price x tonnes."""
        g = plan_grams(plan, observed, self.by_name)
        cp = self.objective.carbon_price
        if cp is None:
            return g
        if prices is None:
            raise ValueError("a priced objective is scored on the prices: none given")
        return cp * g / 1e6 + plan_cost(plan, prices, self.by_name)

    def gain(self, signal: Signal, observed: GridSignal, *, nominal: datetime, price: Signal | None = None,
             observed_price: GridSignal | None = None) -> float | None:
        """The forecast's gain over the static plan on the night at ``nominal`` (None: nothing to compare).

        Priced: on the objective, both plans made on the prices published at the decision (``price``)
        and scored on those that held (``observed_price``), relative to the static plan's size.
        """
        if not self.objective.priced:
            static = plan_grams(self.static_plan(nominal=nominal), observed, self.by_name)
            if static <= 0:
                return None
            return (static - plan_grams(self.start_plan(signal, nominal=nominal), observed, self.by_name)) / static
        earliest, _, _ = self.window(nominal)
        now_value = float(observed.slot_means(earliest, 1.0, 1)[0])
        base = self.value(self.static_plan(nominal=nominal, price=price, value_now=now_value), observed, observed_price)
        if abs(base) <= 1e-12:
            return None
        mine = self.value(self.start_plan(signal, nominal=nominal, price=price), observed, observed_price)
        return (base - mine) / abs(base)


def _moved(plan: RunPlan, by: timedelta) -> RunPlan:
    if not by:
        return plan
    return replace(plan, start=plan.start + by, finish=plan.finish + by,
                   segments=tuple(replace(s, start=s.start + by, end=s.end + by) for s in plan.segments))
