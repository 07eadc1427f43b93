"""Forecasts as they were issued: read an archive and answer "what did the newest forecast say then?".

CSV: a header row; the first column is when a forecast was issued, the second the time it is for,
the value (gCO2/kWh) the only other numeric column or the one ``column`` names. Times as in trace
files (ISO-8601 or ``YYYY-MM-DD HH:MM[:SS]``, UTC when naive). Each value holds until the next
``valid_for`` of the same issue.
"""

from __future__ import annotations

import bisect
import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from carbon.errors import BadTrace
from carbon.trace_file import _parse_time

__all__ = ["IssuedForecasts", "read_issued_forecasts"]


@dataclass
class IssuedForecasts:
    """Issues in time order: POSIX issue times, and per issue its valid-for times and values."""

    issued_s: list[float]
    valid_s: list[np.ndarray]
    values: list[np.ndarray]
    source: str = ""
    _cache: dict[tuple[int, float, float, int], np.ndarray] = field(default_factory=dict, repr=False)

    def latest_before(self, moment_s: float) -> int | None:
        """Index of the newest issue at or before ``moment_s`` (POSIX seconds), or None."""
        i = bisect.bisect_right(self.issued_s, moment_s) - 1
        return i if i >= 0 else None

    def on_grid(self, moment_s: float, origin_s: float, step_s: float, n: int) -> np.ndarray | None:
        """The newest issue before ``moment_s`` sampled at ``origin_s + k step_s`` (k < n); None without one.

        Before the issue's first valid time its first value holds, after its last its last value.
        """
        i = self.latest_before(moment_s)
        if i is None:
            return None
        key = (i, origin_s, step_s, n)
        hit = self._cache.get(key)
        if hit is None:
            grid = origin_s + np.arange(n) * step_s
            j = np.clip(np.searchsorted(self.valid_s[i], grid, side="right") - 1, 0, len(self.valid_s[i]) - 1)
            hit = self.values[i][j]
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = hit
        return hit


def read_issued_forecasts(path: str | Path, *, column: str | None = None) -> IssuedForecasts:
    """Read an archive of issued forecasts (see the module docstring). BadTrace names file and line."""
    where = str(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
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
    else:
        numeric = [k for k in range(2, len(header)) if _number(rows[1][k] if k < len(rows[1]) else "")]
        if len(numeric) != 1:
            raise BadTrace(f"{where}:1: several value columns ({', '.join(header[k] for k in numeric)}): "
                           "name one with --forecast-column")
        vcol = numeric[0]
    by_issue: dict[float, list[tuple[float, float]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or not any(cell.strip() for cell in row):
            continue
        issued, valid = _parse_time(row[0]), _parse_time(row[1]) if len(row) > 1 else None
        if issued is None or valid is None:
            raise BadTrace(f"{where}:{line}: issued_at and valid_for must be times")
        try:
            value = float(row[vcol])
        except (IndexError, ValueError):
            raise BadTrace(f"{where}:{line}: {header[vcol]} must be a number") from None
        by_issue.setdefault(issued.timestamp(), []).append((valid.timestamp(), value))
    issued_s = sorted(by_issue)
    valid_s, values = [], []
    for t in issued_s:
        pts = sorted(by_issue[t])
        valid_s.append(np.array([p[0] for p in pts]))
        values.append(np.array([p[1] for p in pts]))
    return IssuedForecasts(issued_s=issued_s, valid_s=valid_s, values=values, source=Path(path).name)


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


