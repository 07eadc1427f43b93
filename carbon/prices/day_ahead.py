"""When a day-ahead price becomes known: the market's publication rule, a property of the data.

A day-ahead auction fixes the prices of every hour of delivery day D on day D-1; until its result is
published nothing may plan on them. :class:`DayAheadMarket` holds the rule as the market states it:
delivery days in the market's time zone, the result published by ``publish`` local time on the day
before. The times are the latest usual publication, so a plan never sees a price early:

- the single day-ahead coupling of the EU zones (SDAC, EPEX SPOT / Nord Pool; DE-LU, AT, FR, NL, ...):
  gate closure 12:00 CET/CEST, results from about 12:45: **13:00 Europe/Berlin**;
- ERCOT's day-ahead market: results by 13:30 Central time: **13:30 America/Chicago**.

:func:`market_for` finds the rule for a zone name (a bidding zone, ``ERCOT``/``ERCO``), or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

__all__ = ["DayAheadMarket", "MARKETS", "SDAC", "ERCOT", "market_for", "market_names"]


@dataclass(frozen=True)
class DayAheadMarket:
    """A day-ahead market's publication rule (see the module docstring)."""

    name: str
    tz: str
    publish: time
    currency: str

    def published_at(self, delivery_start: datetime) -> datetime:
        """When the price of the interval starting at ``delivery_start`` was published (UTC)."""
        zone = ZoneInfo(self.tz)
        day = delivery_start.astimezone(zone).date()
        local = datetime.combine(day - timedelta(days=1), self.publish, tzinfo=zone)
        return local.astimezone(timezone.utc)

    def known_until(self, moment: datetime) -> datetime:
        """The end of the last delivery day whose prices are published by ``moment`` (UTC)."""
        zone = ZoneInfo(self.tz)
        local = moment.astimezone(zone)
        published_today = local.time() >= self.publish
        last_day = local.date() + timedelta(days=1 if published_today else 0)
        return datetime.combine(last_day + timedelta(days=1), time(0), tzinfo=zone).astimezone(timezone.utc)

    def describe(self) -> str:
        return f"{self.name} day-ahead: each day's prices published by {self.publish:%H:%M} {self.tz} the day before"


SDAC = DayAheadMarket("SDAC", "Europe/Berlin", time(13, 0), "EUR")
ERCOT = DayAheadMarket("ERCOT", "America/Chicago", time(13, 30), "USD")

#: the markets by name; EU bidding zones (Energy-Charts' ``bzn`` names) all clear in SDAC
MARKETS: dict[str, DayAheadMarket] = {"SDAC": SDAC, "ERCOT": ERCOT}
_SDAC_ZONES = frozenset({
    "AT", "BE", "BG", "CH", "CZ", "DE-LU", "DE-AT-LU", "DE", "DK1", "DK2", "EE", "ES", "FI", "FR", "GR", "HR", "HU",
    "IT-NORTH", "IT-CENTRE-NORTH", "IT-CENTRE-SOUTH", "IT-SOUTH", "IT-SICILY", "IT-SARDINIA", "IT-CALABRIA", "LT",
    "LV", "ME", "NL", "NO1", "NO2", "NO3", "NO4", "NO5", "NO2NSL", "PL", "PT", "RO", "RS", "SE1", "SE2", "SE3",
    "SE4", "SI", "SK",
})
_ALIASES = {"ERCO": "ERCOT", "US-TEX-ERCO": "ERCOT", "EPEX": "SDAC", "EU": "SDAC"}


def market_names() -> list[str]:
    return sorted(MARKETS)


def market_for(name: str | None) -> DayAheadMarket | None:
    """The publication rule of a market or zone name (case-insensitive), or None when it is not known."""
    if not name:
        return None
    key = name.strip().upper()
    key = _ALIASES.get(key, key)
    if key in MARKETS:
        return MARKETS[key]
    return SDAC if key in _SDAC_ZONES else None
