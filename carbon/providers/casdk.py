"""Green Software Foundation Carbon Aware SDK WebAPI (self-hosted; no auth).

Field names follow the SDK's code, not its tutorial: the query parameter is ``location``
(repeated for several locations), ``/emissions/bylocations`` items are
``{location, time, rating, duration}`` with ``duration`` a .NET TimeSpan (``"00:05:00"``), and a
forecast carries ``forecastData`` items ``{location, timestamp, duration (minutes), value}`` plus the
best window as ``optimalDataPoints`` (an array). **204** with an empty body means "no data";
**501** means the configured data source publishes no forecasts. Values are g/kWh (the SDK converts
WattTime's lbs/MWh); whether they are marginal or average depends on the SDK's data source, so
``kind`` is an option (``average`` by default; say ``marginal`` behind WattTime).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, ClassVar

import httpx

from carbon.errors import BadResponse, CarbonError, NoCoverage, UnknownZone
from carbon.providers._http import HttpProvider, body_text, number, parse_time, require
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries

__all__ = ["CarbonAwareSdkProvider", "parse_timespan"]

_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d+):(\d{2}):(\d{2})(?:\.(\d+))?$")


def parse_timespan(text: str) -> timedelta:
    """A .NET TimeSpan string (``[d.]hh:mm:ss[.fffffff]``) as a timedelta."""
    m = _TIMESPAN.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"not a TimeSpan: {text!r}")
    days, hours, minutes, seconds, frac = m.groups()
    return timedelta(days=int(days or 0), hours=int(hours), minutes=int(minutes),
                     seconds=int(seconds) + (float(f"0.{frac}") if frac else 0.0))


def _classify(response: httpx.Response) -> tuple[type[CarbonError], str] | None:
    text = body_text(response)
    if response.status_code == 400 and ("region" in text or "location" in text) and ("unknown" in text or "not found" in text):
        return UnknownZone, ""
    if response.status_code == 501:
        return NoCoverage, "the SDK's data source publishes no forecasts"
    return None


class CarbonAwareSdkProvider(HttpProvider):
    """A Carbon Aware SDK WebAPI for one location (``zone="eastus"``); ``base_url`` is your server."""

    name: ClassVar[str] = "casdk"
    default_base_url = "http://localhost:8080"

    def __init__(self, *, zone: str = "", kind: IntensityKind = "average", lookback_s: float | str = 3600, **http: Any) -> None:
        super().__init__(zone=zone, classify=_classify, **http)
        if not self.zone:
            raise UnknownZone("give a location as zone (a key of the SDK's location files, e.g. eastus)", provider=self.name)
        if kind not in ("average", "marginal"):
            raise ValueError(f"kind must be average or marginal, got {kind!r}")
        self.kind = kind  # type: ignore[misc]
        self.lookback = timedelta(seconds=float(lookback_s))

    def _params(self, **extra: str) -> list[tuple[str, str]]:
        # a list of pairs, so several locations repeat the key: ?location=a&location=b
        return [("location", loc) for loc in self.zone.split(",") if loc] + list(extra.items())

    def _list(self, body: Any, what: str) -> list[Any]:
        if not isinstance(body, list):
            raise BadResponse(f"unexpected {what} body: expected a JSON array", provider=self.name)
        if not body:
            raise NoCoverage(f"no {what} data for location {self.zone}", provider=self.name)
        return body

    def _emission_point(self, row: Any) -> IntensityPoint:
        try:
            duration = parse_timespan(require(row, "duration", provider=self.name, what="emissions"))
        except ValueError as exc:
            raise BadResponse(str(exc), provider=self.name) from None
        return IntensityPoint(
            start=parse_time(require(row, "time", provider=self.name, what="emissions"), provider=self.name),
            duration=duration if duration > timedelta(0) else timedelta(minutes=5),
            g_per_kwh=number(require(row, "rating", provider=self.name, what="emissions"), provider=self.name, what="rating"),
            kind=self.kind,
            forecast=False,
            source=f"{self.name}:{row.get('location') or self.zone}",
        )

    def _forecast_point(self, row: Any) -> IntensityPoint:
        minutes = number(require(row, "duration", provider=self.name, what="forecast"), provider=self.name, what="duration")
        return IntensityPoint(
            start=parse_time(require(row, "timestamp", provider=self.name, what="forecast"), provider=self.name),
            duration=timedelta(minutes=minutes) if minutes > 0 else timedelta(minutes=5),
            g_per_kwh=number(require(row, "value", provider=self.name, what="forecast"), provider=self.name, what="value"),
            kind=self.kind,
            estimated=True,
            forecast=True,
            source=f"{self.name}:{row.get('location') or self.zone}",
        )

    def _emissions(self, start: datetime, end: datetime) -> IntensitySeries:
        body = self.api.get_json("/emissions/bylocations", params=self._params(time=start.isoformat(), toTime=end.isoformat()))
        return IntensitySeries.of((self._emission_point(r) for r in self._list(body, "emissions")), zone=self.zone)

    def _forecast_dto(self, now: datetime, horizon: timedelta, window_min: int | None = None) -> dict[str, Any]:
        extra = {"dataStartAt": now.isoformat(), "dataEndAt": (now + horizon).isoformat()}
        if window_min is not None:
            extra["windowSize"] = str(window_min)
        body = self.api.get_json("/emissions/forecasts/current", params=self._params(**extra))
        dto = self._list(body, "forecast")[0]
        if not isinstance(dto, dict):
            raise BadResponse("unexpected forecast body: items are not objects", provider=self.name)
        return dto

    # -- the Provider interface --------------------------------------------------------------------
    def current(self, *, now: datetime) -> IntensityPoint:
        """The newest ``/emissions/bylocations`` item in ``[now - lookback, now]``."""
        series = self._emissions(now - self.lookback, now)
        return series.at(now) or series.points[-1]

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        """``/emissions/forecasts/current``'s ``forecastData``; NoCoverage on 501 (no forecast source)."""
        dto = self._forecast_dto(now, horizon)
        rows = require(dto, "forecastData", provider=self.name, what="forecast")
        if not isinstance(rows, list) or not rows:
            raise NoCoverage("the forecast is empty", provider=self.name)
        return IntensitySeries.of((self._forecast_point(r) for r in rows), zone=self.zone)

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        return self._emissions(start, end)

    def optimal(self, *, now: datetime, horizon: timedelta, window: timedelta) -> list[IntensityPoint]:
        """The SDK's best window(s) to start a job lasting ``window`` (``optimalDataPoints``; rolling averages)."""
        dto = self._forecast_dto(now, horizon, window_min=max(1, int(window.total_seconds() // 60)))
        rows = require(dto, "optimalDataPoints", provider=self.name, what="forecast")
        if not isinstance(rows, list):
            raise BadResponse("unexpected forecast body: optimalDataPoints is not a list", provider=self.name)
        return [self._forecast_point(r) for r in rows]
