"""Start-time shifting: pick when a deferrable job starts so that it emits least. Pure numpy.

Formulation. The forecast is a piecewise-constant intensity ``I(t)`` (g/kWh) on a regular grid of
``step_s`` seconds starting at ``t0``. A job that runs ``duration_s`` at ``power_w`` and starts at
``s`` is expected to emit ``E(s) = power_w / 3.6e6 * integral_s^{s+duration_s} I(t) dt`` grams.
Candidates are ``s = earliest + k * step_s`` with ``s + duration_s <= deadline - safety_margin_s``.

Robustness to forecast error (Let's Wait Awhile; a day-ahead forecast is often 5-15% off):

- **safety margin**: the latest start keeps ``safety_margin_s`` (default: 10% of the duration, at
  least one step) before the deadline, so a job that runs a little long still finishes in time;
- **minimum gain**: a shift is only taken when the best candidate beats the reference start (the
  nominal start, clipped into the window) by at least ``min_gain`` (default 3%) of its expected
  emissions; otherwise the job starts at the reference. Chasing a 1% forecast difference is noise;
- **ties go early**: among candidates within ``tie_tolerance`` of the best, the earliest one wins
  (leaving the most slack before the deadline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from carbon.series import IntensitySeries

__all__ = ["ShiftedStart", "best_start", "best_start_over_modes", "series_grid", "window_integrals"]

_J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class ShiftedStart:
    """The chosen start (seconds from the forecast origin) and why."""

    start_s: float
    expected_g: float
    reference_start_s: float
    reference_g: float
    shifted: bool
    reason: str

    @property
    def gain(self) -> float:
        """Expected relative saving of the chosen start against the reference start (0-1)."""
        return 0.0 if self.reference_g <= 0 else 1.0 - self.expected_g / self.reference_g


def window_integrals(values_g_per_kwh: np.ndarray, step_s: float, starts_s: np.ndarray, duration_s: float) -> np.ndarray:
    """``integral_s^{s+duration_s} I(t) dt`` (g/kWh x s) for each start, on a piecewise-constant grid.

    Beyond the grid the last value is carried forward.
    """
    values = np.asarray(values_g_per_kwh, dtype=float)
    cum = np.concatenate(([0.0], np.cumsum(values) * step_s))
    edges = np.arange(len(cum), dtype=float) * step_s

    def integral_to(t: np.ndarray) -> np.ndarray:
        inside = np.interp(np.minimum(t, edges[-1]), edges, cum)
        return inside + np.maximum(t - edges[-1], 0.0) * values[-1]

    starts = np.asarray(starts_s, dtype=float)
    return integral_to(starts + duration_s) - integral_to(starts)


def _validate(values: np.ndarray, step_s: float, earliest_s: float, deadline_s: float, duration_s: float) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError("the forecast must be a non-empty 1-D array")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("the forecast must be finite and non-negative")
    if step_s <= 0 or duration_s <= 0:
        raise ValueError("step_s and duration_s must be positive")
    if deadline_s < earliest_s + duration_s:
        raise ValueError("the window is shorter than the job")
    return arr


def _safety_margin_s(duration_s: float, step_s: float, safety_margin_s: float | None) -> float:
    """Slack kept before the deadline: 10 % of the job (at least one step) unless given."""
    return max(0.1 * duration_s, step_s) if safety_margin_s is None else max(safety_margin_s, 0.0)


def best_start(
    forecast_g_per_kwh: np.ndarray,
    *,
    step_s: float,
    earliest_s: float,
    deadline_s: float,
    duration_s: float,
    power_w: float,
    reference_start_s: float | None = None,
    min_gain: float = 0.03,
    safety_margin_s: float | None = None,
    tie_tolerance: float = 0.005,
) -> ShiftedStart:
    """The start in ``[earliest_s, deadline_s - duration_s - margin]`` with least expected emissions.

    All times are seconds from the forecast's first value. ``reference_start_s`` (default
    ``earliest_s``) is where the job starts unless a shift gains at least ``min_gain``. Never returns
    a start before ``earliest_s`` or one that would end after ``deadline_s``.
    """
    values = _validate(forecast_g_per_kwh, step_s, earliest_s, deadline_s, duration_s)
    margin = _safety_margin_s(duration_s, step_s, safety_margin_s)
    latest = deadline_s - duration_s - margin
    if latest < earliest_s:  # no room for a margin: run as early as possible, which is the safest
        latest = earliest_s
    ref = earliest_s if reference_start_s is None else min(max(reference_start_s, earliest_s), latest)
    n = int(math.floor((latest - earliest_s) / step_s + 1e-9)) + 1
    candidates = earliest_s + np.arange(n) * step_s
    candidates = np.unique(np.concatenate((candidates, [ref])))
    scale = power_w / _J_PER_KWH
    grams = window_integrals(values, step_s, candidates, duration_s) * scale
    ref_g = float(window_integrals(values, step_s, np.array([ref]), duration_s)[0] * scale)
    best_g = float(grams.min())
    near = np.nonzero(grams <= best_g + tie_tolerance * max(best_g, 1e-12))[0]
    pick = int(near[0])
    start, start_g = float(candidates[pick]), float(grams[pick])
    if ref_g <= 0 or start_g > ref_g * (1.0 - min_gain) or start == ref:
        return ShiftedStart(ref, ref_g, ref, ref_g, False,
                         f"no start in the window is at least {min_gain:.0%} cleaner than the reference, so the job starts there")
    gain = 1.0 - start_g / ref_g
    return ShiftedStart(start, start_g, ref, ref_g, True,
                     f"starting {(start - ref) / 3600:+.2f} h from the reference is expected to emit {gain:.1%} less")


def series_grid(series: IntensitySeries, start: datetime, end: datetime, step_s: float) -> np.ndarray:
    """Sample ``series`` on a regular grid ``[start, end)`` (the value in force; gaps carry the last value)."""
    n = max(int(math.ceil((end - start).total_seconds() / step_s - 1e-9)), 1)
    out = np.empty(n)
    last = None
    for i in range(n):
        p = series.at(start + timedelta(seconds=i * step_s), max_gap=timedelta(days=365))
        if p is None:
            p_val = last if last is not None else (series.points[0].g_per_kwh if series else 0.0)
        else:
            p_val = p.g_per_kwh
        out[i] = p_val
        last = p_val
    return out


def best_start_over_modes(
    forecast_g_per_kwh: np.ndarray,
    modes: dict[str, tuple[float, float]],
    *,
    step_s: float,
    earliest_s: float,
    deadline_s: float,
    reference_start_s: float | None = None,
    min_gain: float = 0.03,
    safety_margin_s: float | None = None,
) -> tuple[str, ShiftedStart]:
    """:func:`best_start` for each mode ``name -> (power_w, duration_s)`` that fits; the cleanest wins.

    A mode whose duration does not fit the window is skipped; the mode listed first is the fallback
    (list the fastest mode first so that a tight window always has a plan).
    """
    best: tuple[str, ShiftedStart] | None = None
    for name, (power_w, duration_s) in modes.items():
        if deadline_s < earliest_s + duration_s:
            continue
        plan = best_start(forecast_g_per_kwh, step_s=step_s, earliest_s=earliest_s, deadline_s=deadline_s,
                          duration_s=duration_s, power_w=power_w, reference_start_s=reference_start_s,
                          min_gain=min_gain, safety_margin_s=safety_margin_s)
        if best is None or plan.expected_g < best[1].expected_g:
            best = (name, plan)
    if best is None:
        raise ValueError("no mode fits the window")
    return best
