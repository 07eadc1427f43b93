"""Energy-Charts (Fraunhofer ISE, keyless): day-ahead prices of the European bidding zones.

``GET https://api.energy-charts.info/price?bzn=DE-LU&start=<unix s>&end=<unix s>`` answers

    {"license_info": "CC BY 4.0 (creativecommons.org/licenses/by/4.0) from Bundesnetzagentur | SMARD.de",
     "unix_seconds": [1704063600, ...], "price": [52.3, ...], "unit": "EUR / MWh", "deprecated": false}

one price per interval start (hourly, or quarter-hourly since the day-ahead auction moved to 15-minute
products on 2025-10-01; each interval lasts until the next start). A ``null`` price is an interval
not yet published; a zone it does not know is refused with 422 (FastAPI's validation error) and
means :class:`carbon.errors.UnknownZone`. ``zone`` is the bidding zone (default ``DE-LU``); the
publication rule is the EU coupling's (:data:`carbon.prices.day_ahead.SDAC`).
"""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

import httpx

from carbon.errors import BadResponse, CarbonError, NoCoverage, UnknownZone
from carbon.prices.base import HttpPriceSource, price_number
from carbon.prices.series import PricePoint, PriceSeries
from carbon.providers._http import body_text, require

__all__ = ["EnergyChartsPrices"]


class EnergyChartsPrices(HttpPriceSource):
    """Day-ahead prices of one bidding zone from api.energy-charts.info (EUR/MWh)."""

    name: ClassVar[str] = "energycharts"
    default_base_url: ClassVar[str] = "https://api.energy-charts.info"
    currency = "EUR"

    def __init__(self, *, zone: str = "DE-LU", **http: Any) -> None:
        super().__init__(zone=zone or "DE-LU", **http)

    def status_overrides(self) -> dict[int, type[CarbonError]]:
        return {422: BadResponse}

    def classify(self, response: httpx.Response) -> tuple[type[CarbonError], str] | None:
        if response.status_code == 422 and "bzn" in body_text(response):
            return UnknownZone, f"unknown bidding zone {self.zone!r}: use an Energy-Charts bzn such as DE-LU, AT, FR, NL"
        return None

    def prices(self, *, start: datetime, end: datetime, now: datetime) -> PriceSeries:
        params = {"bzn": self.zone, "start": int(start.timestamp()), "end": int(end.timestamp())}
        body = self.api.get_json("/price", params=params)
        times = require(body, "unix_seconds", provider=self.name, what="price")
        values = require(body, "price", provider=self.name, what="price")
        unit = str(require(body, "unit", provider=self.name, what="price"))
        if not isinstance(times, list) or not isinstance(values, list) or len(times) != len(values):
            raise BadResponse("unexpected price body: unix_seconds and price are not lists of one length",
                              provider=self.name)
        if "eur" not in unit.lower() or "mwh" not in unit.lower():
            raise BadResponse(f"unexpected price unit {unit!r} (expected EUR / MWh)", provider=self.name)
        stamps = [datetime.fromtimestamp(price_number(t, provider=self.name, what="unix_seconds"), tz=timezone.utc)
                  for t in times]
        steps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
        typical = statistics.median(steps) if steps else timedelta(hours=1)
        points: list[PricePoint] = []
        for k, (t, v) in enumerate(zip(stamps, values)):
            if v is None:
                continue  # not published yet
            nxt = stamps[k + 1] if k + 1 < len(stamps) else t + typical
            stop = min(nxt, t + typical) if nxt > t else t + typical
            points.append(self.point(t, stop, price_number(v, provider=self.name), now=now))
        series = PriceSeries.of(points, zone=self.zone, currency=self.currency).window(start, end).known_at(now)
        if not series:
            raise NoCoverage(f"no prices for {self.zone} from {start:%Y-%m-%d %H:%M} UTC", provider=self.name)
        return series
