"""Read carbon-intensity traces in gridshift's trace format.

Format (see docs/reference.md, "Trace files"): a header row; the timestamp is the first column (or the column
named ``timestamp``/``time``/``datetime`` when the first is not a time); it is ISO-8601 or
``YYYY-MM-DD HH:MM[:SS]``, UTC when naive. The intensity (gCO2/kWh) is the only other numeric
column, or the one ``column`` names. Rows may be irregularly spaced and have gaps: each point lasts
until the next one, except that a gap longer than ``max_step`` is kept as a gap (the point gets the
trace's typical step instead).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from carbon.errors import BadTrace
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries, as_utc

__all__ = ["read_trace", "parse_trace_text", "TraceColumns"]

_TIME_NAMES = ("timestamp", "time", "datetime", "date", "start", "datetime_utc")


@dataclass(frozen=True)
class TraceColumns:
    time: str
    value: str


def _parse_time(text: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        return as_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None


#: cells that mean "no value here" in exported data: a gap in a trace, a point an issue did not forecast
MISSING_CELLS = frozenset({"", "nan", "null", "none", "na", "n/a"})


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _choose_columns(header: list[str], first_row: list[str], column: str | None, where: str) -> TraceColumns:
    if not header or len(header) < 2:
        raise BadTrace(f"{where}:1: a trace needs a header with a timestamp column and an intensity column")
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
        raise BadTrace(f"{where}:2: no numeric intensity column found")
    raise BadTrace(f"{where}:1: several numeric columns ({', '.join(numeric)}); choose one with --column / column:")


def parse_trace_text(
    text: str,
    *,
    column: str | None = None,
    where: str = "<trace>",
    kind: IntensityKind = "average",
    source: str = "trace",
    zone: str = "",
    max_step: timedelta | None = None,
) -> IntensitySeries:
    """Parse trace CSV text into a series; errors name ``where:line``."""
    reader = csv.reader(io.StringIO(text))
    rows = [r for r in reader]
    if not rows:
        raise BadTrace(f"{where}:1: empty trace file")
    header = [h.strip() for h in rows[0]]
    body = [(i + 2, r) for i, r in enumerate(rows[1:]) if any(c.strip() for c in r)]
    if not body:
        raise BadTrace(f"{where}:2: trace has a header but no rows")
    cols = _choose_columns(header, body[0][1], column, where)
    ti, vi = header.index(cols.time), header.index(cols.value)
    stamps: list[tuple[datetime, float]] = []
    for line, row in body:
        if len(row) <= max(ti, vi):
            raise BadTrace(f"{where}:{line}: expected {len(header)} columns, got {len(row)}")
        t = _parse_time(row[ti])
        if t is None:
            raise BadTrace(f"{where}:{line}: cannot parse timestamp {row[ti]!r}")
        raw = row[vi].strip()
        if raw.lower() in MISSING_CELLS:
            continue  # a missing value is a gap, as in real traces
        try:
            value = float(raw)
        except ValueError:
            raise BadTrace(f"{where}:{line}: intensity {raw!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise BadTrace(f"{where}:{line}: intensity {raw!r} must be a non-negative number")
        stamps.append((t, value))
    if not stamps:
        raise BadTrace(f"{where}:2: trace has no usable values")
    stamps.sort(key=lambda s: s[0])
    # drop duplicate timestamps, keeping the last (later rows correct earlier ones)
    unique: dict[datetime, float] = {}
    for t, v in stamps:
        unique[t] = v
    times = list(unique)
    steps = [(b - a) for a, b in zip(times, times[1:])]
    typical = statistics.median(steps) if steps else timedelta(hours=1)
    limit = max_step if max_step is not None else typical * 4
    points = []
    for i, t in enumerate(times):
        step = steps[i] if i < len(steps) else typical
        if step > limit:
            step = typical
        points.append(
            IntensityPoint(start=t, duration=step, g_per_kwh=unique[t], kind=kind, source=source)
        )
    return IntensitySeries.of(points, zone=zone)


def read_trace(
    path: str | Path,
    *,
    column: str | None = None,
    kind: IntensityKind = "average",
    zone: str = "",
) -> IntensitySeries:
    """Read a trace CSV file (see module docstring)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadTrace(f"{p}:0: trace file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadTrace(f"{p}:0: cannot read trace: {exc}") from None
    return parse_trace_text(text, column=column, where=str(p), kind=kind, source=f"trace:{p.name}", zone=zone)
