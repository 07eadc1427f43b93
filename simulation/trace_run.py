"""One job through the product's run loop, on a trace: the simulator's :class:`scheduler.loop.loop.RunDriver`.

The clock is virtual (it moves only when the job runs or sleeps); the job does its work at its true
speed in each mode (the figures' speed, slowed by ``pace_error`` when asked); carbon is integrated
exactly over the real, piecewise-constant trace, and its cost over the true prices when there are
(:class:`simulation.sim_price.SimPrices`); the signal each decision reads is what the forecaster
could have said then, with the prices the market had published by then. So :func:`run_job_on_trace` asks the decider exactly what
``flows.supervise`` asks it on a real run, at the same moments: one loop, two drivers.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Callable, Sequence

from scheduler.loop.gate import ForecastChoice
from scheduler.loop.loop import DEFER_PAUSES_OVER_S, SignalReading, run_loop
from scheduler.planner import ModeFigures, RunPlan
from scheduler.planner.deciders import Decider
from scheduler.planner.grid import GridSignal
from scheduler.planner.power_cap import CapWindow, PowerCap
from simulation.sim_price import SimPrices

__all__ = ["TraceDriver", "run_job_on_trace"]

_J_PER_KWH = 3.6e6

#: the signal a decision reads, standing at trace second ``t``
Reader = Callable[[float], SignalReading]


class TraceDriver:
    """A job on the true trace, under a virtual clock. ``figures``: the modes as the job really runs them."""

    def __init__(self, truth: GridSignal, figures: Sequence[ModeFigures], *, work_s: float, read: Reader,
                 reports_progress: bool, resume_overhead_s: float = 0.0, prices: SimPrices | None = None,
                 events: Sequence[tuple[float, CapWindow]] = ()) -> None:
        assert truth.epoch is not None
        self.truth, self.epoch = truth, truth.epoch
        self.by_name = {f.name: f for f in figures}
        self.index = {f.name: k for k, f in enumerate(figures)}
        self.total_s, self.left_s = work_s, work_s
        self._read = read
        self.reports_progress, self.resume_overhead_s = reports_progress, resume_overhead_s
        self.clock = self.epoch
        self.mode: str | None = None
        self.spans: list[tuple[float, float, int]] = []  # (start_s, end_s, mode index) in trace seconds
        self.carbon_g = self.energy_j = 0.0
        self.prices = prices
        self.cost: float | None = 0.0 if prices is not None else None
        # grid events: (trace second the run hears of it, its cap window), heard in that order
        self.events = sorted(events, key=lambda e: e[0])

    def seconds(self) -> float:
        return (self.clock - self.epoch).total_seconds()

    def set_clock(self, t_s: float) -> None:
        self.clock = self.epoch + timedelta(seconds=t_s)

    # -- RunDriver -------------------------------------------------------------------------------
    def now(self) -> datetime:
        return self.clock

    def sleep(self, seconds: float) -> None:
        self.clock += timedelta(seconds=seconds)

    def read(self, t: datetime) -> SignalReading:
        return self._read((t - self.epoch).total_seconds())

    def start(self, mode: str, reason: str, *, resuming: bool) -> None:
        if resuming:
            self.left_s += self.resume_overhead_s  # the job redoes what its checkpoint lost
        self.mode = mode

    def switch(self, mode: str, reason: str) -> None:
        self.mode = mode

    def power_cap(self, t: datetime) -> PowerCap:
        at = (t - self.epoch).total_seconds()
        return PowerCap(tuple(w for heard, w in self.events if heard <= at + 1e-6))

    def wait(self, timeout_s: float) -> int | None:
        assert self.mode is not None
        fig = self.by_name[self.mode]
        a = self.seconds()
        # an event heard meanwhile wakes the loop, as the product's event watch does
        timeout_s = min([timeout_s] + [heard - a for heard, _ in self.events if a + 1e-6 < heard < a + timeout_s])
        need = self.left_s / fig.speed
        if need <= timeout_s:
            self.clock += timedelta(seconds=need)
            self._ran(a, a + need, fig)
            self.left_s = 0.0
            return 0
        self.clock += timedelta(seconds=timeout_s)
        b = self.seconds()
        self._ran(a, b, fig)
        self.left_s = max(self.left_s - (b - a) * fig.speed, 0.0)
        return None

    def _ran(self, a: float, b: float, fig: ModeFigures) -> None:
        if b <= a:
            return
        self.carbon_g += fig.power_w * self.truth.integral(a, b) / _J_PER_KWH
        self.energy_j += fig.power_w * (b - a)
        if self.prices is not None and self.cost is not None:
            self.cost += self.prices.cost(fig.power_w, a, b)
        self.spans.append((a, b, self.index[fig.name]))

    def progress(self) -> float | None:
        return (self.total_s - self.left_s) / self.total_s if self.reports_progress and self.total_s > 0 else None

    def stop(self) -> int | None:
        self.mode = None
        return 0

    def window_ended(self, *, ended_by: str, exit_code: int | None, work_s: float, measured: bool) -> None:
        self.mode = None

    def decided(self, plan: RunPlan, t: datetime, *, first: bool) -> None:
        pass

    def log(self, line: str) -> None:
        pass

    def warn(self, note: str) -> None:
        pass


def run_job_on_trace(driver: TraceDriver, make_decider: Callable[[float, int], Decider], *, start_s: float,
                     interval_s: float, pausable: bool, choice: ForecastChoice, clean_mode: str,
                     give_up_s: float) -> None:
    """Run the job from trace second ``start_s`` to its end, as the product does.

    Each run is a flow run: a planned pause longer than the product's deferral threshold ends it, and
    the next window is a new run with a new decider (``make_decider(work done, windows before)``),
    as :mod:`flows.job.windows` schedules it. ``give_up_s``: a trace second past which a run that has
    not finished is a bug, not a plan.
    """
    driver.set_clock(start_s)
    done, windows = 0.0, 0
    while True:
        result = run_loop(make_decider(done, windows), driver, interval_s=interval_s, pausable=pausable,
                          defer_pauses_over_s=DEFER_PAUSES_OVER_S, choice=choice, windows_before=windows,
                          clean_mode=clean_mode)
        if result.ended == "exit":
            return
        assert result.next_window is not None
        done, windows = result.work_done_s, result.windows
        driver.clock = max(result.next_window, driver.clock)
        if driver.seconds() > give_up_s or not math.isfinite(driver.seconds()):
            raise RuntimeError("the simulated job did not finish")
