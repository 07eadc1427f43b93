"""Forecasts the simulator could have had at planning time. Pure numpy; the rng is passed in.

A :class:`GridForecaster` answers "standing at grid index ``i``, what do you expect for the next
``n`` values?" using only what it is allowed to know:

- :class:`DailyProfileForecaster` (the built-in one): past data only. The expected value at a
  time of day is the median of the same time of day over the last ``days`` days, shifted so that
  it starts at the latest observed value and the shift fades out over ``blend_s`` (persistence for
  the next hours, the daily shape after). This is the classic same-hour-of-past-days baseline.
- :class:`NoisyTraceForecaster`: the real future plus multiplicative noise of relative size
  ``error`` (autocorrelated, like real forecast errors), for "what if my provider's forecast is
  X% off".
- :class:`PerfectForecaster`: the real future (the oracle).

Why not :func:`carbon.forecast.seasonal_hourly` (the monitor's fill-in forecaster)? It has the
better 24 h MAPE, but it is tuned for the level over a day ahead, not for ranking the hours of
one night: fed to this simulator on the job's grid (hourly means, repeated per step) it reached
only 73 % (DE 2020) and 35 % (GB 2020) of the oracle's saving, against 83 % / 97 % for the
daily-profile median below (measured 2026-11-30, ``examples/nightly.yaml``). Making the two one
forecaster is open work, to be judged on scheduling outcomes rather than MAPE.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["GridForecaster", "DailyProfileForecaster", "NoisyTraceForecaster", "PerfectForecaster"]


class GridForecaster(Protocol):
    """Forecast on the simulator's regular grid."""

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        """Values expected at indices ``now_index .. now_index + n - 1``; index ``now_index`` is observed."""
        ...


class PerfectForecaster:
    """Perfect foresight: the trace itself."""

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        out = values[now_index: now_index + n]
        if len(out) < n:
            out = np.concatenate((out, np.full(n - len(out), values[-1])))
        return out.copy()


class NoisyTraceForecaster:
    """The real future with autocorrelated multiplicative error of relative size ``error`` (e.g. 0.1)."""

    def __init__(self, *, error: float, rng: np.random.Generator, correlation: float = 0.9) -> None:
        if error < 0:
            raise ValueError("error must be >= 0")
        self.error = error
        self.rng = rng
        self.correlation = correlation

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        truth = PerfectForecaster().forecast(values, now_index, n)
        if self.error == 0 or n <= 1:
            return truth
        shocks = self.rng.standard_normal(n)
        noise = np.empty(n)
        noise[0] = 0.0  # the current value is observed, not forecast
        rho = self.correlation
        scale = np.sqrt(1.0 - rho * rho)
        for k in range(1, n):
            noise[k] = rho * noise[k - 1] + scale * shocks[k]
        return np.maximum(truth * (1.0 + self.error * noise), 0.0)


class DailyProfileForecaster:
    """Median of the same time of day over the past ``days`` days, anchored on the latest value."""

    def __init__(self, *, step_s: float, days: int = 14, blend_s: float = 3 * 3600.0) -> None:
        self.per_day = max(int(round(86400.0 / step_s)), 1)
        self.days = days
        self.blend_steps = max(blend_s / step_s, 1.0)

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        current = float(values[now_index])
        have = min(self.days, now_index // self.per_day)
        if have == 0:
            return np.full(n, current)  # no history yet: persistence
        ahead = now_index + np.arange(n)
        lags = np.arange(1, have + 1)[:, None] * self.per_day
        # for targets still in the future of the past day, step back whole days until observed
        idx = ahead[None, :] - lags
        idx = np.where(idx > now_index, idx - self.per_day * ((idx - now_index) // self.per_day + 1), idx)
        profile = np.median(values[np.clip(idx, 0, now_index)], axis=0)
        offset = current - profile[0]
        fade = np.clip(1.0 - np.arange(n) / self.blend_steps, 0.0, 1.0)
        return np.maximum(profile + offset * fade, 0.0)
