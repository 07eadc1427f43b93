"""Normalised carbon-intensity records: one shape for every provider.

All times are timezone-aware UTC. ``kind`` says what the number means: an *average* intensity of
the electricity consumed (Electricity Maps, UK grid, traces) or a *marginal* one (WattTime MOER).
The two are never compared against the same threshold without saying so.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Generic, Iterable, Iterator, Literal, Protocol, TypeVar

__all__ = ["IntensityKind", "IntensityPoint", "IntensitySeries", "TimeOrdered", "as_utc"]

IntensityKind = Literal["average", "marginal"]


def as_utc(moment: datetime) -> datetime:
    """Return ``moment`` as an aware UTC datetime; naive values are taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


@dataclass(frozen=True, slots=True)
class IntensityPoint:
    """Grid intensity over ``[start, start + duration)`` in gCO2eq/kWh."""

    start: datetime
    duration: timedelta
    g_per_kwh: float
    kind: IntensityKind = "average"
    estimated: bool = False
    forecast: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            raise ValueError("IntensityPoint.start must be timezone-aware (UTC)")
        if self.duration <= timedelta(0):
            raise ValueError("IntensityPoint.duration must be positive")
        if not (self.g_per_kwh >= 0):  # also rejects NaN
            raise ValueError(f"g_per_kwh must be a non-negative number, got {self.g_per_kwh!r}")

    @property
    def end(self) -> datetime:
        return self.start + self.duration

    def to_json(self) -> dict[str, object]:
        return {
            "start": self.start.isoformat(),
            "duration_s": self.duration.total_seconds(),
            "g_per_kwh": self.g_per_kwh,
            "kind": self.kind,
            "estimated": self.estimated,
            "forecast": self.forecast,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "IntensityPoint":
        return cls(
            start=as_utc(datetime.fromisoformat(str(data["start"]))),
            duration=timedelta(seconds=float(data["duration_s"])),  # type: ignore[arg-type]
            g_per_kwh=float(data["g_per_kwh"]),  # type: ignore[arg-type]
            kind=data.get("kind", "average"),  # type: ignore[arg-type]
            estimated=bool(data.get("estimated", False)),
            forecast=bool(data.get("forecast", False)),
            source=str(data.get("source", "")),
        )


class _Span(Protocol):
    @property
    def start(self) -> datetime: ...

    @property
    def end(self) -> datetime: ...


P = TypeVar("P", bound=_Span)


class TimeOrdered(Generic[P]):
    """The sequence side of a series of points sorted by start, without overlaps (``points``, and ``_starts``
    for bisecting): shared by the intensity and the price series."""

    points: tuple[P, ...]
    _starts: tuple[datetime, ...]

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self) -> Iterator[P]:
        return iter(self.points)

    def __bool__(self) -> bool:
        return bool(self.points)

    @property
    def start(self) -> datetime:
        return self.points[0].start

    @property
    def end(self) -> datetime:
        return self.points[-1].end

    def _overlapping(self, start: datetime, end: datetime) -> list[P]:
        """Points that overlap ``[start, end)``."""
        lo = max(bisect.bisect_right(self._starts, start) - 1, 0)
        hi = bisect.bisect_left(self._starts, end)
        return [p for p in self.points[lo:hi] if p.end > start]


@dataclass(frozen=True)
class IntensitySeries(TimeOrdered[IntensityPoint]):
    """Ordered, non-overlapping intensity points for one zone.

    Gaps are allowed (real traces have them); ``at()`` answers with the point covering a moment,
    or the last point before it when the moment falls in a gap no longer than ``max_gap``.
    """

    points: tuple[IntensityPoint, ...]
    zone: str = ""
    _starts: tuple[datetime, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pts = tuple(sorted(self.points, key=lambda p: p.start))
        deduped: list[IntensityPoint] = []
        for p in pts:
            if deduped and p.start < deduped[-1].end:
                prev = deduped[-1]
                if p.start == prev.start:
                    # a later source (e.g. an actual replacing a forecast) wins
                    deduped[-1] = p
                    continue
                deduped[-1] = replace(prev, duration=p.start - prev.start)
            deduped.append(p)
        object.__setattr__(self, "points", tuple(deduped))
        object.__setattr__(self, "_starts", tuple(p.start for p in deduped))

    @classmethod
    def of(cls, points: Iterable[IntensityPoint], zone: str = "") -> "IntensitySeries":
        return cls(points=tuple(points), zone=zone)

    @property
    def kind(self) -> IntensityKind:
        return self.points[0].kind if self.points else "average"

    def at(self, moment: datetime, *, max_gap: timedelta = timedelta(hours=3)) -> IntensityPoint | None:
        """The point in force at ``moment`` (or the latest one before it, within ``max_gap``)."""
        i = bisect.bisect_right(self._starts, moment) - 1
        if i < 0:
            return None
        p = self.points[i]
        if moment < p.end or moment - p.end <= max_gap:
            return p
        return None

    def window(self, start: datetime, end: datetime) -> "IntensitySeries":
        """Points that overlap ``[start, end)``."""
        return IntensitySeries(points=tuple(self._overlapping(start, end)), zone=self.zone)

    def mean_over(self, start: datetime, end: datetime) -> float | None:
        """Time-weighted mean intensity over ``[start, end)``; gaps carry the last value forward."""
        if end <= start:
            p = self.at(start)
            return p.g_per_kwh if p else None
        total = 0.0
        covered = 0.0
        pts = self.window(start, end).points
        if not pts:
            p = self.at(start)
            return p.g_per_kwh if p else None
        for i, p in enumerate(pts):
            seg_start = max(p.start, start)
            seg_end = min(pts[i + 1].start if i + 1 < len(pts) else max(p.end, end), end)
            if i == 0 and p.start > start:
                seg_start = start  # back-fill the head with the first known value
            dur = (seg_end - seg_start).total_seconds()
            if dur > 0:
                total += p.g_per_kwh * dur
                covered += dur
        return total / covered if covered > 0 else None

    def values(self) -> list[float]:
        return [p.g_per_kwh for p in self.points]

    def to_json(self) -> list[dict[str, object]]:
        return [p.to_json() for p in self.points]
