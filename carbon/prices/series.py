"""Electricity prices as one shape for every price source: points that say when they became known.

A :class:`PricePoint` is the price of energy delivered over ``[start, start + duration)`` in
``currency`` per MWh (negative prices are real: a plan is paid to use energy then), and
``published_at``, the moment the market made it known (a day-ahead auction's result), or None for a
price whose publication is not known to matter (a fixed tariff). :meth:`PriceSeries.known_at`
keeps what had been published by a moment: nothing may plan on a price before its publication.
All times are timezone-aware UTC.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable

from carbon.series import TimeOrdered

__all__ = ["PricePoint", "PriceSeries"]


@dataclass(frozen=True, slots=True)
class PricePoint:
    """The price over ``[start, start + duration)`` in currency per MWh, known from ``published_at``."""

    start: datetime
    duration: timedelta
    per_mwh: float
    published_at: datetime | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            raise ValueError("PricePoint.start must be timezone-aware (UTC)")
        if self.duration <= timedelta(0):
            raise ValueError("PricePoint.duration must be positive")
        if not math.isfinite(self.per_mwh):
            raise ValueError(f"per_mwh must be a finite number, got {self.per_mwh!r}")

    @property
    def end(self) -> datetime:
        return self.start + self.duration

    def known_at(self, moment: datetime) -> bool:
        """Was this price published by ``moment``?"""
        return self.published_at is None or self.published_at <= moment


@dataclass(frozen=True)
class PriceSeries(TimeOrdered[PricePoint]):
    """Ordered, non-overlapping prices for one zone, in one currency (a later point at the same start wins)."""

    points: tuple[PricePoint, ...]
    zone: str = ""
    currency: str = ""
    _starts: tuple[datetime, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_start: dict[datetime, PricePoint] = {}
        for p in self.points:
            by_start[p.start] = p
        pts = [by_start[t] for t in sorted(by_start)]
        kept: list[PricePoint] = []
        for p in pts:
            if kept and p.start < kept[-1].end:  # an overlap: the earlier point ends where this one starts
                prev = kept[-1]
                kept[-1] = PricePoint(prev.start, p.start - prev.start, prev.per_mwh, prev.published_at, prev.source)
            kept.append(p)
        object.__setattr__(self, "points", tuple(kept))
        object.__setattr__(self, "_starts", tuple(p.start for p in kept))

    @classmethod
    def of(cls, points: Iterable[PricePoint], zone: str = "", currency: str = "") -> "PriceSeries":
        return cls(points=tuple(points), zone=zone, currency=currency)

    def _like(self, points: Iterable[PricePoint]) -> "PriceSeries":
        return PriceSeries(points=tuple(points), zone=self.zone, currency=self.currency)

    def known_at(self, moment: datetime) -> "PriceSeries":
        """The prices published by ``moment`` (a day-ahead price is unknown before its auction's result)."""
        return self._like(p for p in self.points if p.known_at(moment))

    def window(self, start: datetime, end: datetime) -> "PriceSeries":
        """Points that overlap ``[start, end)``."""
        return self._like(self._overlapping(start, end))

    def at(self, moment: datetime) -> PricePoint | None:
        """The point in force at ``moment`` (None in a gap, before the first or after the last)."""
        i = bisect.bisect_right(self._starts, moment) - 1
        if i < 0:
            return None
        p = self.points[i]
        return p if moment < p.end else None

    def mean_over(self, start: datetime, end: datetime) -> float | None:
        """Time-weighted mean price over the covered part of ``[start, end)`` (None: nothing covers it)."""
        total = covered = 0.0
        for p in self.window(start, end).points:
            dur = (min(p.end, end) - max(p.start, start)).total_seconds()
            if dur > 0:
                total += p.per_mwh * dur
                covered += dur
        return total / covered if covered > 0 else None

    def values(self) -> list[float]:
        return [p.per_mwh for p in self.points]
