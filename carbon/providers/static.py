"""A constant intensity: a fixed number, or a country's annual average.

Country averages come from codecarbon's data set (MIT; Our World in Data, CC BY 4.0), shipped in
``carbon/data/country_intensity.json``. Use it as the last fallback: it knows nothing of the hour.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import lru_cache
from importlib import resources
from typing import ClassVar

from carbon.errors import UnknownZone
from carbon.providers.base import Provider
from carbon.series import IntensityPoint, IntensitySeries

__all__ = ["StaticProvider", "country_intensity"]


@lru_cache(maxsize=1)
def _country_table() -> dict[str, dict[str, object]]:
    text = resources.files("carbon").joinpath("data", "country_intensity.json").read_text(encoding="utf-8")
    return json.loads(text)


def country_intensity(code: str) -> tuple[float, str]:
    """Annual average g/kWh and country name for an ISO-3166 alpha-3 code (or a country name)."""
    table = _country_table()
    key = code.strip().upper()
    if key in table:
        row = table[key]
        return float(row["g_per_kwh"]), str(row["country_name"])  # type: ignore[arg-type]
    for iso, row in table.items():
        if str(row["country_name"]).lower() == code.strip().lower():
            return float(row["g_per_kwh"]), str(row["country_name"])  # type: ignore[arg-type]
    raise UnknownZone(f"unknown country {code!r}: use an ISO-3166 alpha-3 code such as DEU, GBR, USA", provider="static")


class StaticProvider(Provider):
    """Always the same intensity (``g_per_kwh``, or the annual average of ``country``)."""

    name: ClassVar[str] = "static"

    def __init__(self, *, g_per_kwh: float | None = None, country: str | None = None, zone: str = "") -> None:
        if g_per_kwh is None and country is None and zone:
            country = zone
        if g_per_kwh is not None:
            if g_per_kwh < 0:
                raise ValueError("g_per_kwh must be non-negative")
            self.value = float(g_per_kwh)
            self.label = f"static {self.value:g} g/kWh"
        elif country is not None:
            self.value, name = country_intensity(country)
            self.label = f"annual average for {name} (codecarbon/OWID)"
        else:
            self.value = 475.0  # codecarbon's world average
            self.label = "world average 475 g/kWh (codecarbon)"
        self.zone = zone or (country or "")

    def _point(self, start: datetime, duration: timedelta, *, forecast: bool) -> IntensityPoint:
        return IntensityPoint(
            start=start, duration=duration, g_per_kwh=self.value, kind="average", estimated=True,
            forecast=forecast, source=f"static:{self.label}",
        )

    def current(self, *, now: datetime) -> IntensityPoint:
        hour = now.replace(minute=0, second=0, microsecond=0)
        return self._point(hour, timedelta(hours=1), forecast=False)

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        hour = now.replace(minute=0, second=0, microsecond=0)
        n = max(1, int(-(-(now + horizon - hour) // timedelta(hours=1))))
        return IntensitySeries.of(
            (self._point(hour + timedelta(hours=i), timedelta(hours=1), forecast=True) for i in range(n)), zone=self.zone
        )

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        hour = start.replace(minute=0, second=0, microsecond=0)
        n = max(1, int(-(-(end - hour) // timedelta(hours=1))))
        return IntensitySeries.of(
            (self._point(hour + timedelta(hours=i), timedelta(hours=1), forecast=False) for i in range(n)), zone=self.zone
        )
