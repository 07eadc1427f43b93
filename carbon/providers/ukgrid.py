"""UK Carbon Intensity API (NESO, keyless, CC BY 4.0): national or regional, half-hourly, gCO2/kWh.

``zone`` picks the area: empty (or ``GB``/``national``) for Great Britain, a region id ``1``-``17``,
or an outward postcode such as ``RG10``. National rows carry ``intensity.forecast`` and
``intensity.actual``; ``actual`` is ``null`` for the current and future half hours, so the forecast
is used and the point is marked *estimated*. Regional data (beta) has forecasts only. The numbers
are NESO's operational (average) factors, not comparable with Electricity Maps' lifecycle numbers.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from carbon.errors import BadResponse, NoCoverage, UnknownZone
from carbon.providers._http import HttpProvider, number, parse_time, require
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries

__all__ = ["UkGridProvider", "REGION_IDS"]

#: region id -> short name (api.carbonintensity.org.uk, "Region IDs")
REGION_IDS: dict[int, str] = {
    1: "North Scotland", 2: "South Scotland", 3: "North West England", 4: "North East England", 5: "Yorkshire",
    6: "North Wales", 7: "South Wales", 8: "West Midlands", 9: "East Midlands", 10: "East England",
    11: "South West England", 12: "South England", 13: "London", 14: "South East England", 15: "England",
    16: "Scotland", 17: "Wales",
}
_HALF_HOUR = timedelta(minutes=30)
#: /intensity/{from}/{to} allows at most 14 days
_RANGE_CHUNK = timedelta(days=14)
_OUTWARD = re.compile(r"^[A-Z]{1,2}[0-9][0-9A-Z]?$")


def _path_time(moment: datetime) -> str:
    """The API's path datetime format, ``YYYY-MM-DDThh:mmZ``."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


class UkGridProvider(HttpProvider):
    """Carbon Intensity API for Great Britain, one region, or one outward postcode."""

    name: ClassVar[str] = "ukgrid"
    kind: ClassVar[IntensityKind] = "average"
    default_base_url = "https://api.carbonintensity.org.uk"

    def __init__(self, *, zone: str = "", region_id: int | str | None = None, postcode: str | None = None, **http: Any) -> None:
        raw = str(region_id if region_id is not None else postcode if postcode is not None else zone or "").strip()
        self.region_id: int | None = None
        self.postcode: str | None = None
        if raw.upper() in ("", "GB", "NATIONAL"):
            pass
        elif raw.isdigit():
            self.region_id = int(raw)
            if self.region_id not in REGION_IDS:
                raise UnknownZone(f"unknown UK region id {raw}: use 1-17 (1 North Scotland ... 13 London ... 17 Wales)",
                                  provider=self.name)
        elif _OUTWARD.match(raw.upper()):
            self.postcode = raw.upper()
        else:
            raise UnknownZone(f"unknown UK zone {raw!r}: use a region id 1-17, an outward postcode such as RG10, or GB",
                              provider=self.name)
        # a 400 for a regional query means the region or postcode was refused
        self.status_overrides = {400: UnknownZone} if (self.region_id or self.postcode) else {}  # type: ignore[misc]
        super().__init__(zone=raw, **http)

    @property
    def regional(self) -> bool:
        return self.region_id is not None or self.postcode is not None

    def _suffix(self) -> str:
        return f"regionid/{self.region_id}" if self.region_id is not None else f"postcode/{self.postcode}"

    # -- parsing -----------------------------------------------------------------------------------
    def _point(self, row: Any, *, forecast: bool, what: str) -> IntensityPoint | None:
        intensity = require(row, "intensity", provider=self.name, what=what)
        if not isinstance(intensity, dict):
            raise BadResponse(f"unexpected {what} body: intensity is not an object", provider=self.name)
        actual, predicted = intensity.get("actual"), intensity.get("forecast")
        value = actual if actual is not None else predicted
        if value is None:
            return None  # neither yet published for this half hour
        start = parse_time(require(row, "from", provider=self.name, what=what), provider=self.name)
        end = parse_time(require(row, "to", provider=self.name, what=what), provider=self.name)
        return IntensityPoint(
            start=start,
            duration=end - start if end > start else _HALF_HOUR,
            g_per_kwh=number(value, provider=self.name, what="intensity"),
            kind="average",
            estimated=actual is None,
            forecast=forecast,
            source=f"{self.name}:{self.zone or 'GB'}",
        )

    def _rows(self, body: Any, what: str) -> list[Any]:
        """The half-hour rows of a national or regional body (regional bodies nest one level deeper)."""
        data = require(body, "data", provider=self.name, what=what)
        if not self.regional:
            if not isinstance(data, list):
                raise BadResponse(f"unexpected {what} body: data is not a list", provider=self.name)
            return data
        # /regional/regionid/{id} gives [{regionid, ..., data:[rows]}]; /regional/intensity/.../regionid/{id}
        # gives {regionid, ..., data:[rows]}
        block = data[0] if isinstance(data, list) and data else data
        rows = require(block, "data", provider=self.name, what=what)
        if not isinstance(rows, list):
            raise BadResponse(f"unexpected {what} body: region data is not a list", provider=self.name)
        return rows

    def _series(self, body: Any, *, forecast: bool, what: str) -> IntensitySeries:
        points = [p for p in (self._point(r, forecast=forecast, what=what) for r in self._rows(body, what)) if p is not None]
        return IntensitySeries.of(points, zone=self.zone)

    # -- the Provider interface --------------------------------------------------------------------
    def current(self, *, now: datetime) -> IntensityPoint:
        """``/intensity`` (national) or ``/regional/regionid/{id}`` / ``/regional/postcode/{pc}``."""
        path = f"/regional/{self._suffix()}" if self.regional else "/intensity"
        series = self._series(self.api.get_json(path), forecast=False, what="intensity")
        if not series:
            raise NoCoverage("no intensity published for the current half hour", provider=self.name)
        return series.at(now, max_gap=timedelta(0)) or series.points[0]

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        """``/intensity/{from}/fw24h|fw48h`` (regional: ``/regional/intensity/{from}/fw48h/...``)."""
        window = "fw24h" if horizon <= timedelta(hours=24) else "fw48h"
        path = f"/intensity/{_path_time(now)}/{window}"
        if self.regional:
            path = f"/regional/intensity/{_path_time(now)}/{window}/{self._suffix()}"
        series = self._series(self.api.get_json(path), forecast=True, what="forecast")
        # the API starts the rows at ``now``; only the far end is trimmed to the horizon
        series = IntensitySeries.of([p for p in series if p.start < now + horizon], zone=self.zone)
        if not series:
            raise NoCoverage("the forecast is empty", provider=self.name)
        return series

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        """``/intensity/{from}/{to}`` in 14-day chunks (regional: ``/regional/intensity/{from}/{to}/...``)."""
        points: list[IntensityPoint] = []
        t = start
        while t < end:
            stop = min(t + _RANGE_CHUNK, end)
            path = f"/intensity/{_path_time(t)}/{_path_time(stop)}"
            if self.regional:
                path = f"/regional/intensity/{_path_time(t)}/{_path_time(stop)}/{self._suffix()}"
            points.extend(self._series(self.api.get_json(path), forecast=False, what="history"))
            t = stop
        return IntensitySeries.of(points, zone=self.zone).window(start, end)

