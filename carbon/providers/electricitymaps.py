"""Electricity Maps API v3: latest, history (24 h), past-range and forecast, by zone or lat/lon.

Numbers are *average* (consumption-based, lifecycle by default) intensities in gCO2eq/kWh, hourly,
with ``datetime`` at the start of the hour. Auth is the ``auth-token`` header
(``ELECTRICITYMAPS_TOKEN``). Electricity Maps answers **401** to an invalid token, to a token that
does not cover the zone or endpoint (free tokens cover one zone; forecasts are paid), *and* when the
caller is rate-limited ("by design", electricitymaps-contrib #8047); the error message says so,
because the three cannot be told apart from the response.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

import httpx
from pydantic import SecretStr

from carbon.errors import AuthFailed, BadResponse, CarbonError, NoCoverage, UnknownZone
from carbon.providers._http import HttpProvider, number, parse_time, require, resolve_secret
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries

__all__ = ["ElectricityMapsProvider"]

_HOUR = timedelta(hours=1)
#: past-range at hourly granularity allows at most 10 days per request
_PAST_RANGE_CHUNK = timedelta(hours=240)
_GRANULARITY = {"5_minutes": timedelta(minutes=5), "15_minutes": timedelta(minutes=15), "hourly": _HOUR}


def _classify(response: httpx.Response) -> tuple[type[CarbonError], str] | None:
    if response.status_code == 401:
        return AuthFailed, "the token is invalid, does not cover this zone or endpoint, or the caller is rate-limited: Electricity Maps answers 401 to all three"
    return None


class ElectricityMapsProvider(HttpProvider):
    """Electricity Maps v3 for one zone (``zone="DE"``) or one place (``lat``/``lon``)."""

    name: ClassVar[str] = "electricitymaps"
    kind: ClassVar[IntensityKind] = "average"
    default_base_url = "https://api.electricitymap.org"
    status_overrides: ClassVar[dict[int, type[CarbonError]]] = {
        400: UnknownZone,  # no zone, or lat/lon that maps to no zone
        404: BadResponse,  # the gateway's "no Route matched": a wrong base_url or path, not a missing zone
    }

    def __init__(
        self,
        *,
        zone: str = "",
        lat: float | str | None = None,
        lon: float | str | None = None,
        token: str | SecretStr | None = None,
        token_block: str | None = None,
        emission_factor_type: str | None = None,
        disable_estimations: bool | None = None,
        granularity: str = "hourly",
        **http: Any,
    ) -> None:
        super().__init__(zone=zone, classify=_classify, **http)
        if not self.zone and (lat is None or lon is None):
            raise UnknownZone("give a zone (e.g. DE) or lat and lon; without them the API guesses from the caller's IP",
                              provider=self.name)
        if granularity not in _GRANULARITY:
            raise ValueError(f"granularity must be one of {', '.join(_GRANULARITY)}, got {granularity!r}")
        self.lat = None if lat is None else float(lat)
        self.lon = None if lon is None else float(lon)
        self.granularity = granularity
        self._token = resolve_secret(token, env_var="ELECTRICITYMAPS_TOKEN", block=token_block, what="Electricity Maps token",
                                     provider=self.name)
        self._common: dict[str, str] = {}
        if emission_factor_type:
            self._common["emissionFactorType"] = emission_factor_type
        if disable_estimations is not None:
            self._common["disableEstimations"] = str(disable_estimations).lower()
        if granularity != "hourly":
            self._common["temporalGranularity"] = granularity

    # -- plumbing ------------------------------------------------------------------------------
    def _params(self, **extra: str) -> dict[str, str]:
        where = {"zone": self.zone} if self.zone else {
            "lat": f"{self.lat}", "lon": f"{self.lon}", "shouldUseFallbackCallerLookup": "false",
        }
        return {**where, **self._common, **extra}

    def _get(self, path: str, **params: str) -> Any:
        return self.api.get_json(path, params=self._params(**params),
                                 headers={"auth-token": self._token.get_secret_value()})

    def _point(self, row: Any, *, forecast: bool) -> IntensityPoint | None:
        if not isinstance(row, dict):
            raise BadResponse(f"expected an object, got {type(row).__name__}", provider=self.name)
        if "carbonIntensity" not in row:
            raise BadResponse("unexpected carbon-intensity body: missing carbonIntensity", provider=self.name)
        value = row["carbonIntensity"]
        if value is None:  # the API models it as nullable; a hole, not an error
            return None
        return IntensityPoint(
            start=parse_time(require(row, "datetime", provider=self.name, what="carbon-intensity"), provider=self.name),
            duration=_GRANULARITY[self.granularity],
            g_per_kwh=number(value, provider=self.name, what="carbonIntensity"),
            kind="average",
            estimated=bool(row.get("isEstimated", False)),
            forecast=forecast,
            source=f"{self.name}:{row.get('zone') or self.zone}",
        )

    def _series(self, rows: Any, *, forecast: bool, what: str) -> IntensitySeries:
        if not isinstance(rows, list):
            raise BadResponse(f"unexpected {what} body: expected a list", provider=self.name)
        points = [p for p in (self._point(r, forecast=forecast) for r in rows) if p is not None]
        return IntensitySeries.of(points, zone=self.zone)

    # -- the Provider interface ----------------------------------------------------------------
    def current(self, *, now: datetime) -> IntensityPoint:
        """``GET /v3/carbon-intensity/latest``."""
        body = self._get("/v3/carbon-intensity/latest")
        point = self._point(body, forecast=False)
        if point is None:
            raise NoCoverage(f"no current value for zone {self.zone or (self.lat, self.lon)}", provider=self.name)
        return point

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        """``GET /v3/carbon-intensity/forecast`` (paid tiers; up to 72 h)."""
        hours = max(1, min(72, int(-(-horizon // _HOUR))))
        body = self._get("/v3/carbon-intensity/forecast", horizonHours=str(hours))
        series = self._series(require(body, "forecast", provider=self.name, what="forecast"), forecast=True, what="forecast")
        if not series:
            raise NoCoverage("the forecast is empty", provider=self.name)
        return series

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        """The last 24 h from ``/history`` when that covers the window, else ``/past-range`` in 10-day chunks."""
        recent = self._series(require(self._get("/v3/carbon-intensity/history"), "history", provider=self.name, what="history"),
                              forecast=False, what="history")
        if recent and recent.start <= start and start < recent.end:
            return recent.window(start, end)
        points: list[IntensityPoint] = []
        t = start
        try:
            while t < end:
                stop = min(t + _PAST_RANGE_CHUNK, end)
                body = self._get("/v3/carbon-intensity/past-range", start=t.isoformat(), end=stop.isoformat())
                points.extend(self._series(require(body, "data", provider=self.name, what="past-range"), forecast=False,
                                           what="past-range"))
                t = stop
        except (AuthFailed, NoCoverage):
            # free tokens may not reach past-range: the last 24 h are better than nothing
            if not recent.window(start, end):
                raise
        points.extend(recent.window(start, end))
        return IntensitySeries.of(points, zone=self.zone).window(start, end)
