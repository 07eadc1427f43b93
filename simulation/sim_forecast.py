"""Forecasts the simulator could have had at each decision. Pure numpy; noise comes from a seed.

A :class:`GridForecaster` answers "standing at grid index ``i``, what do you expect for the next
``n`` values?" using only what it is allowed to know:

- :class:`DailyProfileForecaster` (the default): past data only, through the flow's own forecaster
  :func:`carbon.forecasts.builtin.daily_profile` on the trace's grid (one forecaster for flow and simulator);
- :class:`IssuedForecaster`: an archive of forecasts as issued: at each decision the newest
  forecast issued at or before it (``simulate --forecast-file --forecast issued``);
- :class:`FusedForecaster` (``simulate --forecast-file``): the archive, the history forecast and the
  latest observation fused by :mod:`carbon.forecasts.fusion` on the nights before each decision (the
  do-no-harm gate, :mod:`simulation.sim_gate`, scores it beside each of its inputs);
- :class:`NoisyTraceForecaster`: the real future plus autocorrelated multiplicative noise of
  relative size ``error``, for "what if my provider's forecast is X % off";
- :class:`PerfectForecaster`: the real future (the oracle).

Index ``i`` itself is observed: every forecaster returns the true value there.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Protocol

import numpy as np

from carbon.forecasts.builtin import FIT_DAYS, PROFILE_DAYS, daily_profile
from carbon.forecasts.fusion import FusionFit, Hindcast, apply_fusion, fit_fusion
from carbon.forecasts.issued import IssuedForecasts
from carbon.forecasts.skill import ForecastSkill, Night, StartWindow, night_scores, start_gain_share

__all__ = ["GridForecaster", "DailyProfileForecaster", "FusedForecaster", "IssuedForecaster", "NoisyTraceForecaster",
           "PerfectForecaster", "forecast_candidates"]


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
    """:func:`carbon.forecasts.builtin.daily_profile` on the simulator's grid: past data only."""

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

    def as_issued(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        """The archive alone at indices ``now_index ..``, now included (what it had said for now); NaN where no issue covers."""
        at = self.origin_s + now_index * self.step_s
        got = self.issued.on_grid(at, at, self.step_s, n)
        return np.full(n, np.nan) if got is None else np.array(got, dtype=float)

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        out = self.as_issued(values, now_index, n)
        missing = np.isnan(out)
        if missing.any():
            out[missing] = self.fallback.forecast(values, now_index, n)[missing]
        out[0] = float(values[now_index])
        return out

    def coverage(self, asks: Iterable[tuple[int, int]]) -> float:
        """Share of the steps ahead the archive covered, over ``(decision index, steps incl. now)`` asks."""
        covered = total = 0
        for i, n in asks:
            covered += int(np.count_nonzero(~np.isnan(self.as_issued(np.empty(0), i, n)[1:])))
            total += max(n - 1, 0)
        return covered / total if total else 0.0


InputForecast = Callable[[np.ndarray, int, int], np.ndarray]


class FusedForecaster:
    """:func:`carbon.forecasts.fusion.apply_fusion` of several inputs, fitted at each decision on the nights before it.

    ``inputs`` maps a name to ``f(values, now_index, n)``: what that input said at ``now_index`` for
    indices ``now_index .. + n - 1`` (its own value for now included; NaN where it said nothing).
    At decision ``i`` the fit uses the same time of day on the last ``days`` days (origins
    ``i - d x per_day``), each input as it was at that origin, and the values observed up to ``i``
    only: the replay fills its record causally, and nothing said or seen after a decision reaches it.
    Memoised per origin, so a year's replay computes each origin's inputs once per process.
    """

    def __init__(self, inputs: Mapping[str, InputForecast], *, step_s: float, days: int = PROFILE_DAYS) -> None:
        self.inputs = dict(inputs)
        self.per_day = max(int(round(86400.0 / step_s)), 1)
        self.days = days
        self.horizon = self.per_day + 1  # every lead a decision asks for at one origin, a day ahead
        self._said: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        self._fused: dict[tuple[int, int], np.ndarray] = {}

    def _inputs_at(self, values: np.ndarray, j: int, n: int) -> dict[str, np.ndarray]:
        key = (j, n)
        if key not in self._said:
            self._said[key] = {name: np.asarray(f(values, j, n), dtype=float) for name, f in self.inputs.items()}
        return self._said[key]

    def hindcasts(self, values: np.ndarray, now_index: int, n: int) -> list[Hindcast]:
        """What each input said at the same time of day on the last ``days`` days, against what was seen by ``now_index``."""
        out = []
        for d in range(1, self.days + 1):
            j = now_index - d * self.per_day
            if j < 0:
                break
            seen = np.full(n, np.nan)
            upto = min(now_index + 1, len(values)) - j  # observed values only: nothing after the decision
            seen[: min(upto, n)] = values[j: j + min(upto, n)]
            out.append(Hindcast(inputs=self._inputs_at(values, j, n), observed=seen))
        return out

    def fit(self, values: np.ndarray, now_index: int, n: int) -> FusionFit:
        return fit_fusion(self.hindcasts(values, now_index, n), tuple(self.inputs), n)

    def _fused_at(self, values: np.ndarray, i: int, n: int) -> np.ndarray:
        key = (i, n)
        if key not in self._fused:
            self._fused[key] = apply_fusion(self.fit(values, i, n), self._inputs_at(values, i, n), float(values[i]))
        return self._fused[key]

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        if n > self.horizon:  # longer than a day ahead: fitted on its own, not memoised
            return apply_fusion(self.fit(values, now_index, n), self._inputs_at(values, now_index, n),
                                float(values[now_index]))
        return self._fused_at(values, now_index, self.horizon)[:n].copy()

    def _nights(self, values: np.ndarray, now_index: int, window: StartWindow) -> list[Night]:
        """The last ``days`` nights fully observed by ``now_index``, each with the forecast fused at its origin.

        Each night's forecast was fused from the nights before it (out of sample), as the product's
        archive keeps it.
        """
        n = max(self.horizon, window.end)
        nights = []
        for d in range(1, self.days + 1):
            j = now_index - d * self.per_day
            if j < 0:
                break
            if j + window.end - 1 > now_index:
                continue
            nights.append(Night(forecast=self._fused_at(values, j, n), observed=values[j: j + n]))
        return nights

    def start_record(self, values: np.ndarray, now_index: int, window: StartWindow) -> tuple[float | None, int]:
        """The fused forecast's start-gain share over its last ``days`` scored nights, and how many."""
        return start_gain_share(self._nights(values, now_index, window), window)

    def skill(self, values: np.ndarray, now_index: int, window: StartWindow, *, label: str = "fused") -> ForecastSkill:
        """The record the start decision at ``now_index`` stood on, and the weights it used over the window."""
        nights = self._nights(values, now_index, window)
        share, n = start_gain_share(nights, window)
        rho, mape, bias = night_scores(nights, window)
        w = self.fit(values, now_index, max(self.horizon, window.end)).weights[:, 1: window.end].mean(axis=1)
        return ForecastSkill(label=label, nights=n, start_gain_share=share, rank_correlation=rho, mape_pct=mape,
                             bias_g_per_kwh=bias, weights={k: float(x) for k, x in zip(self.inputs, w)})


def start_window(*, origin_s: float, reference_s: float, latest_start_s: float, run_s: float, step_s: float) -> StartWindow:
    """The start decision made at ``origin_s`` in grid steps: cron start, starts up to ``latest_start_s``, run length."""
    last = int(np.floor((latest_start_s - origin_s) / step_s + 1e-9))
    return StartWindow(reference=int(round((reference_s - origin_s) / step_s)), starts=tuple(range(max(last, 0) + 1)),
                       length=max(int(np.ceil(run_s / step_s - 1e-9)), 1))


class _InputAlone:
    """One input of a fused forecaster on its own: what it said, the fused forecast where it said nothing."""

    def __init__(self, fused: FusedForecaster, name: str) -> None:
        self.fused, self.name = fused, name

    def forecast(self, values: np.ndarray, now_index: int, n: int) -> np.ndarray:
        said = np.array(self.fused.inputs[self.name](values, now_index, n), dtype=float)
        missing = np.isnan(said)
        if missing.any():
            said[missing] = self.fused.forecast(values, now_index, n)[missing]
        said[0] = float(values[now_index])
        return said


def forecast_candidates(forecaster: GridForecaster, label: str = "forecast") -> dict[str, GridForecaster]:
    """The forecasts the do-no-harm gate scores (:mod:`scheduler.loop.gate`): the forecaster, and for a
    fused one each of its inputs alone, so the fusion is never trusted beyond the better of them."""
    if isinstance(forecaster, FusedForecaster):
        return {"fused": forecaster, **{name: _InputAlone(forecaster, name) for name in forecaster.inputs}}
    return {label: forecaster}
