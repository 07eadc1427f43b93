"""The monitor's on-disk cache: one small JSON file per source, so a restart keeps the last signal.

Each file holds the last successful fetch of one source (its current point, its forecast, and up
to ``keep_observed`` of observed history that the built-in forecaster learns from). Files carry a
``version``; a newer version, or a damaged file, is ignored (and named in the log), never fatal.
Writes go to a temporary file first and are renamed into place, so a crash never leaves half a file.

A file is named by :func:`cache_key`: the source's label plus a short hash of the options that
decide its data (trace path and column, base URL, region, ...), so a run pointed at another trace
file or column never reads the values cached for the previous one. Secrets never enter the hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Mapping

from carbon.series import IntensityPoint, IntensitySeries, as_utc

__all__ = ["CACHE_VERSION", "CacheEntry", "SignalCache", "cache_key"]

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


#: option names that hold credentials (or who the user is): never hashed into a file name, and a
#: rotated token must not orphan the cache anyway
_SECRET = re.compile(r"token|password|secret|api_?key|auth|username|credential", re.IGNORECASE)


def cache_key(label: str, options: Mapping[str, Any] | None = None) -> str:
    """The cache key of a source: ``label``, plus ``#`` and 8 hex digits of a hash of ``options``.

    Only plain values (str, numbers, bools, None, and lists of them) are hashed; credentials
    (token, password, ...) and code seams (clients, callables) are left out. An option named
    ``path`` is resolved first, so ``t.csv`` in two directories are two sources. No identifying
    options: the key is ``label`` alone (the name files had before options were hashed).
    """
    ident: dict[str, Any] = {}
    for name, value in (options or {}).items():
        if _SECRET.search(name) or not _plain(value):
            continue
        if name == "path" and isinstance(value, str):
            value = str(Path(value).expanduser().resolve())
        ident[name] = value
    if not ident:
        return label
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    return f"{label}#{digest[:8]}"


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, (list, tuple)) and all(_plain(v) for v in value)


def _file_name(label: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "source"
    return f"{safe}.json"


class SignalCache:
    """JSON files under ``directory`` (created on first write); ``directory=None`` keeps entries in memory only."""

    def __init__(self, directory: str | Path | None, *, keep_observed: timedelta = timedelta(days=14)) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.keep_observed = keep_observed
        self._memory: dict[str, CacheEntry] = {}

    def path(self, key: str) -> Path | None:
        return self.directory / _file_name(key) if self.directory is not None else None

    def load(self, key: str) -> CacheEntry | None:
        """The entry stored under ``key`` (see :func:`cache_key`), or None."""
        if key in self._memory:
            return self._memory[key]
        path = self.path(key)
        if path is None or not path.exists():
            return None
        try:
            entry = CacheEntry.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring carbon cache %s: %s", path, exc)
            return None
        self._memory[key] = entry
        return entry

    def save(self, entry: CacheEntry, *, key: str | None = None) -> CacheEntry:
        """Store ``entry`` under ``key`` (default: its label), trimming observed history to
        ``keep_observed`` before ``fetched_at``."""
        key = entry.label if key is None else key
        cutoff = entry.fetched_at - self.keep_observed
        observed = tuple(p for p in entry.observed if p.start >= cutoff and not p.forecast)
        entry = CacheEntry(label=entry.label, fetched_at=entry.fetched_at, zone=entry.zone, current=entry.current,
                           forecast=entry.forecast, forecast_by=entry.forecast_by, observed=observed)
        self._memory[key] = entry
        path = self.path(key)
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
