"""An intensity series cut into planning slots. Pure numpy."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from carbon.series import IntensitySeries

__all__ = ["slot_intensity"]


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
