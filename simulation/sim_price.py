"""Prices in the replay: the true prices on their grid, and what the market had published at each moment.

:class:`SimPrices` holds a price trace (:class:`carbon.prices.series.PriceSeries`, each price stamped
with its publication time) on a regular grid, in seconds after the carbon trace's start. Every
decision of the replay reads :meth:`SimPrices.known` at its own moment: the prices published by then,
and past them the tail value the planner holds unpublished prices at
(:class:`scheduler.planner.objective.PriceSignal`) - never a price before its auction's result. The
cost of running is integrated exactly over the true prices (:meth:`SimPrices.cost`).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np

from carbon.prices.series import PriceSeries
from scheduler.planner.grid import GridSignal
from scheduler.planner.objective import PriceSignal, price_grid, price_tail

__all__ = ["SimPrices"]

_J_PER_MWH = 3.6e9
#: published prices a decision's signal carries before its moment (the tail's mean needs the last day)
_BEHIND_S = 86400.0


class SimPrices:
    """A price trace on a regular grid from ``epoch`` (the carbon trace's start), with publication times."""

    def __init__(self, series: PriceSeries, epoch: datetime) -> None:
        if not series:
            raise ValueError("the price trace is empty")
        pts = series.points
        step, idx = price_grid(series)
        self.values = np.array(series.values())[idx]
        published = [p.published_at for p in pts]
        origin_s = (series.start - epoch).total_seconds()
        pub = np.array([(t - epoch).total_seconds() if t is not None else -math.inf for t in published])[idx]
        # a later interval is never published before an earlier one (markets publish day by day)
        self.published_s = np.maximum.accumulate(pub)
        self.step_s, self.origin_s, self.epoch = step, origin_s, epoch
        self.currency, self.zone = series.currency, series.zone
        self.truth = GridSignal(self.values, step, origin_s, epoch=epoch)
        self._memo: tuple[int, PriceSignal | None] | None = None

    @property
    def end_s(self) -> float:
        return self.origin_s + len(self.values) * self.step_s

    def covers(self, a_s: float, b_s: float) -> bool:
        """Are there true prices for all of ``[a_s, b_s)`` (trace seconds)?"""
        return self.origin_s <= a_s and b_s <= self.end_s

    def known(self, s: float) -> PriceSignal | None:
        """The prices published by trace second ``s`` (and the day before them), as the planner's signal."""
        k = int(np.searchsorted(self.published_s, s, side="right"))
        if self._memo is not None and self._memo[0] == k:
            return self._memo[1]
        signal = None
        if k > 0:
            behind = max(int(math.ceil(_BEHIND_S / self.step_s)), 1)
            first = max(0, min(k - behind, int((s - self.origin_s) // self.step_s) - behind))
            vals = self.values[first:k]
            origin = self.origin_s + first * self.step_s
            signal = PriceSignal(vals, self.step_s, origin, self.epoch,
                                 published_end=self.epoch + timedelta(seconds=self.origin_s + k * self.step_s),
                                 tail_per_mwh=price_tail(vals, self.step_s), currency=self.currency)
        self._memo = (k, signal)
        return signal

    def cost(self, power_w: float, a_s: float, b_s: float) -> float:
        """What ``power_w`` over ``[a_s, b_s)`` (trace seconds) costs at the true prices (currency)."""
        return power_w * self.truth.integral(a_s, b_s) / _J_PER_MWH
