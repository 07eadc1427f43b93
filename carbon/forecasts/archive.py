"""Every forecast gridshift receives or computes, kept in SQLite and joined with what was later observed.

One file, ``$GRIDSHIFT_HOME/forecasts.sqlite`` (created 0600), two tables:

* ``forecasts(provider, zone, kind, issued_s, for_s, value)``: one row per clock hour of each
  forecast, as issued (the provider's, or ``forecast:daily_profile`` computed here): the first value
  in the hour, which is all the hourly record reads;
* ``observed(zone, kind, start_s, end_s, value)``: the intensities seen since.

Both are bounded (``max_rows`` each; the oldest issues and observations go first), so a box that
polls for a year keeps months, not gigabytes. The record the fusion learns from is
:meth:`ForecastArchive.hindcasts`: what each provider had issued by each past origin, against what
was then observed, and nothing issued or seen after the decision it serves. POSIX seconds inside,
aware UTC datetimes at the surface.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from carbon.forecasts.fusion import Hindcast
from carbon.series import IntensityPoint
from carbon.sqlite_file import connect_wal

__all__ = ["ARCHIVE_VERSION", "DEFAULT_MAX_ROWS", "ForecastArchive", "JoinedForecast"]

ARCHIVE_VERSION = 1
#: per table: a year of hourly 24 h forecasts from two inputs is ~420 000 rows (about 30 MB)
DEFAULT_MAX_ROWS = 500_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS forecasts (
    provider TEXT NOT NULL, zone TEXT NOT NULL, kind TEXT NOT NULL,
    issued_s REAL NOT NULL, for_s REAL NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (provider, zone, kind, issued_s, for_s));
CREATE INDEX IF NOT EXISTS forecasts_for ON forecasts (zone, kind, for_s);
CREATE INDEX IF NOT EXISTS forecasts_issued ON forecasts (issued_s);
CREATE TABLE IF NOT EXISTS observed (
    zone TEXT NOT NULL, kind TEXT NOT NULL, start_s REAL NOT NULL, end_s REAL NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (zone, kind, start_s));
"""


@dataclass(frozen=True)
class JoinedForecast:
    """One archived forecast value beside the intensity observed for its time (None: not yet seen)."""

    provider: str
    zone: str
    kind: str
    issued_at: datetime
    for_time: datetime
    forecast_g_per_kwh: float
    observed_g_per_kwh: float | None

    @property
    def lead_s(self) -> float:
        return (self.for_time - self.issued_at).total_seconds()


def _utc(s: float) -> datetime:
    from datetime import timezone

    return datetime.fromtimestamp(s, tz=timezone.utc)


class ForecastArchive:
    """The archive in one SQLite file (``":memory:"`` for a replay or a test). Close it, or use ``with``."""

    def __init__(self, path: str | Path, *, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be >= 1")
        self.path = str(path)
        self.max_rows = max_rows
        if self.path != ":memory:" and not Path(self.path).exists():
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # forecasts can be a paid provider's data: owner-only, from the first byte
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        # the monitor's poller thread and the run's loop share it, one at a time under the monitor's lock
        self._con = (sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False) if self.path == ":memory:"
                     else connect_wal(self.path, isolation_level=None, check_same_thread=False))
        # the archive is a record, not a ledger: in WAL mode NORMAL never corrupts it and loses at most the
        # last writes on a power cut, but spares a disk flush per write (seconds per `gridshift submit`
        # on a loaded machine, most of a placement's time)
        self._con.execute("PRAGMA synchronous=NORMAL")
        row = self._version()
        if row is None:  # a new file: the schema and the version row, written only then (an open is a read)
            self._con.executescript(_SCHEMA)
            # one statement, not a read then an insert: processes opening a fresh archive at once (concurrent
            # `gridshift submit`s on a new home) would both read nothing and the second insert would fail
            self._con.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (str(ARCHIVE_VERSION),))
            row = self._version()
        if int(row[0]) > ARCHIVE_VERSION:
            raise ValueError(f"{self.path}: forecast archive version {row[0]} is newer than this gridshift's "
                             f"({ARCHIVE_VERSION})")

    def _version(self) -> tuple[str] | None:
        try:
            return self._con.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
        except sqlite3.OperationalError as exc:  # no meta table yet
            if "no such table" not in str(exc):
                raise
            return None

    def __enter__(self) -> "ForecastArchive":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()

    # -- writing ---------------------------------------------------------------------------------
    def record(self, *, provider: str, zone: str, issued_at: datetime, points: Iterable[IntensityPoint]) -> int:
        """Keep one issued forecast, its first point in each clock hour (kinds kept per point); returns the rows written.

        The record is read in hours; a 5-min forecast kept whole would be 12 rows an hour from each
        input every read, and ``max_rows`` would then hold about six days, fewer than the fit's 7 nights.
        """
        first: dict[float, IntensityPoint] = {}
        for p in sorted(points, key=lambda p: p.start):
            first.setdefault(p.start.timestamp() // 3600, p)
        rows = [(provider, zone, p.kind, issued_at.timestamp(), p.start.timestamp(), float(p.g_per_kwh))
                for p in first.values()]
        with self._transaction():
            self._con.executemany("INSERT OR REPLACE INTO forecasts VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._trim("forecasts", "issued_s")
        return len(rows)

    def observe(self, *, zone: str, points: Iterable[IntensityPoint]) -> int:
        """Keep observed intensities (forecast points are skipped); returns the rows written."""
        rows = [(zone, p.kind, p.start.timestamp(), p.end.timestamp(), float(p.g_per_kwh)) for p in points if not p.forecast]
        with self._transaction():
            self._con.executemany("INSERT OR REPLACE INTO observed VALUES (?, ?, ?, ?, ?)", rows)
            self._trim("observed", "start_s")
        return len(rows)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        # one transaction for a batch: the file's connection is in autocommit mode, where each row of an
        # executemany is a commit of its own (43 000 rows of a 2 s trace's history took two minutes)
        self._con.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def _trim(self, table: str, order: str) -> None:
        (n,) = self._con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        if n > self.max_rows:
            self._con.execute(f"DELETE FROM {table} WHERE rowid IN "
                              f"(SELECT rowid FROM {table} ORDER BY {order} LIMIT ?)", (n - self.max_rows,))

    def rows(self) -> tuple[int, int]:
        """(forecast rows, observed rows) held."""
        f = self._con.execute("SELECT COUNT(*) FROM forecasts").fetchone()[0]
        o = self._con.execute("SELECT COUNT(*) FROM observed").fetchone()[0]
        return int(f), int(o)

    # -- reading ---------------------------------------------------------------------------------
    def joined(self, *, provider: str | None = None, zone: str | None = None) -> list[JoinedForecast]:
        """Every archived value (optionally of one provider / zone) with the observation covering its time."""
        sql = ("SELECT f.provider, f.zone, f.kind, f.issued_s, f.for_s, f.value, "
               "(SELECT o.value FROM observed o WHERE o.zone = f.zone AND o.kind = f.kind AND o.start_s <= f.for_s "
               " AND f.for_s < o.end_s ORDER BY o.start_s DESC LIMIT 1) "
               "FROM forecasts f WHERE (?1 IS NULL OR f.provider = ?1) AND (?2 IS NULL OR f.zone = ?2) "
               "ORDER BY f.provider, f.zone, f.issued_s, f.for_s")
        return [JoinedForecast(p, z, k, _utc(i), _utc(t), v, o)
                for p, z, k, i, t, v, o in self._con.execute(sql, (provider, zone))]

    def providers(self) -> list[tuple[str, str]]:
        """(provider, zone) pairs held."""
        return [(p, z) for p, z in self._con.execute("SELECT DISTINCT provider, zone FROM forecasts ORDER BY 1, 2")]

    def said(self, *, provider: str, zone: str, issued_by: datetime, at: datetime, step: timedelta, n: int) -> np.ndarray:
        """What ``provider`` had issued by ``issued_by`` for the steps from ``at`` (k < n): the newest issue for each; NaN where none.

        A step holds the issue's first point in it (a forecast finer than the step is read at the step's
        start, or as near after it as the issue goes), not whichever was written last.
        """
        a, s = at.timestamp(), step.total_seconds()
        out = np.full(n, np.nan)
        sql = ("SELECT for_s, value FROM forecasts WHERE provider = ? AND zone = ? AND issued_s <= ? "
               "AND for_s >= ? AND for_s < ? ORDER BY issued_s, for_s DESC")
        for t, v in self._con.execute(sql, (provider, zone, issued_by.timestamp(), a, a + n * s)):  # newer issues overwrite
            k = int(np.floor((t - a) / s + 1e-9))
            if 0 <= k < n:
                out[k] = v
        return out

    def seen(self, *, zone: str, at: datetime, step: timedelta, n: int, now: datetime) -> np.ndarray:
        """Observed intensity in force at ``at + k step`` (k < n), up to ``now`` only; NaN where none."""
        a, s = at.timestamp(), step.total_seconds()
        out = np.full(n, np.nan)
        sql = ("SELECT start_s, end_s, value FROM observed WHERE zone = ? AND end_s > ? AND start_s <= ? "
               "ORDER BY start_s")
        grid = a + np.arange(n) * s
        for start, end, v in self._con.execute(sql, (zone, a, min(a + n * s, now.timestamp()))):
            hit = (grid >= start) & (grid < end) & (grid <= now.timestamp())
            out[hit] = v
        return out

    def hindcasts(self, *, providers: Sequence[str], zone: str, now: datetime, origin: datetime, step: timedelta,
                  n: int, days: int) -> list[Hindcast]:
        """The record for a decision at ``now`` on the grid from ``origin``: the same time of day on the last ``days`` days.

        On each past day, each provider's forecast as issued by that day's ``now``; observed values up
        to this ``now`` only, so nothing issued or seen after the decision reaches it.
        """
        out = []
        for d in range(1, days + 1):
            back = timedelta(days=d)
            observed = self.seen(zone=zone, at=origin - back, step=step, n=n, now=now)
            if np.isnan(observed[0]):
                continue  # nothing seen at the origin: no error now to learn the carry from
            inputs = {p: self.said(provider=p, zone=zone, issued_by=now - back, at=origin - back, step=step, n=n)
                      for p in providers}
            out.append(Hindcast(inputs=inputs, observed=observed))
        return out
