"""What the planner plans on, cut into slots: an intensity series, or values on a regular grid. Pure numpy.

The planner asks one thing of its signal: the mean of each planning slot (:func:`slot_values`). The
product's signal is an :class:`carbon.series.IntensitySeries` (what the monitor read); the
simulator's is a :class:`GridSignal`, values on the trace's regular grid, integrated exactly. The
values are what a slot costs per kWh: carbon intensity today, any other per-slot price tomorrow.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Union

import numpy as np

from carbon.series import IntensityKind, IntensityPoint, IntensitySeries

__all__ = ["GridSignal", "Signal", "as_series", "flat_signal", "signal_end", "slot_intensity", "slot_values"]


def slot_intensity(series: IntensitySeries, origin: datetime, slot_s: float, n: int) -> np.ndarray:
    """Time-weighted mean intensity of each slot ``[origin + k slot_s, + slot_s)``, k < n.

    A gap carries the last value forward; before the series its first value holds, after it its last.
    """
    if not series:
        raise ValueError("no intensity to plan on: the series is empty")
    xs = np.array([p.start.timestamp() for p in series.points]) - origin.timestamp()
    vs = np.array([p.g_per_kwh for p in series.points], dtype=float)
    cum = np.concatenate(([0.0], np.cumsum(vs[:-1] * np.diff(xs))))
    edges = np.arange(n + 1) * float(slot_s)
    i = np.searchsorted(xs, edges, side="right") - 1
    j = np.clip(i, 0, len(xs) - 1)
    f = np.where(i < 0, (edges - xs[0]) * vs[0], cum[j] + (edges - xs[j]) * vs[j])
    return np.diff(f) / float(slot_s)


class GridSignal:
    """Values on a regular grid as a cumulative integral: exact means over any span.

    ``values[k]`` holds over ``[origin_s + k step_s, + step_s)`` in seconds after ``epoch``; before
    the grid its first value holds, after it its last.
    """

    def __init__(self, values: np.ndarray, step_s: float, origin_s: float = 0.0,
                 epoch: datetime | None = None) -> None:
        self.values = np.asarray(values, dtype=float)
        self.step_s = float(step_s)
        self.origin_s = float(origin_s)
        self.epoch = epoch
        self.cum = np.concatenate(([0.0], np.cumsum(self.values) * step_s))
        # the same numbers as Python floats, for integral(): a run integrates two points per slot, and
        # numpy's per-call overhead on scalars was 5 % of a 12 h year
        self._cum, self._vals = self.cum.tolist(), self.values.tolist()
        self._end = len(self.values) * self.step_s

    def F(self, t: np.ndarray | float) -> np.ndarray:
        """``integral I`` from the grid's origin to ``t`` (seconds after the epoch)."""
        x = np.asarray(t, dtype=float) - self.origin_s
        xc = np.clip(x, 0.0, self._end)
        i = np.minimum((xc // self.step_s).astype(np.int64), len(self.values) - 1)
        inside = self.cum[i] + (xc - i * self.step_s) * self.values[i]
        return inside + np.maximum(x - self._end, 0.0) * self.values[-1] + np.minimum(x, 0.0) * self.values[0]

    def _point(self, t: float) -> float:
        """:meth:`F` at one point, in the same floating-point operations."""
        x = t - self.origin_s
        xc = min(max(x, 0.0), self._end)
        i = min(int(xc // self.step_s), len(self._vals) - 1)
        inside = self._cum[i] + (xc - i * self.step_s) * self._vals[i]
        return inside + max(x - self._end, 0.0) * self._vals[-1] + min(x, 0.0) * self._vals[0]

    def integral(self, a: float, b: float) -> float:
        """``integral_a^b I(t) dt`` (value x s), ``a`` and ``b`` in seconds after the epoch."""
        return float(self._point(float(b)) - self._point(float(a)))

    def slot_means_s(self, a: float, slot_s: float, n: int) -> np.ndarray:
        """Mean of each of ``n`` slots of ``slot_s`` from ``a`` (seconds after the epoch)."""
        off = (a - self.origin_s) / self.step_s
        if slot_s == self.step_s and abs(off - round(off)) < 1e-9 and 0 <= round(off) and round(off) + n <= len(self.values):
            i = int(round(off))
            return self.values[i: i + n]
        edges = self.F(a + np.arange(n + 1) * slot_s)
        return np.diff(edges) / slot_s

    def seconds(self, t: datetime) -> float:
        """``t`` in seconds after the epoch."""
        if self.epoch is None:
            raise ValueError("this grid has no epoch: give times in seconds")
        return (t - self.epoch).total_seconds()

    def slot_means(self, start: datetime, slot_s: float, n: int) -> np.ndarray:
        """Mean of each of ``n`` slots of ``slot_s`` from ``start``."""
        return self.slot_means_s(self.seconds(start), slot_s, n)

    @property
    def end(self) -> datetime:
        """Where the grid's values end (the last one holds after)."""
        assert self.epoch is not None
        return self.epoch + timedelta(seconds=self.origin_s + self._end)


#: what the planner plans on: a series the monitor read, or values on a grid
Signal = Union[IntensitySeries, GridSignal]


def flat_signal(value: float, at: datetime, step_s: float = 3600.0) -> GridSignal:
    """One value held for ever: the planner on it minimises energy alone (the static plan)."""
    return GridSignal(np.array([float(value)]), step_s, 0.0, epoch=at)


def slot_values(signal: Signal, start: datetime, slot_s: float, n: int) -> np.ndarray:
    """The mean of each of ``n`` planning slots of ``slot_s`` from ``start``."""
    if isinstance(signal, GridSignal):
        return signal.slot_means(start, slot_s, n)
    return slot_intensity(signal, start, slot_s, n)


def signal_end(signal: Signal, default: datetime) -> datetime:
    """Where the signal's values end (``default`` for an empty series)."""
    if isinstance(signal, GridSignal):
        return signal.end
    return signal.end if signal else default


def as_series(signal: Signal, *, kind: IntensityKind = "average", source: str = "simulation") -> IntensitySeries:
    """The signal as an intensity series (a grid's values as points; the first one observed, the rest forecast)."""
    if not isinstance(signal, GridSignal):
        return signal
    assert signal.epoch is not None
    step = timedelta(seconds=signal.step_s)
    origin = signal.epoch + timedelta(seconds=signal.origin_s)
    return IntensitySeries(points=tuple(IntensityPoint(start=origin + i * step, duration=step, g_per_kwh=v, kind=kind,
                                                       forecast=i > 0, source=source)
                                        for i, v in enumerate(signal.values.tolist())))
