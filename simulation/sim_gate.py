"""The do-no-harm gate in the replay: each forecast's record on the nights before, as the product keeps it.

For every night the simulator knows what each forecast (:func:`simulation.sim_forecast.forecast_candidates`)
said at that night's earliest start and, once the night is over, what was observed; the gain of the
planning run's plan on it over the static plan is :meth:`scheduler.loop.gate.NightPlanner.gain`, the
same function the product applies to its forecast archive (on the objective: grams, or with a carbon
price cost + carbon priced, on the prices published at the night's decision). A night's record for tonight holds only
nights whose whole window (to the deadline) ended before tonight's earliest start. Memoised per
process: a year's replay plans each forecast's start once a night.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Callable, Mapping, Sequence

from scheduler.loop import gate
from scheduler.loop.gate import RECORD_NIGHTS, ForecastChoice, ForecastRecord, NightPlanner, choose_forecast, plan_grams
from scheduler.loop.loop import SignalReading
from scheduler.planner import RunPlan
from scheduler.planner.grid import GridSignal
from simulation.sim_forecast import GridForecaster
from simulation.sim_price import SimPrices

__all__ = ["NightRecords", "grid_reader"]


def grid_reader(forecaster: GridForecaster, truth: GridSignal, label: str,
                steps_from: Callable[[float, int], int], prices: SimPrices | None = None) -> Callable[[float], SignalReading]:
    """A reader for :class:`simulation.trace_run.TraceDriver`: at trace second ``s``, ``forecaster``'s
    forecast from the grid index in force, ``steps_from(s, i)`` grid values long, labelled ``label``,
    and the prices published by ``s`` when ``prices`` are given."""
    values, step, epoch = truth.values, truth.step_s, truth.epoch
    last = len(values) - 1

    def read(s: float) -> SignalReading:
        i = min(int(s // step), last)
        vals = forecaster.forecast(values, i, steps_from(s, i))
        return SignalReading(GridSignal(vals, step, i * step, epoch=epoch), value_now=float(values[i]), label=label,
                             price=prices.known(s) if prices is not None else None)

    return read


class StepsAhead:
    """Grid values a plan made at trace second ``s`` needs: its slots to the deadline, and one more."""

    def __init__(self, deadline_s: float, slot_s: float, step_s: float) -> None:
        self.deadline_s, self.slot_s, self.step_s = deadline_s, slot_s, step_s

    def __call__(self, s: float, i: int) -> int:
        n_slots = int(math.ceil(max(self.deadline_s - s, 0.0) / self.slot_s)) + 1
        return int(math.ceil((s + n_slots * self.slot_s - i * self.step_s) / self.step_s)) + 1


class NightRecords:
    """Every forecast's gain over the static plan, night by night, and the gate's choice for each night.

    ``nominals_s``: the nights' cron times in trace seconds, in order; ``earliest_s``/``deadline_s``:
    the job's window relative to them; ``candidates``: the forecasts by label.
    """

    def __init__(self, planner: NightPlanner, truth: GridSignal, candidates: Mapping[str, GridForecaster],
                 nominals_s: Sequence[float], *, earliest_s: float, deadline_s: float, slot_s: float,
                 prices: SimPrices | None = None) -> None:
        assert truth.epoch is not None
        self.planner, self.truth, self.epoch = planner, truth, truth.epoch
        self.candidates = dict(candidates)
        self.nominals = list(nominals_s)
        self.earliest_s, self.deadline_s, self.slot_s = earliest_s, deadline_s, slot_s
        self._plans: dict[tuple[str, int], RunPlan] = {}
        # the prices the plans read: only a priced objective plans on them (a carbon objective is costed after)
        self.prices = prices if planner.objective.priced else None
        self.truth_prices = prices.truth if prices is not None else None
        self._gains: dict[tuple[str, int], float | None] = {}
        self.z = gate.Z  # read when built, so a benchmark can try another

    def _nominal(self, k: int) -> datetime:
        return self.epoch + timedelta(seconds=self.nominals[k])

    def reader(self, label: str, k: int) -> Callable[[float], SignalReading]:
        """What a decision of night ``k`` reads of forecast ``label``."""
        steps = StepsAhead(self.nominals[k] + self.deadline_s, self.slot_s, self.truth.step_s)
        return grid_reader(self.candidates[label], self.truth, label, steps, self.prices)

    def observed_reader(self) -> Callable[[float], SignalReading]:
        """What a night on the static plan reads: the value now, and no forecast (its plans are on a flat
        signal), with the prices published by then."""
        values, step, epoch, last = self.truth.values, self.truth.step_s, self.epoch, len(self.truth.values) - 1
        prices = self.prices

        def read(s: float) -> SignalReading:
            i = min(int(s // step), last)
            return SignalReading(GridSignal(values[i:i + 1], step, i * step, epoch=epoch), float(values[i]), label="",
                                 price=prices.known(s) if prices is not None else None)

        return read

    def static_start(self, k: int) -> float:
        """Where night ``k``'s static plan starts (trace seconds): the cron start, or, under a priced
        objective, the start the planning run chooses on the published prices and a flat carbon signal."""
        nominal_s = self.nominals[k]
        reference = max(nominal_s, nominal_s + self.earliest_s)
        if self.prices is None:
            return reference
        plan = self._static_plan(k)
        return max((plan.start - self.epoch).total_seconds(), nominal_s + self.earliest_s)

    def _static_plan(self, k: int) -> RunPlan:
        key = ("", k)
        if key not in self._plans:
            at = self.nominals[k] + self.earliest_s
            i = min(int(at // self.truth.step_s), len(self.truth.values) - 1)
            price = self.prices.known(at) if self.prices is not None else None
            self._plans[key] = self.planner.static_plan(nominal=self._nominal(k), price=price,
                                                        value_now=float(self.truth.values[i]))
        return self._plans[key]

    def start_plan(self, label: str, k: int) -> RunPlan:
        """The planning run's plan for night ``k`` on forecast ``label``, made at the night's earliest start."""
        key = (label, k)
        if key not in self._plans:
            at = self.nominals[k] + self.earliest_s
            reading = self.reader(label, k)(at)
            self._plans[key] = self.planner.start_plan(reading.signal, nominal=self._nominal(k), price=reading.price)
        return self._plans[key]

    def gain(self, label: str, k: int) -> float | None:
        key = (label, k)
        if key not in self._gains:
            if self.prices is None:
                static = plan_grams(self.planner.static_plan(nominal=self._nominal(k)), self.truth, self.planner.by_name)
                mine = plan_grams(self.start_plan(label, k), self.truth, self.planner.by_name)
                self._gains[key] = (static - mine) / static if static > 0 else None
            else:  # on the objective, relative to the static plan's size (a priced night may cost less than nothing)
                base = self.planner.value(self._static_plan(k), self.truth, self.truth_prices)
                mine = self.planner.value(self.start_plan(label, k), self.truth, self.truth_prices)
                self._gains[key] = (base - mine) / abs(base) if abs(base) > 1e-12 else None
        return self._gains[key]

    def choice(self, k: int) -> ForecastChoice:
        """The gate's verdict for night ``k``: on the last finished nights before its earliest start only."""
        decision_s = self.nominals[k] + self.earliest_s
        past = [j for j in range(k - 1, -1, -1) if self.nominals[j] + self.deadline_s <= decision_s][:RECORD_NIGHTS]
        records = []
        for label in self.candidates:
            gains = [g for j in reversed(past) if (g := self.gain(label, j)) is not None]
            records.append(ForecastRecord(label, tuple(gains)))
        return choose_forecast(records, z=self.z)
