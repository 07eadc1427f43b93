"""Forecasts as they were issued: read an archive and answer "what did the newest forecast say then?".

CSV: a header row; the first column is when a forecast was issued, the second the time it is for,
the value (gCO2/kWh) the third column, else the only numeric one among the rest, or the one
``column`` names. Times as in trace files (ISO-8601 or ``YYYY-MM-DD HH:MM[:SS]``, UTC when naive).
Each value holds until the next ``valid_for`` of the same issue. Blank or ``NaN`` cells are points
an issue did not forecast; two values for one (issued, valid_for) are refused (a file per zone).
Asked "what was forecast for these times, as of then?", each time gets the newest issue that covers
it (:meth:`IssuedForecasts.on_grid`).
"""

from __future__ import annotations

import bisect
import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from carbon.errors import BadTrace
from carbon.trace_file import MISSING_CELLS, _is_number, _parse_time

__all__ = ["IssuedForecasts", "read_issued_forecasts"]


#: how many issues back a time not covered by the newest one is looked up in (a week of hourly issues)
_LOOK_BACK_ISSUES = 168


@dataclass
class IssuedForecasts:
    """Issues in time order: POSIX issue times, and per issue its valid-for times and values.

    An issue covers from its first valid time to one step (its median spacing) past its last.
    """

    issued_s: list[float]
    valid_s: list[np.ndarray]
    values: list[np.ndarray]
    source: str = ""
    _end_s: np.ndarray = field(init=False, repr=False)  # where each issue's coverage ends
    _reach_s: np.ndarray = field(init=False, repr=False)  # the furthest any issue up to k reaches

    def __post_init__(self) -> None:
        self._end_s = np.array([v[-1] + (float(np.median(np.diff(v))) if len(v) > 1 else 3600.0)
                                for v in self.valid_s])
        self._reach_s = np.maximum.accumulate(self._end_s) if len(self._end_s) else self._end_s

    def latest_before(self, moment_s: float) -> int | None:
        """Index of the newest issue at or before ``moment_s`` (POSIX seconds), or None."""
        i = bisect.bisect_right(self.issued_s, moment_s) - 1
        return i if i >= 0 else None

    def on_grid(self, moment_s: float, origin_s: float, step_s: float, n: int) -> np.ndarray | None:
        """What the forecasts issued by ``moment_s`` said for ``origin_s + k step_s`` (k < n); None before any issue.

        Each time gets the newest issue (at or before ``moment_s``) that covers it, so a day-ahead
        archive issued at noon for tomorrow still answers for this evening from yesterday's issue.
        NaN where none of the last week of issues covers a time.
        """
        i = self.latest_before(moment_s)
        if i is None:
            return None
        grid = origin_s + np.arange(n) * step_s
        out = np.full(n, np.nan)
        for k in range(i, max(i - _LOOK_BACK_ISSUES, -1), -1):
            todo = np.isnan(out) & (grid < self._reach_s[k])
            if not todo.any():
                break  # what is left lies beyond every older issue's horizon
            valid = self.valid_s[k]
            inside = todo & (grid >= valid[0]) & (grid < self._end_s[k])
            if inside.any():
                out[inside] = self.values[k][np.searchsorted(valid, grid[inside], side="right") - 1]
        return out


def read_issued_forecasts(path: str | Path, *, column: str | None = None) -> IssuedForecasts:
    """Read an archive of issued forecasts (see the module docstring). BadTrace names file and line."""
    where = str(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: spreadsheet exports start with a BOM
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise BadTrace(f"{where}: cannot read: {exc}") from None
    if len(rows) < 2:
        raise BadTrace(f"{where}: needs a header row and at least one forecast row")
    header = [h.strip() for h in rows[0]]
    if len(header) < 3:
        raise BadTrace(f"{where}:1: needs issued_at, valid_for and a value column")
    if column is not None:
        if column not in header[2:]:
            raise BadTrace(f"{where}:1: no column {column!r} (have: {', '.join(header[2:])})")
        vcol = header.index(column)
    elif len(header) == 3:
        vcol = 2
    else:
        numeric = [k for k in range(2, len(header)) if _numeric_column(rows[1:201], k)]
        if not numeric:
            raise BadTrace(f"{where}:2: no numeric value column after {header[0]!r} and {header[1]!r}")
        if len(numeric) > 1:
            raise BadTrace(f"{where}:1: several value columns ({', '.join(header[k] for k in numeric)}): "
                           "name one with --forecast-column")
        vcol = numeric[0]
    numbered = [(line, row) for line, row in enumerate(rows[1:], start=2) if any(row)]
    lines = np.array([line for line, _ in numbered])
    body = [row for _, row in numbered]
    issued_text = [row[0] for row in body]
    valid_text = [row[1] if len(row) > 1 else "" for row in body]
    # an archive repeats each issue time on every row of the issue and each valid time in every
    # issue: parse each distinct text once (a year of half-hourly 48 h issues is 1.7 M rows)
    seconds: dict[str, float] = {}
    for text in set(issued_text) | set(valid_text):
        moment = _parse_time(text)
        if moment is None:
            line = lines[next(k for k, (i, v) in enumerate(zip(issued_text, valid_text)) if text in (i, v))]
            raise BadTrace(f"{where}:{line}: issued_at and valid_for must be times, not {text.strip()!r}")
        seconds[text] = moment.timestamp()
    iss = np.array([seconds[t] for t in issued_text])
    val = np.array([seconds[t] for t in valid_text])
    cells = [row[vcol].strip() if vcol < len(row) else "" for row in body]
    filled = np.array([c.lower() not in MISSING_CELLS for c in cells], dtype=bool)  # else: not forecast by that issue
    try:
        vals = np.array([c for c, f in zip(cells, filled) if f], dtype=float)
    except ValueError:
        line, cell = next((ln, c) for ln, c, f in zip(lines, cells, filled) if f and not _is_number(c))
        raise BadTrace(f"{where}:{line}: {header[vcol]} must be a number, not {cell!r}") from None
    iss, val, lines = iss[filled], val[filled], lines[filled]
    if not len(vals):
        raise BadTrace(f"{where}: no forecast values (every {header[vcol]} cell is empty)")
    bad = np.flatnonzero(~np.isfinite(vals) | (vals < 0))
    if len(bad):
        raise BadTrace(f"{where}:{lines[bad[0]]}: {header[vcol]} must be a finite gCO2/kWh >= 0, not {vals[bad[0]]:g}")
    order = np.lexsort((val, iss))
    iss, val, vals, lines = iss[order], val[order], vals[order], lines[order]
    twice = np.flatnonzero((np.diff(iss) == 0) & (np.diff(val) == 0))
    if len(twice):
        first, second = sorted((int(lines[twice[0]]), int(lines[twice[0] + 1])))
        raise BadTrace(f"{where}:{second}: a second value for the same issued_at and valid_for as line {first}; "
                       "one zone per file")
    cuts = np.flatnonzero(np.diff(iss)) + 1
    return IssuedForecasts(issued_s=[float(x) for x in iss[np.concatenate(([0], cuts))]],
                           valid_s=np.split(val, cuts), values=np.split(vals, cuts), source=Path(path).name)


def _numeric_column(rows: list[list[str]], k: int) -> bool:
    """Every filled cell of column ``k`` in ``rows`` is a number, and at least one is filled."""
    cells = [row[k].strip() for row in rows if k < len(row) and row[k].strip().lower() not in MISSING_CELLS]
    return bool(cells) and all(_is_number(c) for c in cells)
