"""Forecasts the simulator could have had at each decision. Pure numpy; noise comes from a seed.

A :class:`GridForecaster` answers "standing at grid index ``i``, what do you expect for the next
``n`` values?" using only what it is allowed to know:

- :class:`DailyProfileForecaster` (the default): past data only, through the flow's own forecaster
  :func:`carbon.forecast.daily_profile` on the trace's grid (one forecaster for flow and simulator);
- :class:`IssuedForecaster`: an archive of forecasts as issued: at each decision the newest
  forecast issued at or before it (``simulate --forecast-file``);
- :class:`NoisyTraceForecaster`: the real future plus autocorrelated multiplicative noise of
  relative size ``error``, for "what if my provider's forecast is X % off";
- :class:`PerfectForecaster`: the real future (the oracle).

Index ``i`` itself is observed: every forecaster returns the true value there.
"""

from __future__ import annotations

from typing import Iterable, Protocol

import numpy as np

from carbon.forecast import FIT_DAYS, PROFILE_DAYS, daily_profile
from carbon.issued import IssuedForecasts

__all__ = ["GridForecaster", "DailyProfileForecaster", "IssuedForecaster", "NoisyTraceForecaster", "PerfectForecaster"]


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
    """The real future with autocorrelated multiplicative error of relative size ``error`` (e.g. 0.1).

    The error drawn at a decision depends on ``seed`` and the decision's index only, so a simulation
    gives the same answer however its jobs are ordered or spread over processes.
    """

    def __init__(self, *, error: float, seed: int = 0, correlation: float = 0.9) -> None:
        if error < 0:
            raise ValueError("error must be >= 0")
        self.error = error
        self.seed = seed
        self.correlation = correlation

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        truth = PerfectForecaster().forecast(values, now_index, n)
        if self.error == 0 or n <= 1:
            return truth
        shocks = np.random.default_rng([self.seed, now_index]).standard_normal(n)
        noise = np.empty(n)
        noise[0] = 0.0  # the current value is observed, not forecast
        rho = self.correlation
        scale = np.sqrt(1.0 - rho * rho)
        for k in range(1, n):
            noise[k] = rho * noise[k - 1] + scale * shocks[k]
        return np.maximum(truth * (1.0 + self.error * noise), 0.0)


class DailyProfileForecaster:
    """:func:`carbon.forecast.daily_profile` on the simulator's grid: past data only."""

    def __init__(self, *, step_s: float, days: int = PROFILE_DAYS, fit_days: int = FIT_DAYS) -> None:
        self.per_day = max(int(round(86400.0 / step_s)), 1)
        self.days = days
        self.fit_days = fit_days

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        start = max(now_index - (self.days + self.fit_days + 1) * self.per_day, 0)  # the history it can use
        ahead = daily_profile(values[start: now_index + 1], n - 1, per_day=self.per_day, days=self.days,
                              fit_days=self.fit_days)
        return np.concatenate(([float(values[now_index])], ahead))


class IssuedForecaster:
    """What the archive had forecast by each decision; the observed value at the decision itself.

    Each time ahead gets the newest issue (issued at or before the decision) that covers it. Where
    none does, the built-in forecaster fills in from past data (:class:`DailyProfileForecaster`),
    as the product's monitor does when a provider publishes no forecast.
    """

    def __init__(self, issued: IssuedForecasts, *, origin_s: float, step_s: float) -> None:
        self.issued = issued
        self.origin_s = origin_s
        self.step_s = step_s
        self.fallback = DailyProfileForecaster(step_s=step_s)

    def _issued(self, now_index: int, n: int) -> np.ndarray:
        at = self.origin_s + now_index * self.step_s
        got = self.issued.on_grid(at, at, self.step_s, n)
        return np.full(n, np.nan) if got is None else np.array(got, dtype=float)

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        out = self._issued(now_index, n)
        missing = np.isnan(out)
        if missing.any():
            out[missing] = self.fallback.forecast(values, now_index, n)[missing]
        out[0] = float(values[now_index])
        return out

    def coverage(self, asks: Iterable[tuple[int, int]]) -> float:
        """Share of the steps ahead the archive covered, over ``(decision index, steps incl. now)`` asks."""
        covered = total = 0
        for i, n in asks:
            covered += int(np.count_nonzero(~np.isnan(self._issued(i, n)[1:])))
            total += max(n - 1, 0)
        return covered / total if total else 0.0
