"""WattTime API v3: marginal emissions (MOER) for one balancing-authority region.

* Login: ``GET /login`` with HTTP Basic auth (``WATTTIME_USERNAME``/``WATTTIME_PASSWORD``) returns a
  bearer token valid for 30 min. It is cached and renewed early (after ``token_refresh_s``, 25 min
  by default), and a 401/403 on a data call triggers exactly one re-login and retry, as the Carbon
  Aware SDK does. Bad credentials give a 403 *HTML* page, not JSON.
* Data: ``/v3/forecast`` (its first point is the current 5-min period, the "guaranteed real-time
  value"), ``/v3/historical`` (30-day chunks), ``/v3/signal-index`` (a 0-100 percentile relative to
  the next 24 h; not an intensity, so it is a separate method).
* Units: ``lbs_co2_per_mwh`` x 0.45359237 = g/kWh. The signal is *marginal*: its thresholds are
  not comparable with Electricity Maps' or the UK grid's average numbers.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, ClassVar

import httpx
from pydantic import SecretStr

from carbon.errors import AuthFailed, BadResponse, CarbonError, NoCoverage
from carbon.providers._http import HttpProvider, body_text, number, parse_time, require, resolve_secret
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries

__all__ = ["WattTimeProvider", "LBS_PER_MWH_TO_G_PER_KWH", "lbs_per_mwh_to_g_per_kwh"]

#: 1 lb = 453.59237 g and 1 MWh = 1000 kWh
LBS_PER_MWH_TO_G_PER_KWH = 0.45359237
_TOKEN_LIFETIME = timedelta(minutes=30)
_HISTORY_CHUNK = timedelta(days=30)


def lbs_per_mwh_to_g_per_kwh(value_lbs_per_mwh: float) -> float:
    """Convert a MOER in lbs CO2/MWh to g CO2/kWh."""
    return value_lbs_per_mwh * LBS_PER_MWH_TO_G_PER_KWH


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _classify(response: httpx.Response) -> tuple[type[CarbonError], str] | None:
    text = body_text(response)
    if response.status_code == 403 and "scope" in text:
        return NoCoverage, "your WattTime plan does not cover this region or signal; free accounts get CAISO_NORTH only"
    if response.status_code == 404 and "coverage" in text:
        return NoCoverage, ""
    return None


class WattTimeProvider(HttpProvider):
    """WattTime v3 for one region (``zone="CAISO_NORTH"``), or the region found from ``latitude``/``longitude``."""

    name: ClassVar[str] = "watttime"
    kind: IntensityKind = "marginal"  # type: ignore[misc]  # co2_aoer (average) flips it per instance
    default_base_url = "https://api.watttime.org"

    def __init__(
        self,
        *,
        zone: str = "",
        latitude: float | str | None = None,
        longitude: float | str | None = None,
        username: str | None = None,
        password: str | SecretStr | None = None,
        password_block: str | None = None,
        signal_type: str = "co2_moer",
        token_refresh_s: float | str = 25 * 60,
        clock: Callable[[], datetime] = _utcnow,
        **http: Any,
    ) -> None:
        super().__init__(zone=zone, classify=_classify, **http)
        if signal_type not in ("co2_moer", "co2_aoer"):
            raise ValueError(f"signal_type must be co2_moer or co2_aoer (g/kWh signals), got {signal_type!r}")
        if not self.zone and (latitude is None or longitude is None):
            raise ValueError("give a region as zone (e.g. CAISO_NORTH) or latitude and longitude")
        self.signal_type = signal_type
        self.kind = "marginal" if signal_type == "co2_moer" else "average"
        self.latitude, self.longitude = latitude, longitude
        self.token_refresh = timedelta(seconds=float(token_refresh_s))
        if self.token_refresh >= _TOKEN_LIFETIME:
            raise ValueError("token_refresh_s must be shorter than the token's 30 min lifetime")
        self.clock = clock
        self._username = username or os.environ.get("WATTTIME_USERNAME", "")
        if not self._username:
            raise AuthFailed("no WattTime user: set WATTTIME_USERNAME", provider=self.name)
        self._password = resolve_secret(password, env_var="WATTTIME_PASSWORD", block=password_block,
                                        what="WattTime password", provider=self.name)
        self._token: SecretStr | None = None
        self._token_at: datetime | None = None
        self.logins = 0  # how many times we logged in (for tests and diagnostics)

    # -- auth ------------------------------------------------------------------------------------
    def _login(self) -> SecretStr:
        try:
            body = self.api.get_json("/login", auth=(self._username, self._password.get_secret_value()))
        except AuthFailed as exc:
            raise AuthFailed(f"login rejected; check WATTTIME_USERNAME and WATTTIME_PASSWORD ({exc})", provider=self.name) from None
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise BadResponse("login answered without a token", provider=self.name)
        self.logins += 1
        self._token, self._token_at = SecretStr(token), self.clock()
        return self._token

    def _bearer(self) -> SecretStr:
        if self._token is None or self._token_at is None or self.clock() - self._token_at >= self.token_refresh:
            return self._login()
        return self._token

    def _get(self, path: str, params: dict[str, str]) -> Any:
        """GET with the bearer token; on 401/403 log in again once and retry."""
        headers = {"Authorization": f"Bearer {self._bearer().get_secret_value()}"}
        response = self.api.request_raw(path, params=params, headers=headers)
        if response.status_code in (401, 403):
            headers = {"Authorization": f"Bearer {self._login().get_secret_value()}"}
            response = self.api.request_raw(path, params=params, headers=headers)
        if response.status_code >= 300 or response.status_code == 204:
            raise self.api.status_error(response, path)
        return self.api.decode(response, path)

    def region(self) -> str:
        """The region: ``zone``, or looked up once from latitude/longitude via ``/v3/region-from-loc``."""
        if not self.zone:
            body = self._get("/v3/region-from-loc", {"latitude": str(self.latitude), "longitude": str(self.longitude),
                                                     "signal_type": self.signal_type})
            self.zone = str(require(body, "region", provider=self.name, what="region-from-loc"))
        return self.zone

    # -- parsing -----------------------------------------------------------------------------------
    def _points(self, body: Any, *, forecast: bool, what: str) -> list[IntensityPoint]:
        meta = require(body, "meta", provider=self.name, what=what)
        units = meta.get("units") if isinstance(meta, dict) else None
        if units != "lbs_co2_per_mwh":
            raise BadResponse(f"{what}: expected units lbs_co2_per_mwh, got {units!r}", provider=self.name)
        period = timedelta(seconds=float(meta.get("data_point_period_seconds") or 300))
        rows = require(body, "data", provider=self.name, what=what)
        if not isinstance(rows, list):
            raise BadResponse(f"unexpected {what} body: data is not a list", provider=self.name)
        region = meta.get("region") or self.zone
        out = []
        for row in rows:
            lbs = number(require(row, "value", provider=self.name, what=what), provider=self.name, what="value")
            out.append(IntensityPoint(
                start=parse_time(require(row, "point_time", provider=self.name, what=what), provider=self.name),
                duration=period,
                g_per_kwh=lbs_per_mwh_to_g_per_kwh(lbs),
                kind=self.kind,
                estimated=bool(row.get("imputed_data_used", False)),
                forecast=forecast,
                source=f"{self.name}:{region}:{self.signal_type}",
            ))
        return out

    def _forecast_body(self, horizon_hours: int) -> Any:
        return self._get("/v3/forecast", {"region": self.region(), "signal_type": self.signal_type,
                                          "horizon_hours": str(horizon_hours)})

    # -- the Provider interface --------------------------------------------------------------------
    def current(self, *, now: datetime) -> IntensityPoint:
        """The first point of ``/v3/forecast?horizon_hours=0``: the current 5-min period."""
        points = self._points(self._forecast_body(0), forecast=False, what="forecast")
        if not points:
            raise NoCoverage(f"no current value for region {self.zone}", provider=self.name)
        return points[0]

    def forecast(self, *, now: datetime, horizon: timedelta) -> IntensitySeries:
        hours = max(0, min(72, int(-(-horizon // timedelta(hours=1)))))
        points = self._points(self._forecast_body(hours), forecast=True, what="forecast")
        if not points:
            raise NoCoverage("the forecast is empty", provider=self.name)
        return IntensitySeries.of(points, zone=self.zone)

    def history(self, *, start: datetime, end: datetime) -> IntensitySeries:
        """``/v3/historical`` in 30-day chunks (the official client's chunk size)."""
        points: list[IntensityPoint] = []
        t = start
        while t < end:
            stop = min(t + _HISTORY_CHUNK, end)
            body = self._get("/v3/historical", {"region": self.region(), "signal_type": self.signal_type,
                                                "start": t.isoformat(), "end": stop.isoformat()})
            points.extend(self._points(body, forecast=False, what="historical"))
            t = stop
        return IntensitySeries.of(points, zone=self.zone)

    def signal_index(self) -> tuple[datetime, float]:
        """``/v3/signal-index``: (period start, percentile 0-100 of the next 24 h; 100 = dirtiest)."""
        body = self._get("/v3/signal-index", {"region": self.region(), "signal_type": self.signal_type})
        row = require(body, "data", 0, provider=self.name, what="signal-index")
        return (parse_time(require(row, "point_time", provider=self.name, what="signal-index"), provider=self.name),
                number(require(row, "value", provider=self.name, what="signal-index"), provider=self.name, what="value"))

