"""The monitor's on-disk cache: one small JSON file per source, so a restart keeps the last signal.

Each file holds the last successful fetch of one source (its current point, its forecast, and up
to ``keep_observed`` of observed history that the built-in forecaster learns from). Files carry a
``version``; a newer version, or a damaged file, is ignored (and named in the log), never fatal.
Writes go to a temporary file first and are renamed into place, so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from carbon.series import IntensityPoint, IntensitySeries, as_utc

__all__ = ["CACHE_VERSION", "CacheEntry", "SignalCache"]

CACHE_VERSION = 1
log = logging.getLogger("carbon.cache")


@dataclass(frozen=True)
class CacheEntry:
    """The last good answer of one source."""

    label: str
    fetched_at: datetime
    zone: str
    current: IntensityPoint
    forecast: tuple[IntensityPoint, ...] = ()
    forecast_by: str = ""
    observed: tuple[IntensityPoint, ...] = field(default=(), repr=False)

    def age(self, now: datetime) -> timedelta:
        return now - self.fetched_at

    def series(self) -> IntensitySeries:
        """Observed history, then the forecast, then the current point (which wins its own slot)."""
        return IntensitySeries.of([*self.observed, *self.forecast, self.current], zone=self.zone)

    def to_json(self) -> dict[str, object]:
        return {
            "version": CACHE_VERSION,
            "label": self.label,
            "fetched_at": self.fetched_at.isoformat(),
            "zone": self.zone,
            "current": self.current.to_json(),
            "forecast": [p.to_json() for p in self.forecast],
            "forecast_by": self.forecast_by,
            "observed": [p.to_json() for p in self.observed],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "CacheEntry":
        version = data.get("version")
        if version != CACHE_VERSION:
            raise ValueError(f"cache version {version!r} is not {CACHE_VERSION}")
        return cls(
            label=str(data["label"]),
            fetched_at=as_utc(datetime.fromisoformat(str(data["fetched_at"]))),
            zone=str(data.get("zone", "")),
            current=IntensityPoint.from_json(data["current"]),  # type: ignore[arg-type]
            forecast=tuple(IntensityPoint.from_json(p) for p in data.get("forecast", [])),  # type: ignore[union-attr]
            forecast_by=str(data.get("forecast_by", "")),
            observed=tuple(IntensityPoint.from_json(p) for p in data.get("observed", [])),  # type: ignore[union-attr]
        )


def _file_name(label: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "source"
    return f"{safe}.json"


class SignalCache:
    """JSON files under ``directory`` (created on first write); ``directory=None`` keeps entries in memory only."""

    def __init__(self, directory: str | Path | None, *, keep_observed: timedelta = timedelta(days=14)) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.keep_observed = keep_observed
        self._memory: dict[str, CacheEntry] = {}

    def path(self, label: str) -> Path | None:
        return self.directory / _file_name(label) if self.directory is not None else None

    def load(self, label: str) -> CacheEntry | None:
        if label in self._memory:
            return self._memory[label]
        path = self.path(label)
        if path is None or not path.exists():
            return None
        try:
            entry = CacheEntry.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring carbon cache %s: %s", path, exc)
            return None
        self._memory[label] = entry
        return entry

    def save(self, entry: CacheEntry) -> CacheEntry:
        """Store ``entry``, trimming observed history to ``keep_observed`` before ``fetched_at``."""
        cutoff = entry.fetched_at - self.keep_observed
        observed = tuple(p for p in entry.observed if p.start >= cutoff and not p.forecast)
        entry = CacheEntry(label=entry.label, fetched_at=entry.fetched_at, zone=entry.zone, current=entry.current,
                           forecast=entry.forecast, forecast_by=entry.forecast_by, observed=observed)
        self._memory[entry.label] = entry
        path = self.path(entry.label)
        if path is None:
            return entry
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(entry.to_json(), fh)
            os.replace(tmp, path)
        except OSError as exc:  # a read-only home must not stop the signal; memory still has it
            log.warning("cannot write carbon cache %s: %s", path, exc)
        return entry
