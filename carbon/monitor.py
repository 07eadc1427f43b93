"""Read the grid signal with failover: try each source in order, say which one served and why.

``CarbonMonitor.read(now)`` returns a :class:`Reading`: the series (recent history + forecast where
the source has one), the point in force, the source that served it, and one line per source that
failed before it. Time is passed in; nothing here reads the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Sequence

from carbon.errors import CarbonError, NoCoverage
from carbon.providers.base import Provider
from carbon.series import IntensityPoint, IntensitySeries

__all__ = ["SourceSpec", "Reading", "CarbonMonitor", "AllSourcesFailed"]


class AllSourcesFailed(CarbonError):
    """Every source in the failover chain failed."""


@dataclass(frozen=True)
class SourceSpec:
    """A named way to build a provider (built lazily, so a broken fallback costs nothing until needed)."""

    label: str
    build: Callable[[], Provider]


@dataclass(frozen=True)
class Reading:
    series: IntensitySeries
    current: IntensityPoint
    source: str
    failures: tuple[str, ...] = ()
    stale: bool = False
    has_forecast: bool = False

    @property
    def reason(self) -> str:
        if not self.failures:
            return f"intensity from {self.source}"
        return f"intensity from {self.source} after: " + "; ".join(self.failures)


@dataclass
class CarbonMonitor:
    sources: Sequence[SourceSpec]
    forecast_horizon: timedelta = timedelta(hours=24)
    history_window: timedelta = timedelta(hours=6)
    _providers: dict[str, Provider] = field(default_factory=dict, init=False, repr=False)

    def _provider(self, spec: SourceSpec) -> Provider:
        if spec.label not in self._providers:
            self._providers[spec.label] = spec.build()
        return self._providers[spec.label]

    def read(self, now: datetime) -> Reading:
        failures: list[str] = []
        for spec in self.sources:
            try:
                provider = self._provider(spec)
                current = provider.current(now=now)
                points = [current]
                has_forecast = False
                try:
                    points.extend(provider.forecast(now=now, horizon=self.forecast_horizon))
                    has_forecast = True
                except NoCoverage:
                    pass
                try:
                    points.extend(provider.history(start=now - self.history_window, end=now))
                except NoCoverage:
                    pass
                series = IntensitySeries.of(points, zone=provider.zone)
                # the measured current value wins over a forecast for the same slot
                series = IntensitySeries.of([p for p in series if p.start != current.start] + [current], zone=provider.zone)
                return Reading(series=series, current=current, source=spec.label, failures=tuple(failures),
                               has_forecast=has_forecast)
            except CarbonError as exc:
                failures.append(f"{spec.label}: {exc}")
            except (ValueError, OSError, TypeError) as exc:
                failures.append(f"{spec.label}: {type(exc).__name__}: {exc}")
        raise AllSourcesFailed("no carbon source answered: " + "; ".join(failures))

    def close(self) -> None:
        for p in self._providers.values():
            p.close()
        self._providers.clear()
