"""Replay a recorded trace as if it were live.

``replay="loop"`` (default) maps any ``now`` onto the trace by whole days, so a 3-day trace serves
every date with its own daily shape; ``replay="aligned"`` uses the trace's own timestamps (for
simulations over the trace's period). The trace's values serve as a perfect forecast, marked
``forecast=True`` so reports can say so.

Which trace: ``path`` when given; else the trace of ``zone``: ``<ZONE>.csv`` in ``trace_dir``, in
each folder of ``$GRIDSHIFT_TRACES`` (``os.pathsep``-separated), in ``$GRIDSHIFT_HOME/traces``, or
one shipped in the package (:data:`PACKAGED_TRACES`); a zone with none of these is refused
(:class:`carbon.errors.UnknownZone`, naming the zones there are). No zone and no path: the packaged
MISO sample. A trace is read through :mod:`carbon.trace_file`, with its checks; within a gap it
serves nothing (the monitor fails over), rather than a value carried across.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import ClassVar, Literal

from carbon.errors import BadTrace, NoCoverage, UnknownZone
from carbon.paths import gridshift_home
from carbon.providers.base import Provider
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries
from carbon.trace_file import TraceCheck, parse_trace_text, read_trace

__all__ = ["PACKAGED_TRACES", "SAMPLE_TRACE", "TRACES_ENV", "TraceProvider", "ZoneTrace", "find_zone_trace",
           "load_sample_trace", "read_zone_trace", "trace_dirs", "zone_traces"]

#: The trace shipped in the package (MISO, Chase's replay trace; Apache-2.0, see carbon/data/ATTRIBUTION.md)
SAMPLE_TRACE = "carbon_hist_MISO_MASON_CITY.csv"
#: folders of ``<ZONE>.csv`` traces, ``os.pathsep``-separated, searched before ``$GRIDSHIFT_HOME/traces``
TRACES_ENV = "GRIDSHIFT_TRACES"


@dataclass(frozen=True)
class ZoneTrace:
    """Where a zone's trace is: a file in the package (``packaged``) or on disk; its value column and kind."""

    zone: str
    file: str
    packaged: bool = False
    column: str | None = None
    kind: IntensityKind = "average"


#: the traces shipped in the package, by zone (sources and licences in carbon/data/ATTRIBUTION.md)
PACKAGED_TRACES = {
    "MISO_MASON_CITY": ZoneTrace("MISO_MASON_CITY", SAMPLE_TRACE, True, "hist", "marginal"),
    "ERCO": ZoneTrace("ERCO", "traces/ERCO.csv", True),
    "ISNE": ZoneTrace("ISNE", "traces/ISNE.csv", True),
    "PJM": ZoneTrace("PJM", "traces/PJM.csv", True),
}


def load_sample_trace(column: str = "hist") -> IntensitySeries:
    return read_zone_trace(PACKAGED_TRACES["MISO_MASON_CITY"], column)


def read_zone_trace(found: ZoneTrace, column: str | None = None, check: TraceCheck | None = None) -> IntensitySeries:
    """The trace :func:`find_zone_trace` found, read with its checks (``column``: the value column, if not its own)."""
    if not found.packaged:
        return read_trace(found.file, column=column or found.column, kind=found.kind, zone=found.zone, check=check)
    text = resources.files("carbon").joinpath("data", found.file).read_text(encoding="utf-8")
    return parse_trace_text(text, column=column or found.column, where=f"<package>/{found.file}", kind=found.kind,
                            source=f"trace:{Path(found.file).name}", zone=found.zone, check=check)


def trace_dirs(trace_dir: str | Path | None = None) -> list[Path]:
    """The folders searched for ``<ZONE>.csv``, in order: ``trace_dir``, ``$GRIDSHIFT_TRACES``, ``$GRIDSHIFT_HOME/traces``."""
    dirs = [Path(trace_dir).expanduser()] if trace_dir else []
    dirs += [Path(d).expanduser() for d in os.environ.get(TRACES_ENV, "").split(os.pathsep) if d]
    return dirs + [gridshift_home() / "traces"]


def zone_traces(trace_dir: str | Path | None = None) -> dict[str, ZoneTrace]:
    """Every zone with a trace: the packaged ones, and those found in :func:`trace_dirs` (which win)."""
    found = dict(PACKAGED_TRACES)
    for d in reversed(trace_dirs(trace_dir)):
        if d.is_dir():
            found.update({f.stem.upper(): ZoneTrace(f.stem, str(f)) for f in sorted(d.glob("*.csv"))})
    return found


def find_zone_trace(zone: str, trace_dir: str | Path | None = None) -> ZoneTrace:
    """The trace of ``zone`` (case-insensitive); :class:`UnknownZone` naming the zones there are."""
    known = zone_traces(trace_dir)
    hit = known.get(zone.upper())
    if hit is None:
        names = ", ".join(sorted(t.zone for t in known.values()))
        where = " or ".join(str(d) for d in trace_dirs(trace_dir))
        raise UnknownZone(f"no trace for zone {zone!r} (zones with a trace: {names}); put {zone}.csv in {where}, "
                          f"or give options.path", provider="trace")
    return hit


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
        trace_dir: str | Path | None = None,
    ) -> None:
        self.check = TraceCheck()
        if series is not None:
            self.series = series
        elif path is None and zone:
            self.series = read_zone_trace(find_zone_trace(zone, trace_dir), column, self.check)
        elif path is None:
            self.series = load_sample_trace(column or "hist")
        else:
            self.series = read_trace(path, column=column, kind=kind or "average", zone=zone, check=self.check)
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
        p = self.series.at(now - off, max_gap=timedelta(0))  # nothing is carried across a gap in the trace
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
