"""Built-in intensity forecasts for providers that publish none: pure functions, series -> series.

Forecasters share one hourly grid (``hourly_means``):

* ``daily_profile`` (the default, :func:`daily_profile`; also the simulator's, on the trace's own
  grid): the mean of the same time of day over the last 28 days, plus today's deviation from it
  carried ahead by how much of a deviation persisted that far ahead over the last 28 days (fitted
  by least squares). What a start choice needs is the *ranking* of the hours ahead; this ranked the
  nights of the 2020 DE traces best of those tried (docs/scheduling.md), though ``seasonal`` has
  the lower 24 h MAPE.
* ``seasonal`` (:func:`seasonal_hourly`): a daily profile learned from the last
  ``days`` days (the value at the same hour, recent days weighted more by ``day_decay``), blended
  with the same hour one week earlier (``week_weight``, for the weekday/weekend shape), plus the
  current deviation from that profile, which fades by ``level_decay`` per hour ahead. In words:
  "today looks like the last few days, shifted by how far off we are right now".
* ``persistence`` (:func:`persistence_hourly`): the last value, repeated. Baseline.
* ``same_hour_yesterday`` (:func:`same_hour_yesterday_hourly`): the value 24 h earlier. Baseline.

Accuracy (``benchmarks/forecast.py``; 24 h-ahead MAPE on the Let's Wait Awhile 2020 traces) is
documented in ``docs/carbon.md``. Nothing here reads the clock: ``now`` is an argument.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Callable, Literal

import numpy as np

from carbon.errors import NoCoverage
from carbon.series import IntensityPoint, IntensitySeries

__all__ = [
    "FIT_DAYS",
    "FORECAST_HISTORY",
    "PROFILE_DAYS",
    "ForecasterName",
    "FORECASTERS",
    "daily_profile",
    "forecast_series",
    "hourly_means",
    "persistence_hourly",
    "same_hour_yesterday_hourly",
    "seasonal_hourly",
]

ForecasterName = Literal["daily_profile", "seasonal", "persistence", "same_hour_yesterday"]
_HOUR = timedelta(hours=1)
#: :func:`daily_profile`'s defaults: days of daily shape, and days of origins its persistence is fitted on
PROFILE_DAYS = 28
FIT_DAYS = 28
#: the history :func:`daily_profile` uses in full: a daily shape behind each of its fitted origins
FORECAST_HISTORY = timedelta(days=PROFILE_DAYS + FIT_DAYS)
_HOUR_S = 3600.0


def hourly_means(start_s: np.ndarray, duration_s: np.ndarray, values: np.ndarray, *, grid_start_s: float,
                 n_hours: int) -> np.ndarray:
    """Time-weighted mean per hour on ``[grid_start_s + i h, + 1 h)``; NaN where nothing covers an hour.

    ``start_s``/``duration_s`` are POSIX seconds and lengths of each sample (points may be 5 min,
    30 min or several hours long; a long point fills every hour it covers).
    """
    total = np.zeros(n_hours)
    weight = np.zeros(n_hours)
    rel_start = (np.asarray(start_s, dtype=float) - grid_start_s) / _HOUR_S
    rel_end = rel_start + np.asarray(duration_s, dtype=float) / _HOUR_S
    vals = np.asarray(values, dtype=float)
    short = (np.floor(rel_start) == np.floor(np.nextafter(rel_end, -np.inf)))
    # fast path: samples inside one hour
    idx = np.floor(rel_start[short]).astype(int)
    ok = (idx >= 0) & (idx < n_hours)
    w = (rel_end[short] - rel_start[short])[ok]
    np.add.at(total, idx[ok], vals[short][ok] * w)
    np.add.at(weight, idx[ok], w)
    for a, b, v in zip(rel_start[~short], rel_end[~short], vals[~short]):
        for h in range(max(int(np.floor(a)), 0), min(int(np.ceil(b)), n_hours)):
            overlap = min(b, h + 1) - max(a, h)
            if overlap > 0:
                total[h] += v * overlap
                weight[h] += overlap
    out = np.full(n_hours, np.nan)
    has = weight > 0
    out[has] = total[has] / weight[has]
    return out


def persistence_hourly(past: np.ndarray, steps: int) -> np.ndarray:
    """The last known hourly value for each of the next ``steps`` hours."""
    known = past[~np.isnan(past)]
    if known.size == 0:
        return np.full(steps, np.nan)
    return np.full(steps, known[-1])


def same_hour_yesterday_hourly(past: np.ndarray, steps: int) -> np.ndarray:
    """Hour ``t0 + h`` gets the value at ``t0 + h - 24`` (for ``h`` up to 24; beyond, whole days back)."""
    t0 = len(past) - 1
    out = np.full(steps, np.nan)
    for h in range(1, steps + 1):
        back = t0 + h - 24 * (1 + (h - 1) // 24)
        if 0 <= back <= t0:
            out[h - 1] = past[back]
    return out


def seasonal_hourly(
    past: np.ndarray,
    steps: int,
    *,
    days: int = 7,
    day_decay: float = 0.5,
    week_weight: float = 0.3,
    level_decay: float = 0.97,
) -> np.ndarray:
    """Seasonal-profile forecast for the ``steps`` hours after the last entry of ``past`` (hourly, NaN = gap).

    profile(T) = weighted mean of ``past[T - 24 k]`` (k = 1..days, weight ``day_decay**(k-1)``), blended
    ``(1 - week_weight) : week_weight`` with ``past[T - 168]`` when known;
    forecast(t0 + h) = profile(t0 + h) + ``level_decay**h`` * (last value - profile(last)).
    """
    past = np.asarray(past, dtype=float)
    t0 = len(past) - 1
    ks = np.arange(1, days + 1)
    weights = day_decay ** (ks - 1)

    def profile(targets: np.ndarray) -> np.ndarray:
        idx = targets[:, None] - 24 * ks[None, :]
        valid = (idx >= 0) & (idx <= t0)
        vals = np.where(valid, past[np.clip(idx, 0, t0)], np.nan)
        w = np.where(~np.isnan(vals), weights[None, :], 0.0)
        wsum = w.sum(axis=1)
        daily = np.where(wsum > 0, np.nansum(np.nan_to_num(vals) * w, axis=1) / np.where(wsum > 0, wsum, 1), np.nan)
        week_idx = targets - 168
        week = np.where((week_idx >= 0) & (week_idx <= t0), past[np.clip(week_idx, 0, t0)], np.nan)
        blend = np.where(np.isnan(week) | (week_weight <= 0), daily, (1 - week_weight) * daily + week_weight * week)
        return np.where(np.isnan(daily), week, blend)

    known = np.flatnonzero(~np.isnan(past))
    if known.size == 0:
        return np.full(steps, np.nan)
    last = known[-1]
    base = profile(np.array([last]))[0]
    anomaly = 0.0 if np.isnan(base) else past[last] - base
    horizon = np.arange(1, steps + 1)
    targets = t0 + horizon
    prof = profile(targets)
    prof = np.where(np.isnan(prof), past[last], prof)  # less than a day of history: persistence
    ahead = targets - last
    return np.maximum(prof + anomaly * level_decay ** ahead, 0.0)


def _same_time_means(past: np.ndarray, per_day: int, days: int) -> np.ndarray:
    """For every index o: the mean of ``past[o - d x per_day]``, d = 1..days (fewer where history is short; NaN skipped).

    Day-strided cumulative sums, so a fit over weeks of origins stays cheap; whole gap-free days (the
    usual case) take one cumulative sum over the days as rows.
    """
    n = len(past)
    known = ~np.isnan(past)
    if n % per_day == 0 and known.all():
        rows = past.reshape(-1, per_day)
        cum = np.vstack((np.zeros((1, per_day)), np.cumsum(rows, axis=0)))
        r = np.arange(len(rows))
        lo = np.maximum(r - days, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = (cum[r] - cum[lo]) / (r - lo)[:, None]
        means[0] = np.nan  # the first day has no day behind it
        return means.ravel()
    n_days = -(-n // per_day) + days + 1
    vals = np.zeros(n_days * per_day)
    have = np.zeros(n_days * per_day)
    off = (days + 1) * per_day  # leading zero days: lags before the start count as missing
    vals[off: off + n] = np.where(known, past, 0.0)
    have[off: off + n] = known
    sums = np.cumsum(vals.reshape(-1, per_day), axis=0).ravel()
    counts = np.cumsum(have.reshape(-1, per_day), axis=0).ravel()
    o = off + np.arange(n)
    total = sums[o - per_day] - sums[o - (days + 1) * per_day]
    count = counts[o - per_day] - counts[o - (days + 1) * per_day]
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _persistence(deviation: np.ndarray, steps: int, min_pairs: int) -> np.ndarray:
    """beta[k], k = 0..steps: the least-squares share of a deviation still there k steps later, in [0, 1].

    Every lead is fitted over the same origins (all but the last ``steps``), so the leads compare
    like with like. beta[0] = 1; a lead with fewer than ``min_pairs`` observed pairs keeps the whole
    deviation (1).
    """
    beta = np.ones(steps + 1)
    origins = len(deviation) - steps
    if steps < 1 or origins < 1:
        return beta
    ok = ~np.isnan(deviation)
    x = np.where(ok, deviation, 0.0)
    head = x[:origins]
    num = np.correlate(x, head, "valid")  # [k] = sum_i x[i] x[i + k], i < origins
    if ok.all():
        den = np.full(steps + 1, float(head @ head))
        pairs = np.full(steps + 1, origins)
    else:
        okf = ok.astype(float)
        den = np.correlate(okf, head * head, "valid")
        pairs = np.rint(np.correlate(okf, okf[:origins], "valid"))
    fit = (pairs >= min_pairs) & (den > 0)
    fit[0] = False
    beta[fit] = np.clip(num[fit] / den[fit], 0.0, 1.0)
    return beta


def daily_profile(past: np.ndarray, steps: int, *, per_day: int = 24, days: int = PROFILE_DAYS,
                  fit_days: int = FIT_DAYS) -> np.ndarray:
    """The ``steps`` values after the last entry of ``past`` (a regular grid, ``per_day`` values a day; NaN = gap).

    forecast(k) = profile(k) + beta(k) x (last value - profile(now)), where

    * profile(k) is the mean over d = 1..days of past[now + k - d x per_day] (stepping back further
      whole days while that is still in the future): the daily shape of the last ``days`` days;
    * beta(k) is how much of a deviation from that shape was still there k steps later, fitted by
      least squares over the last ``fit_days`` days of the same history (every time of day), and
      clipped to [0, 1]. Wind and imports keep a grid off its daily shape for hours to days, and
      how long differs by grid and season, so it is measured rather than assumed: beta stays near 1
      where deviations persist and falls where they fade.

    With less than a day of pairs at a lead, or ``fit_days=0``, the deviation is kept whole (beta = 1,
    today's level all night); with no full day of history: the last value (persistence).
    """
    past = np.asarray(past, dtype=float)
    now = len(past) - 1
    known = np.flatnonzero(~np.isnan(past))
    if known.size == 0:
        return np.full(steps, np.nan)
    current = float(past[known[-1]])
    have = min(days, now // per_day)
    if have == 0:
        return np.full(steps, current)
    ahead = now + np.arange(steps + 1)
    lags = np.arange(1, have + 1)[:, None] * per_day
    idx = ahead[None, :] - lags
    idx = np.where(idx > now, idx - per_day * ((idx - now) // per_day + 1), idx)
    sample = past[np.clip(idx, 0, now)]
    if np.isnan(sample).any():
        counts = (~np.isnan(sample)).sum(axis=0)
        profile = np.where(counts > 0, np.nansum(sample, axis=0) / np.maximum(counts, 1), np.nan)
    else:
        profile = sample.mean(axis=0)
    profile = np.where(np.isnan(profile), current, profile)
    beta = np.ones(steps + 1)
    if fit_days > 0:
        recent = past[max(now + 1 - (fit_days + days) * per_day, 0):]
        deviation = (recent - _same_time_means(recent, per_day, days))[-fit_days * per_day:]
        beta = _persistence(deviation, steps, min_pairs=per_day)
    return np.maximum(profile + beta * (current - profile[0]), 0.0)[1:]


FORECASTERS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "daily_profile": daily_profile,
    "seasonal": seasonal_hourly,
    "persistence": persistence_hourly,
    "same_hour_yesterday": same_hour_yesterday_hourly,
}


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def forecast_series(
    history: IntensitySeries,
    *,
    now: datetime,
    horizon: timedelta,
    method: ForecasterName = "daily_profile",
    lookback: timedelta = FORECAST_HISTORY,
) -> IntensitySeries:
    """Forecast hourly points covering ``(hour of now, now + horizon]`` from ``history`` up to ``now``.

    The points keep the history's ``kind``, are marked ``forecast`` and ``estimated``, and name the
    method in ``source`` (``forecast:daily_profile``). NoCoverage when the history has nothing before ``now``.
    """
    hour0 = _floor_hour(now)
    start = hour0 - lookback + _HOUR
    past_pts = [p for p in history.window(start, now + timedelta(microseconds=1)) if p.start <= now]
    if not past_pts:
        raise NoCoverage(f"no history before {now.isoformat()} to forecast from", provider=f"forecast:{method}")
    n_hours = int((hour0 - start) / _HOUR) + 1
    past = hourly_means(
        np.array([p.start.timestamp() for p in past_pts]),
        # clip each point at now: the future part of a point is not yet observed
        np.array([max(min(p.end, now) - p.start, timedelta(seconds=1)).total_seconds() for p in past_pts]),
        np.array([p.g_per_kwh for p in past_pts]),
        grid_start_s=start.timestamp(), n_hours=n_hours,
    )
    steps = max(1, int(-(-(now + horizon - hour0 - _HOUR) // _HOUR)))
    values = FORECASTERS[method](past, steps)
    kind = past_pts[-1].kind
    points = [
        IntensityPoint(start=hour0 + _HOUR * (i + 1), duration=_HOUR, g_per_kwh=float(v), kind=kind, estimated=True,
                       forecast=True, source=f"forecast:{method}")
        for i, v in enumerate(values) if not np.isnan(v)
    ]
    return IntensitySeries.of(points, zone=history.zone)
