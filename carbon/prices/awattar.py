"""aWATTar (keyless): the EPEX SPOT day-ahead prices of Germany (``zone: DE``) or Austria (``zone: AT``).

``GET https://api.awattar.de/v1/marketdata?start=<unix ms>&end=<unix ms>`` (``api.awattar.at`` for
Austria) answers

    {"object": "list", "data": [{"start_timestamp": 1561932000000, "end_timestamp": 1561935600000,
     "marketprice": 28.98, "unit": "Eur/MWh"}, ...], "url": "/de/v1/marketdata"}

Only published intervals are listed (tomorrow's appear once the auction's result is out). Its fair
use is 100 requests a day: the price reader asks again only for prices not yet in hand
(:class:`carbon.prices.reader.PriceReader`). Publication rule: the EU coupling's (SDAC).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar

from carbon.errors import BadResponse, NoCoverage, UnknownZone
from carbon.prices.base import HttpPriceSource, price_number
from carbon.prices.series import PriceSeries
from carbon.providers._http import require

__all__ = ["AwattarPrices"]

_HOSTS = {"DE": "https://api.awattar.de", "AT": "https://api.awattar.at"}


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class AwattarPrices(HttpPriceSource):
    """Day-ahead prices for DE or AT from aWATTar's market-data API (EUR/MWh)."""

    name: ClassVar[str] = "awattar"
    currency = "EUR"

    def __init__(self, *, zone: str = "DE", base_url: str | None = None, **http: Any) -> None:
        key = (zone or "DE").strip().upper()
        key = "DE" if key in ("DE-LU", "GERMANY") else "AT" if key == "AUSTRIA" else key
        if key not in _HOSTS:
            raise UnknownZone(f"unknown aWATTar zone {zone!r}: use DE or AT", provider=self.name)
        super().__init__(zone=key, base_url=base_url or _HOSTS[key], market="SDAC", **http)

    def prices(self, *, start: datetime, end: datetime, now: datetime) -> PriceSeries:
        body = self.api.get_json("/v1/marketdata", params={"start": _ms(start), "end": _ms(end)})
        rows = require(body, "data", provider=self.name, what="marketdata")
        if not isinstance(rows, list):
            raise BadResponse("unexpected marketdata body: data is not a list", provider=self.name)
        points = []
        for row in rows:
            unit = str(require(row, "unit", provider=self.name, what="marketdata"))
            if unit.lower().replace(" ", "") != "eur/mwh":
                raise BadResponse(f"unexpected price unit {unit!r} (expected Eur/MWh)", provider=self.name)
            a = price_number(require(row, "start_timestamp", provider=self.name, what="marketdata"),
                             provider=self.name, what="start_timestamp")
            b = price_number(require(row, "end_timestamp", provider=self.name, what="marketdata"),
                             provider=self.name, what="end_timestamp")
            if b <= a:
                raise BadResponse(f"an interval ends before it starts ({a:.0f} -> {b:.0f} ms)", provider=self.name)
            price = price_number(require(row, "marketprice", provider=self.name, what="marketdata"), provider=self.name)
            points.append(self.point(datetime.fromtimestamp(a / 1000, tz=timezone.utc),
                                     datetime.fromtimestamp(b / 1000, tz=timezone.utc), price, now=now))
        series = PriceSeries.of(points, zone=self.zone, currency=self.currency).window(start, end).known_at(now)
        if not series:
            raise NoCoverage(f"no prices for {self.zone} from {start:%Y-%m-%d %H:%M} UTC", provider=self.name)
        return series
