"""Replay a recorded trace as if it were live.

``replay="loop"`` (default) maps any ``now`` onto the trace by whole days, so a 3-day trace serves
every date with its own daily shape; ``replay="aligned"`` uses the trace's own timestamps (for
simulations over the trace's period). The trace's values serve as a perfect forecast, marked
``forecast=True`` so reports can say so.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import ClassVar, Literal

from carbon.errors import BadTrace, NoCoverage
from carbon.providers.base import Provider
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries
from carbon.trace_file import parse_trace_text, read_trace

__all__ = ["TraceProvider", "SAMPLE_TRACE", "load_sample_trace"]

#: The trace shipped in the package (MISO, Chase's replay trace; Apache-2.0, see carbon/data/ATTRIBUTION.md)
SAMPLE_TRACE = "carbon_hist_MISO_MASON_CITY.csv"


def load_sample_trace(column: str = "hist") -> IntensitySeries:
    text = resources.files("carbon").joinpath("data", SAMPLE_TRACE).read_text(encoding="utf-8")
    return parse_trace_text(
        text, column=column, where=f"<package>/{SAMPLE_TRACE}", kind="marginal", source=f"trace:{SAMPLE_TRACE}",
        zone="MISO_MASON_CITY",
    )


class TraceProvider(Provider):
    """Serves intensity from a trace file (or the packaged sample when ``path`` is None)."""

    name: ClassVar[str] = "trace"

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        column: str | None = None,
        zone: str = "",
        kind: IntensityKind | None = None,
        replay: Literal["loop", "aligned"] = "loop",
        series: IntensitySeries | None = None,
    ) -> None:
        if series is not None:
            self.series = series
        elif path is None:
            self.series = load_sample_trace(column or "hist")
        else:
            self.series = read_trace(path, column=column, kind=kind or "average", zone=zone)
        if not self.series:
            raise BadTrace(f"{path}: trace is empty")
        if kind is not None and self.series.kind != kind:
            self.series = IntensitySeries.of((replace(p, kind=kind) for p in self.series), zone=self.series.zone)
        self.zone = zone or self.series.zone
        self.replay = replay
        self.kind = self.series.kind  # type: ignore[misc]
        first = self.series.start
        self._day0 = datetime(first.year, first.month, first.day, tzinfo=timezone.utc) + timedelta(days=1)
        span_days = int((self.series.end - self._day0) / timedelta(days=1))
        self._span = timedelta(days=max(span_days, 1))

    def _offset(self, now: datetime) -> timedelta:
        """How far to move ``now`` back to land inside the trace."""
        if self.replay == "aligned":
            return timedelta(0)
        if self.series.start <= now < self.series.end:
            return timedelta(0)
        periods = (now - self._day0) // self._span
        return self._span * periods

    def _shift(self, point: IntensityPoint, by: timedelta, *, forecast: bool) -> IntensityPoint:
        return replace(point, start=point.start + by, forecast=forecast, source=point.source or "trace")

    def current(self, *, now: datetime) -> IntensityPoint:
        off = self._offset(now)
        p = self.series.at(now - off)
        if p is None:
            raise NoCoverage(f"trace has no value at {now.isoformat()} (covers {self.series.start} to {self.series.end})", provider=self.name)
        return self._shift(p, off, forecast=False)

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        """The trace's own future values; in loop mode they wrap around the trace's end."""
        out: list[IntensityPoint] = []
        t = now
        end = now + horizon
        while t < end:
            off = self._offset(t)
            local = t - off
            chunk = self.series.window(local, min(end - off, self.series.end))
            if not chunk:
                break
            out.extend(self._shift(p, off, forecast=True) for p in chunk)
            nxt = chunk.end + off
            if nxt <= t:
                break
            t = nxt
        if not out:
            raise NoCoverage(f"trace has no values after {now.isoformat()}", provider=self.name)
        return IntensitySeries.of(out, zone=self.zone)

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        off = self._offset(start)
        pts = self.series.window(start - off, end - off)
        return IntensitySeries.of((self._shift(p, off, forecast=False) for p in pts), zone=self.zone)
