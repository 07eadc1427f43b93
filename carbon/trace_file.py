"""Read carbon-intensity traces in gridshift's trace format, checked as they are read.

Format (see docs/reference.md, "Trace files"): a header row; the timestamp is the first column (or the column
named ``timestamp``/``time``/``datetime`` when the first is not a time); it is ISO-8601 or
``YYYY-MM-DD HH:MM[:SS]``, UTC when naive. The intensity (gCO2/kWh) is the only other numeric
column, or the one ``column`` names. Rows may be irregularly spaced: each point lasts until the
next one.

The checks, the same for the simulator and the trace provider (both read through here):

- a value that is not a number, negative, or above :data:`MAX_PLAUSIBLE_G_PER_KWH` refuses the file
  with ``file:line`` (a unit or export error, not a grid);
- **gaps**: where more than :data:`MAX_GAP` of data is missing (the time between two rows less the
  trace's typical step), the point before it keeps the typical step and the rest stays a gap; the
  simulator skips the nights a gap touches and says how many, the provider serves nothing in it;
- rows out of time order, a time given twice (the later row's value is kept) and a UTC offset that
  differs from the first row's are read, and each is a warning with its line (:class:`TraceCheck`).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from carbon.errors import BadTrace
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries, as_utc

__all__ = ["MAX_GAP", "MAX_PLAUSIBLE_G_PER_KWH", "TraceCheck", "TraceColumns", "parse_trace_text", "parse_value_rows",
           "read_text_or_refuse", "read_trace", "series_gaps"]

#: no grid's intensity comes near this (lignite, the dirtiest fuel, is about 1,100 g/kWh over its life
#: cycle): a larger value is a unit or export error, and it would overflow the integrals
MAX_PLAUSIBLE_G_PER_KWH = 3000.0
#: missing data longer than this is a gap, not a value carried forward
MAX_GAP = timedelta(hours=1)
#: warnings of one kind listed one by one; the rest are counted
_LISTED = 5


@dataclass
class TraceCheck:
    """What reading a trace found that did not refuse it: each warning with its line, and the gaps."""

    where: str = "<trace>"
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # kind -> how many (listed or not)
    gaps: list[tuple[datetime, datetime]] = field(default_factory=list)  # (data ends, data starts again)

    def warn(self, kind: str, line: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] <= _LISTED:
            self.warnings.append(line)
        elif self.counts[kind] == _LISTED + 1:
            self.warnings.append(f"{self.where}: more rows {kind}: counted in the summary, not listed")

    def as_dict(self) -> dict[str, object]:
        longest = max(((b - a).total_seconds() for a, b in self.gaps), default=0.0)
        return {"warnings": list(self.warnings), "counts": dict(self.counts), "gaps": len(self.gaps),
                "longest_gap_h": longest / 3600.0, "max_gap_h": MAX_GAP.total_seconds() / 3600.0}

_TIME_NAMES = ("timestamp", "time", "datetime", "date", "start", "datetime_utc")


@dataclass(frozen=True)
class TraceColumns:
    time: str
    value: str


def _parse_stamp(text: str) -> tuple[datetime, timedelta | None] | None:
    """A timestamp in UTC, and the UTC offset it was written with (None: naive, read as UTC)."""
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return as_utc(moment), moment.utcoffset()


def _parse_time(text: str) -> datetime | None:
    stamp = _parse_stamp(text)
    return stamp[0] if stamp is not None else None


def _offset_text(off: timedelta | None) -> str:
    if off is None:
        return "naive (UTC)"
    minutes = int(off.total_seconds() // 60)
    return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


#: cells that mean "no value here" in exported data: a gap in a trace, a point an issue did not forecast
MISSING_CELLS = frozenset({"", "nan", "null", "none", "na", "n/a"})


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _choose_columns(header: list[str], first_row: list[str], column: str | None, where: str,
                    what: str = "intensity") -> TraceColumns:
    if not header or len(header) < 2:
        raise BadTrace(f"{where}:1: a trace needs a header with a timestamp column and an {what} column")
    if _parse_time(first_row[0]) is not None:
        time_col = header[0]
    else:
        lowered = {h.strip().lower(): h for h in header}
        time_col = next((lowered[n] for n in _TIME_NAMES if n in lowered), "")
        if not time_col:
            raise BadTrace(f"{where}:2: first column {header[0]!r} is not a timestamp and no column is named 'timestamp'")
    if column is not None:
        if column not in header:
            raise BadTrace(f"{where}:1: no column named {column!r} (columns: {', '.join(header)})")
        return TraceColumns(time_col, column)
    numeric = [h for h, v in zip(header, first_row) if h != time_col and _is_number(v)]
    if len(numeric) == 1:
        return TraceColumns(time_col, numeric[0])
    if not numeric:
        raise BadTrace(f"{where}:2: no numeric {what} column found")
    raise BadTrace(f"{where}:1: several numeric columns ({', '.join(numeric)}); choose one with --column / column:")


def parse_trace_text(
    text: str,
    *,
    column: str | None = None,
    where: str = "<trace>",
    kind: IntensityKind = "average",
    source: str = "trace",
    zone: str = "",
    check: TraceCheck | None = None,
) -> IntensitySeries:
    """Parse trace CSV text into a series; errors name ``where:line``, warnings and gaps go to ``check``."""

    def intensity(raw: str, value: float, line: int) -> None:
        if value < 0:
            raise BadTrace(f"{where}:{line}: intensity {raw!r} must be a non-negative number")
        if value > MAX_PLAUSIBLE_G_PER_KWH:
            raise BadTrace(f"{where}:{line}: intensity {raw} g/kWh is implausible (no grid comes near "
                           f"{MAX_PLAUSIBLE_G_PER_KWH:.0f} g/kWh): a unit or export error?")

    rows = parse_value_rows(text, column=column, where=where, check=check, what="intensity", value_check=intensity)
    return IntensitySeries.of([IntensityPoint(start=t, duration=d, g_per_kwh=v, kind=kind, source=source)
                               for t, d, v in rows], zone=zone)


def parse_value_rows(text: str, *, column: str | None, where: str, check: TraceCheck | None, what: str,
                     value_check: Callable[[str, float, int], None]) -> list[tuple[datetime, timedelta, float]]:
    """A time-value CSV (the trace format) as ``(start, duration, value)`` rows in time order.

    ``value_check(raw, value, line)`` refuses a value with a ``BadTrace`` (an intensity must not be
    negative; a price may be); ``what`` names the value in errors. Gaps and warnings go to ``check``.
    """
    check = check if check is not None else TraceCheck(where)
    check.where = where
    reader = csv.reader(io.StringIO(text))
    rows = [r for r in reader]
    if not rows:
        raise BadTrace(f"{where}:1: empty trace file")
    header = [h.strip() for h in rows[0]]
    body = [(i + 2, r) for i, r in enumerate(rows[1:]) if any(c.strip() for c in r)]
    if not body:
        raise BadTrace(f"{where}:2: trace has a header but no rows")
    cols = _choose_columns(header, body[0][1], column, where, what)
    ti, vi = header.index(cols.time), header.index(cols.value)
    unique: dict[datetime, tuple[float, int]] = {}  # time -> (value, line); later rows correct earlier ones
    first_offset: tuple[timedelta | None, int] | None = None
    last: tuple[datetime, int] | None = None
    for line, row in body:
        if len(row) <= max(ti, vi):
            raise BadTrace(f"{where}:{line}: expected {len(header)} columns, got {len(row)}")
        stamp = _parse_stamp(row[ti])
        if stamp is None:
            raise BadTrace(f"{where}:{line}: cannot parse timestamp {row[ti]!r}")
        t, offset = stamp
        if first_offset is None:
            first_offset = (offset, line)
        elif offset != first_offset[0]:
            check.warn("with another UTC offset",
                       f"{where}:{line}: UTC offset {_offset_text(offset)} differs from line {first_offset[1]}'s "
                       f"{_offset_text(first_offset[0])} (read as the UTC time it names)")
        if last is not None and t < last[0]:
            check.warn("out of order", f"{where}:{line}: {t:%Y-%m-%d %H:%M} UTC is earlier than line {last[1]}'s "
                                       f"{last[0]:%Y-%m-%d %H:%M} UTC: rows out of order (read in time order)")
        last = (t, line)
        raw = row[vi].strip()
        if raw.lower() in MISSING_CELLS:
            continue  # a missing value is a gap, as in real traces
        try:
            value = float(raw)
        except ValueError:
            raise BadTrace(f"{where}:{line}: {what} {raw!r} is not a number") from None
        if not math.isfinite(value):
            raise BadTrace(f"{where}:{line}: {what} {raw!r} must be a finite number")
        value_check(raw, value, line)
        if t in unique:
            check.warn("given twice", f"{where}:{line}: {t:%Y-%m-%d %H:%M} UTC again (first at line {unique[t][1]}); "
                                      "the later value is kept")
        unique[t] = (value, line)
    if not unique:
        raise BadTrace(f"{where}:2: trace has no usable values")
    times = sorted(unique)
    steps = [(b - a) for a, b in zip(times, times[1:])]
    typical = statistics.median(steps) if steps else timedelta(hours=1)
    out = []
    for i, t in enumerate(times):
        step = steps[i] if i < len(steps) else typical
        if step - typical > MAX_GAP:
            check.gaps.append((t + typical, t + step))
            step = typical
        out.append((t, step, unique[t][0]))
    if check.gaps:
        longest = max(b - a for a, b in check.gaps)
        check.warn("gaps", f"{where}: {len(check.gaps)} gap(s) of more than {MAX_GAP.total_seconds() / 3600:g} h with no "
                           f"data, the longest {longest.total_seconds() / 3600:.1f} h from "
                           f"{max(check.gaps, key=lambda g: g[1] - g[0])[0]:%Y-%m-%d %H:%M} UTC")
    return out


def series_gaps(series: IntensitySeries, *, max_gap: timedelta = MAX_GAP) -> list[tuple[datetime, datetime]]:
    """Where a series has no data for longer than ``max_gap``: (its data ends, it starts again)."""
    pts = series.points
    return [(a.end, b.start) for a, b in zip(pts, pts[1:]) if b.start - a.end > max_gap]


def read_text_or_refuse(path: Path, what: str) -> str:
    """A data file's text (a BOM dropped); a missing or unreadable file is :class:`BadTrace` at ``path:0``."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadTrace(f"{path}:0: {what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadTrace(f"{path}:0: cannot read {what}: {exc}") from None


def read_trace(
    path: str | Path,
    *,
    column: str | None = None,
    kind: IntensityKind = "average",
    zone: str = "",
    check: TraceCheck | None = None,
) -> IntensitySeries:
    """Read a trace CSV file (see module docstring); ``check`` collects its warnings and gaps."""
    p = Path(path)
    text = read_text_or_refuse(p, "trace file")
    return parse_trace_text(text, column=column, where=str(p), kind=kind, source=f"trace:{p.name}", zone=zone,
                            check=check)
