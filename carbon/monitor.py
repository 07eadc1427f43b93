"""Read the grid signal with failover: try each source in order, say which one served and why.

``CarbonMonitor.read(now)`` returns a :class:`Reading`: the series (recent history + forecast), the
point in force, the source that served it, and one line per source that failed before it. Time is
passed in; nothing here reads the clock.

What happens on each ``read(now)``, per source in the chain (e.g. electricitymaps -> ukgrid -> trace
-> static):

1. A source that failed recently is *resting* (1 min, doubling to 15 min, or the provider's
   ``Retry-After``), so a free tier is not hammered during an outage; it counts as a failure.
2. Otherwise it is asked for the current value, its forecast (not again for ``forecast_retry``
   after it had none) and, on a cold cache or after a gap, its history. A missing forecast or
   history is a *note*, not a failure; the built-in forecaster (:mod:`carbon.forecasts.builtin`, learned
   from the cached history) fills a missing forecast.
3. A success is written to the on-disk cache (one JSON file per source and options hash, surviving
   restarts; see :func:`carbon.cache.cache_key`).
4. An answer whose data is too old is a failure too (:class:`~carbon.errors.StaleData`): the newest
   value's interval ended more than ``max_staleness`` ago, or its forecast covers nothing ahead
   (:func:`carbon.staleness.stale_reason`: judged on the data's timestamps, not on when it was
   fetched). It is not cached. A cached forecast also goes stale once it has lost more than
   ``max_staleness`` of the horizon since it was fetched.
5. A failure is recorded (``"label: reason"``). If the same source has a cached answer whose data
   is still within ``max_staleness`` (same rule), that is served, marked ``stale=True`` - the same
   signal, slightly old, beats switching to a different kind of signal. Otherwise the next source
   is tried.

When every source fails and no cache is fresh enough, :class:`AllSourcesFailed` lists every reason.
A rested source is tried again by itself, so the monitor recovers without help.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from carbon.cache import CacheEntry, SignalCache, cache_key
from carbon.errors import CarbonError, RateLimited, StaleData
import numpy as np

from carbon.forecasts.archive import ForecastArchive
from carbon.forecasts.builtin import FORECAST_HISTORY, PROFILE_DAYS, ForecasterName, forecast_series
from carbon.forecasts.fusion import apply_fusion, fit_fusion
from carbon.providers.base import Provider
from carbon.series import IntensityPoint, IntensitySeries
from carbon.staleness import stale_reason

__all__ = ["SourceSpec", "Reading", "CarbonMonitor", "AllSourcesFailed", "finer_than_hourly"]

_HOUR = timedelta(hours=1)
_HISTORY = "forecast:daily_profile"
_FUSED = "forecast:fused"


def finer_than_hourly(shape: Sequence[IntensityPoint], sampled: np.ndarray, hourly: Sequence[IntensityPoint],
                      fused: np.ndarray, *, origin: datetime, now: datetime) -> tuple[IntensityPoint, ...] | None:
    """The fused forecast at the resolution of ``shape`` (the forecast the fusion's first input made) when
    that is finer than an hour; None when it is not.

    The fusion learns on an hourly grid (its record is hours), and read alone it would turn a 5-min
    forecast into one value an hour and leave nothing between now and the next full hour. Instead each
    point of ``shape`` moves by its hour's correction (the fused value less what the fusion read of
    ``shape`` for that hour, ``sampled``), so the forecast keeps its shape within the hour and its
    points before the next one; past the end of ``shape`` the hourly fused points follow.
    """
    ahead = [p for p in shape if p.end > now]
    if not ahead or min(p.duration for p in ahead) >= _HOUR:
        return None
    out: list[IntensityPoint] = []
    for p in ahead:
        k = max(int((p.start - origin) / _HOUR), 0)
        if k >= len(fused) or np.isnan(fused[k]):
            continue
        value = p.g_per_kwh + float(fused[k] - sampled[k]) if not np.isnan(sampled[k]) else float(fused[k])
        out.append(IntensityPoint(start=p.start, duration=p.duration, g_per_kwh=max(value, 0.0), kind=p.kind,
                                  estimated=True, forecast=True, source=_FUSED))
    if not out:
        return None
    end = max(p.end for p in out)
    return tuple(out) + tuple(p for p in hourly if p.start >= end)


class AllSourcesFailed(CarbonError):
    """Every source in the failover chain failed, and no cached value is within the staleness limit."""


@dataclass(frozen=True)
class SourceSpec:
    """A named way to build a provider (built lazily, so a broken fallback costs nothing until needed).

    ``options`` are what decides the source's data (provider, zone, base URL, trace path and
    column, ...): a short hash of them is part of the cache key (:func:`carbon.cache.cache_key`),
    so a source with other options never reads this one's cached values. Secrets are ignored.
    """

    label: str
    build: Callable[[], Provider]
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cache_key(self) -> str:
        return cache_key(self.label, self.options)


@dataclass(frozen=True)
class Reading:
    """One answer of the monitor, with its provenance.

    ``served_from`` is ``live`` (fetched now) or ``cache`` (the source's last good answer, from
    ``fetched_at``, read from the cache under the source's label and options hash); ``stale`` is
    true when a cached answer was served because the source failed (``served_from == "cache"``
    and ``stale`` false: served from cache on purpose, within ``refresh_after``). Report both, so
    a run on cached numbers says so.
    ``forecast_by`` names who made the forecast: ``provider``, ``forecast:daily_profile`` (built in), or
    empty when there is none. ``failures`` are the sources that failed before this one (and why);
    ``notes`` are non-fatal gaps (no forecast, no history).
    """

    series: IntensitySeries
    current: IntensityPoint
    source: str
    failures: tuple[str, ...] = ()
    stale: bool = False
    has_forecast: bool = False
    served_from: Literal["live", "cache"] = "live"
    fetched_at: datetime | None = None
    forecast_by: str = ""
    notes: tuple[str, ...] = ()
    #: the forecasts a fused one was made of, by label (the provider's, ``forecast:daily_profile``),
    #: on a live read only: the do-no-harm gate may plan on one of them instead
    alternatives: Mapping[str, IntensitySeries] = field(default_factory=dict)

    @property
    def degraded(self) -> bool:
        """True when the answer is not a fresh one from the first source."""
        return self.stale or bool(self.failures)

    @property
    def reason(self) -> str:
        served = f"intensity from {self.source}"
        if self.served_from == "cache" and self.fetched_at is not None:
            served += f" (cached at {self.fetched_at:%Y-%m-%d %H:%M} UTC{', stale' if self.stale else ''})"
        if not self.failures:
            return served
        return f"{served} after: " + "; ".join(self.failures)


@dataclass
class _Rest:
    until: datetime
    streak: int
    why: str


@dataclass
class CarbonMonitor:
    """Failover over ``sources`` with an on-disk cache, a staleness limit and a built-in forecaster.

    ``cache_dir=None`` keeps the cache in memory (lost on restart). ``refresh_after`` > 0 serves a
    source's cached answer without asking it again while the answer is younger than that (for
    tight free tiers). ``forecaster=None`` disables the built-in forecast.
    """

    sources: Sequence[SourceSpec]
    forecast_horizon: timedelta = timedelta(hours=24)
    history_window: timedelta = timedelta(hours=6)
    cache_dir: str | Path | None = None
    max_staleness: timedelta = timedelta(hours=1)
    refresh_after: timedelta = timedelta(0)
    forecaster: ForecasterName | None = "daily_profile"
    learn_window: timedelta = timedelta(days=7)
    rest_base: timedelta = timedelta(minutes=1)
    rest_max: timedelta = timedelta(minutes=15)
    forecast_retry: timedelta = timedelta(hours=1)
    archive: ForecastArchive | None = None  # keeps every forecast and fuses them on its record (None: provider's as is)
    fusion_days: int = PROFILE_DAYS
    _providers: dict[str, Provider] = field(default_factory=dict, init=False, repr=False)
    _rest: dict[str, _Rest] = field(default_factory=dict, init=False, repr=False)
    _no_forecast: dict[str, tuple[datetime, CarbonError]] = field(default_factory=dict, init=False, repr=False)
    _cache: SignalCache = field(init=False, repr=False)
    _inputs: dict[str, IntensitySeries] = field(default_factory=dict, init=False, repr=False)  # the last fusion's inputs
    # the poller's thread and a run's control loop may read at the same time
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self._cache = SignalCache(self.cache_dir, keep_observed=max(self.learn_window, FORECAST_HISTORY))

    def _provider(self, spec: SourceSpec) -> Provider:
        if spec.label not in self._providers:
            self._providers[spec.label] = spec.build()
        return self._providers[spec.label]

    # -- one source ----------------------------------------------------------------------------
    def _fetch(self, spec: SourceSpec, now: datetime, cached: CacheEntry | None) -> tuple[CacheEntry, list[str]]:
        """Ask one source; returns the new cache entry and notes. Raises CarbonError on failure."""
        notes: list[str] = []
        provider = self._provider(spec)
        current = provider.current(now=now)
        old = stale_reason(current, (), now, issued=now, max_staleness=self.max_staleness, horizon=self.forecast_horizon)
        if old is not None:  # no need to ask for its history or forecast
            raise StaleData(old)
        # history: learn_window on a cold cache; later only when the cached observations have a gap
        # longer than history_window (each read appends its current point, so polling fills the rest)
        observed: list[IntensityPoint] = list(cached.observed) if cached is not None else []
        last_seen = observed[-1].end if observed else None
        if last_seen is None or now - last_seen > self.history_window:
            since = now - self.learn_window if last_seen is None else max(last_seen, now - self.learn_window)
            try:
                observed.extend(p for p in provider.history(start=since, end=now) if not p.forecast)
            except CarbonError as exc:
                notes.append(f"{spec.label}: no history ({exc})")
        observed.append(current)
        observed_series = IntensitySeries.of(observed, zone=provider.zone)
        forecast: tuple[IntensityPoint, ...] = ()
        forecast_by = ""
        try:
            skip = self._no_forecast.get(spec.label)
            if skip is not None and now < skip[0]:
                raise skip[1]
            forecast = tuple(provider.forecast(now=now, horizon=self.forecast_horizon))
            forecast_by = "provider"
            self._no_forecast.pop(spec.label, None)
        except CarbonError as exc:
            if skip is None or now >= skip[0]:  # don't ask again for an hour (a paid-only route costs a request)
                self._no_forecast[spec.label] = (now + self.forecast_retry, exc)
            if self.forecaster is None:
                notes.append(f"{spec.label}: no forecast ({exc})")
            else:
                try:
                    forecast = tuple(forecast_series(observed_series, now=now, horizon=self.forecast_horizon,
                                                     method=self.forecaster))
                    forecast_by = f"forecast:{self.forecaster}"
                    notes.append(f"{spec.label}: no forecast ({exc}); built-in {self.forecaster} forecast used")
                except CarbonError as exc2:
                    notes.append(f"{spec.label}: no forecast ({exc}); built-in forecaster: {exc2}")
        if self.archive is not None:
            forecast, forecast_by, note = self._fused(spec.label, provider.zone, now, current, observed_series, forecast,
                                                      forecast_by)
            notes.append(note)
        entry = CacheEntry(label=spec.label, fetched_at=now, zone=provider.zone, current=current, forecast=forecast,
                           forecast_by=forecast_by, observed=tuple(observed_series))
        stale = self._stale_reason(entry, now)
        if stale is not None:  # a quick answer with old data is no answer; keep the cache as it was
            raise StaleData(stale)  # the failure line names the source
        return self._cache.save(entry, key=spec.cache_key), notes

    def _fused(self, label: str, zone: str, now: datetime, current: IntensityPoint, observed: IntensitySeries,
               forecast: tuple[IntensityPoint, ...], forecast_by: str) -> tuple[tuple[IntensityPoint, ...], str, str]:
        """Archive what was received and computed, and fuse it (:mod:`carbon.forecasts.fusion`) on the archive's record.

        Inputs: the provider's forecast when it sent one, and the built-in history forecast; the
        latest observation enters as each input's error now. Returns the fused points, who made
        them, and one sentence naming the forecast and its record.
        """
        assert self.archive is not None
        self.archive.observe(zone=zone, points=observed)
        self._inputs = {}
        inputs: list[str] = []
        if forecast_by == "provider" and forecast:
            self.archive.record(provider=label, zone=zone, issued_at=now, points=forecast)
            inputs.append(label)
            self._inputs[label] = IntensitySeries.of((current, *forecast), zone=zone)
        history: tuple[IntensityPoint, ...] | IntensitySeries
        if forecast_by == _HISTORY:  # the built-in forecaster made it already, from the same history and horizon
            history = forecast
        else:
            try:
                history = forecast_series(observed, now=now, horizon=self.forecast_horizon, method="daily_profile")
            except CarbonError:
                history = IntensitySeries.of([], zone=zone)
        if len(history):
            self.archive.record(provider=_HISTORY, zone=zone, issued_at=now, points=history)
            inputs.append(_HISTORY)
            self._inputs[_HISTORY] = IntensitySeries.of((current, *history), zone=zone)
        if not inputs:
            return forecast, forecast_by, "no forecast to fuse"
        origin = now.replace(minute=0, second=0, microsecond=0)
        n = int(self.forecast_horizon / _HOUR) + 1
        said = {p: self.archive.said(provider=p, zone=zone, issued_by=now, at=origin, step=_HOUR, n=n) for p in inputs}
        record = self.archive.hindcasts(providers=inputs, zone=zone, now=now, origin=origin, step=_HOUR, n=n,
                                        days=self.fusion_days)
        fit = fit_fusion(record, inputs, n)
        fused = apply_fusion(fit, said, current.g_per_kwh)
        hourly = tuple(IntensityPoint(start=origin + k * _HOUR, duration=_HOUR, g_per_kwh=float(v), kind=current.kind,
                                      estimated=True, forecast=True, source=_FUSED)
                       for k, v in enumerate(fused) if k > 0 and not np.isnan(v))
        shape = forecast if inputs[0] == label else history
        points = finer_than_hourly(tuple(shape), said[inputs[0]], hourly, fused, origin=origin, now=now) or hourly
        self.archive.record(provider=_FUSED, zone=zone, issued_at=now, points=points)
        # each input's weight over the leads ahead (lead 0 is now, known); a horizon under an hour has only lead 0
        weights = (fit.weights[:, 1:] if fit.weights.shape[1] > 1 else fit.weights).mean(axis=1)
        mix = ", ".join(f"{p} {w:.0%}" for p, w in sorted(zip(inputs, weights), key=lambda pw: -pw[1]))
        return points, _FUSED, (f"{_FUSED} forecast ({mix} of the weight), corrected and weighted on "
                                f"{len(record)} past days of the archive")

    def _stale_reason(self, entry: CacheEntry, now: datetime) -> str | None:
        return stale_reason(entry.current, entry.forecast, now, issued=entry.fetched_at, max_staleness=self.max_staleness,
                            horizon=self.forecast_horizon)

    def _reading(self, entry: CacheEntry, now: datetime, *, served_from: Literal["live", "cache"], stale: bool,
                 failures: list[str], notes: list[str]) -> Reading:
        series = entry.series()
        current = entry.current
        if served_from == "cache":
            # the cached forecast (or last value) for *now*, not the value from fetch time
            current = series.at(now, max_gap=self.max_staleness) or entry.current
        return Reading(series=series, current=current, source=entry.label, failures=tuple(failures), stale=stale,
                       has_forecast=bool(entry.forecast), served_from=served_from, fetched_at=entry.fetched_at,
                       forecast_by=entry.forecast_by, notes=tuple(notes))

    def _rest_after(self, label: str, now: datetime, exc: CarbonError | Exception) -> None:
        streak = self._rest[label].streak + 1 if label in self._rest else 0
        pause = min(self.rest_base * (2**streak), self.rest_max)
        if isinstance(exc, RateLimited) and exc.retry_after_s is not None:
            pause = max(pause, timedelta(seconds=exc.retry_after_s))
        self._rest[label] = _Rest(until=now + pause, streak=streak, why=str(exc))

    # -- the chain -----------------------------------------------------------------------------
    def read(self, now: datetime) -> Reading:
        """The signal at ``now`` from the first source that answers (or its fresh-enough cache)."""
        with self._lock:
            return self._read(now)

    def _read(self, now: datetime) -> Reading:
        failures: list[str] = []
        for spec in self.sources:
            cached = self._cache.load(spec.cache_key)
            rest = self._rest.get(spec.label)
            if rest is not None and now < rest.until:
                failures.append(f"{spec.label}: resting until {rest.until:%H:%M:%S} UTC after: {rest.why}")
            elif cached is not None and self.refresh_after > timedelta(0) and timedelta(0) <= cached.age(now) < self.refresh_after:
                return self._reading(cached, now, served_from="cache", stale=False, failures=failures, notes=[])
            else:
                try:
                    entry, notes = self._fetch(spec, now, cached)
                except CarbonError as exc:
                    failures.append(f"{spec.label}: {exc}")
                    self._rest_after(spec.label, now, exc)
                except (ValueError, OSError, TypeError, KeyError) as exc:  # a provider bug or bad option: fail over
                    failures.append(f"{spec.label}: {type(exc).__name__}: {exc}")
                    self._rest_after(spec.label, now, exc)
                else:
                    self._rest.pop(spec.label, None)
                    reading = self._reading(entry, now, served_from="live", stale=False, failures=failures, notes=notes)
                    if entry.forecast_by == _FUSED and self._inputs:
                        reading = replace(reading, alternatives=dict(self._inputs))
                    return reading
            if cached is not None:
                too_old = self._stale_reason(cached, now)
                if too_old is None:
                    return self._reading(cached, now, served_from="cache", stale=True, failures=failures, notes=[])
                failures.append(f"{spec.label}: cached answer (fetched {cached.fetched_at:%Y-%m-%d %H:%M} UTC): {too_old}")
        raise AllSourcesFailed("no carbon source answered: " + "; ".join(failures))

    def close(self) -> None:
        for p in self._providers.values():
            p.close()
        self._providers.clear()
        if self.archive is not None:
            self.archive.close()


