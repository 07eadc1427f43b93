"""Read prices through a chain of sources: failover, and no asking twice for what is already known.

A published day-ahead price never changes, so :class:`PriceReader` keeps what it fetched and asks a
source again only for the part of ``[start, end)`` it does not hold yet that may have been
published by now (:meth:`carbon.prices.day_ahead.DayAheadMarket.known_until`). It tries the sources
in order; one that fails (any :class:`carbon.errors.CarbonError`) is noted and the next is asked.
When every source fails, what it holds is served if it covers anything of the window; else the last
error is raised (the run loop then keeps its last reading, as it does for carbon).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Sequence

from carbon.errors import CarbonError, NoCoverage
from carbon.prices.base import PriceSource
from carbon.prices.series import PriceSeries

__all__ = ["PriceReader", "PriceReading"]


@dataclass(frozen=True)
class PriceReading:
    """The prices of a window published by a moment, the source that gave them, and the sources that failed."""

    series: PriceSeries
    source: str
    failures: tuple[str, ...] = ()


@dataclass
class _Held:
    series: PriceSeries
    source: str


@dataclass
class PriceReader:
    """Failover over ``sources`` (label, builder); each source is built on first use and closed by :meth:`close`."""

    sources: Sequence[tuple[str, Callable[[], PriceSource]]]
    _built: dict[str, PriceSource] = field(default_factory=dict)
    _held: _Held | None = None

    def _source(self, label: str, build: Callable[[], PriceSource]) -> PriceSource:
        if label not in self._built:
            self._built[label] = build()
        return self._built[label]

    def _covered(self, start: datetime, end: datetime, now: datetime) -> bool:
        """Does what is held cover ``[start, end)`` as far as anything of it can be published by ``now``?"""
        if self._held is None or not self._held.series:
            return False
        held = self._held.series
        market = self._built[self._held.source].market if self._held.source in self._built else None
        want_end = min(end, market.known_until(now)) if market is not None else end
        return held.start <= start and held.end >= want_end

    def read(self, *, start: datetime, end: datetime, now: datetime) -> PriceReading:
        """The prices of ``[start, end)`` published by ``now`` (see the module docstring)."""
        if self._covered(start, end, now):
            assert self._held is not None
            return PriceReading(self._held.series.window(start, end).known_at(now), self._held.source)
        failures: list[str] = []
        last: CarbonError | None = None
        for label, build in self.sources:
            try:
                series = self._source(label, build).prices(start=start, end=end, now=now)
            except CarbonError as exc:
                failures.append(f"{label}: {exc}")
                last = exc
                continue
            self._held = _Held(series, label)
            return PriceReading(series, label, tuple(failures))
        if self._held is not None:
            kept = self._held.series.window(start, end).known_at(now)
            if kept:
                return PriceReading(kept, self._held.source, tuple(failures))
        raise last if last is not None else NoCoverage("no price source configured", provider="prices")

    def close(self) -> None:
        for source in self._built.values():
            source.close()
        self._built.clear()
