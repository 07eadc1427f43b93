"""The provider seam: one small interface every grid-intensity source implements.

A provider is built for one zone with its options, answers ``current``/``forecast``/``history``
with normalised records, raises only :mod:`carbon.errors` classes, and is closed with ``close()``
(or used as a context manager). Time is always passed in (``now``); providers never read the clock.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime, timedelta
from typing import ClassVar

from carbon.errors import NoCoverage
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries

__all__ = ["Provider"]


class Provider(ABC):
    """Base class for grid-intensity providers."""

    #: registry name, e.g. ``"electricitymaps"``
    name: ClassVar[str] = ""
    #: what the provider's numbers mean
    kind: ClassVar[IntensityKind] = "average"

    zone: str = ""

    @abstractmethod
    def current(self, *, now: datetime) -> IntensityPoint:
        """The intensity in force at ``now``."""

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        """Forecast points covering ``[now, now + horizon)``; NoCoverage if the provider has none."""
        raise NoCoverage("this provider publishes no forecast", provider=self.name)

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        """Past points in ``[start, end)``; NoCoverage if the provider keeps no history."""
        raise NoCoverage("this provider publishes no history", provider=self.name)

    def close(self) -> None:
        """Release connections; a no-op for offline providers."""

    def __enter__(self) -> "Provider":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
