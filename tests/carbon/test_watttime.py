"""WattTime v3: login and token cache with an injected clock, one re-login, lbs/MWh -> g/kWh, marginal."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

import httpx
import pytest
import respx
from tests.fakes.bodies import load_body, raw_body
from tests.fakes.provider_server import WT_PASSWORD, WT_USER

from carbon.errors import AuthFailed, NoCoverage, RateLimited
from carbon.providers import get_provider
from carbon.providers.watttime import WattTimeProvider, lbs_per_mwh_to_g_per_kwh

NOW = datetime(2022, 7, 15, 0, 2, tzinfo=timezone.utc)
BASE = "https://api.watttime.org"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


class FakeWattTime:
    """A MockTransport handler: Basic login issues tokens; an expired or unknown token gets the HTML 403."""

    def __init__(self) -> None:
        self.tokens: set[str] = set()
        self.logins = 0
        self.data_calls: list[httpx.Request] = []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        if req.url.path == "/login":
            good = "Basic " + base64.b64encode(b"u:p").decode()
            if req.headers.get("authorization") != good:
                return httpx.Response(403, headers={"content-type": "text/html"}, content=raw_body("wt_login_403.html"))
            self.logins += 1
            token = f"t{self.logins}"
            self.tokens.add(token)
            return httpx.Response(200, json={"token": token})
        self.data_calls.append(req)
        if req.headers.get("authorization", "")[7:] not in self.tokens:
            return httpx.Response(403, headers={"content-type": "text/html"}, content=raw_body("wt_login_403.html"))
        if req.url.path == "/v3/forecast":
            body = load_body("wt_forecast_CAISO_NORTH_docs-example.json")
            if req.url.params.get("horizon_hours") == "0":
                body["data"] = body["data"][:1]
            return httpx.Response(200, json=body)
        if req.url.path == "/v3/historical":
            return httpx.Response(200, json=load_body("wt_historical_CAISO_NORTH_docs-example.json"))
        if req.url.path == "/v3/signal-index":
            return httpx.Response(200, json=load_body("wt_signal-index_PSCO.json"))
        return httpx.Response(404)


def wt(fake: FakeWattTime, clock: Clock | None = None, **kw) -> WattTimeProvider:
    return WattTimeProvider(zone="CAISO_NORTH", username="u", password=kw.pop("password", "p"), clock=clock or Clock(),
                            client=httpx.Client(transport=httpx.MockTransport(fake)), sleep=lambda s: None, **kw)


def test_conversion_factor() -> None:
    assert lbs_per_mwh_to_g_per_kwh(1000.0) == pytest.approx(453.59237)


def test_current_is_first_forecast_point_converted_and_marginal() -> None:
    fake = FakeWattTime()
    point = wt(fake).current(now=NOW)
    assert point.g_per_kwh == pytest.approx(1048.4131919701972 * 0.45359237)
    assert point.kind == "marginal" and point.duration == timedelta(minutes=5) and not point.forecast
    assert fake.data_calls[-1].url.params["horizon_hours"] == "0"
    assert fake.data_calls[-1].url.params["signal_type"] == "co2_moer"


def test_forecast_and_history_in_g_per_kwh() -> None:
    p = wt(FakeWattTime())
    fc = p.forecast(now=NOW, horizon=timedelta(hours=24))
    assert [round(v, 3) for v in fc.values()] == [round(1048.4131919701972 * 0.45359237, 3), round(1051.0880801214637 * 0.45359237, 3)]
    hist = p.history(start=NOW - timedelta(days=40), end=NOW)
    assert hist.values() == pytest.approx([870 * 0.45359237, 860 * 0.45359237])
    assert all(pt.estimated for pt in hist)  # imputed_data_used


def test_token_is_cached_and_renewed_before_30_minutes() -> None:
    fake, clock = FakeWattTime(), Clock()
    p = wt(fake, clock)
    p.current(now=NOW)
    clock.now += timedelta(minutes=24)
    p.current(now=clock.now)
    assert fake.logins == 1
    clock.now += timedelta(minutes=2)  # 26 min: past the 25 min refresh point, before expiry
    p.current(now=clock.now)
    assert fake.logins == 2


def test_one_relogin_on_expired_token() -> None:
    fake = FakeWattTime()
    p = wt(fake)
    p.current(now=NOW)
    fake.tokens.clear()  # the server expired it early
    assert p.current(now=NOW).kind == "marginal"
    assert fake.logins == 2


def test_persistent_403_after_relogin_is_auth_failed_not_a_loop() -> None:
    fake = FakeWattTime()
    p = wt(fake)
    orig = fake.__call__

    def deny(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/login":
            return orig(req)
        return httpx.Response(403, headers={"content-type": "text/html"}, content=raw_body("wt_login_403.html"))

    p.api._client = httpx.Client(transport=httpx.MockTransport(deny))
    with pytest.raises(AuthFailed, match="HTML error page"):
        p.current(now=NOW)
    assert fake.logins == 2  # first login + exactly one re-login


def test_bad_credentials_html_403() -> None:
    with pytest.raises(AuthFailed, match="login rejected.*HTML error page"):
        wt(FakeWattTime(), password="wrong").current(now=NOW)


@respx.mock
def test_invalid_scope_is_no_coverage_and_429_is_rate_limited() -> None:
    respx.get(f"{BASE}/login").mock(return_value=httpx.Response(200, json={"token": "x"}))
    respx.get(f"{BASE}/v3/forecast").mock(return_value=httpx.Response(403, json=load_body("wt_error_invalid_scope.json")))
    p = WattTimeProvider(zone="PSCO", username="u", password="p", sleep=lambda s: None)
    with pytest.raises(NoCoverage, match="CAISO_NORTH"):
        p.current(now=NOW)
    respx.get(f"{BASE}/v3/forecast").mock(return_value=httpx.Response(429))
    with pytest.raises(RateLimited):
        p.current(now=NOW)


@respx.mock
def test_region_from_coordinates_and_signal_index() -> None:
    respx.get(f"{BASE}/login").mock(return_value=httpx.Response(200, json={"token": "x"}))
    loc = respx.get(f"{BASE}/v3/region-from-loc").mock(return_value=httpx.Response(200, json=load_body("wt_region-from-loc_PSCO.json")))
    respx.get(f"{BASE}/v3/signal-index").mock(return_value=httpx.Response(200, json=load_body("wt_signal-index_PSCO.json")))
    p = WattTimeProvider(latitude=40.0, longitude=-105.0, username="u", password="p")
    start, pct = p.signal_index()
    assert (p.zone, pct, start.minute) == ("PSCO", 96.0, 40)
    p.signal_index()
    assert loc.call_count == 1


@respx.mock
def test_coordinates_without_coverage() -> None:
    respx.get(f"{BASE}/login").mock(return_value=httpx.Response(200, json={"token": "x"}))
    respx.get(f"{BASE}/v3/region-from-loc").mock(return_value=httpx.Response(404, json=load_body("wt_error_coordinates_not_found.json")))
    with pytest.raises(NoCoverage, match="No coverage"):
        WattTimeProvider(latitude=0, longitude=0, username="u", password="p").current(now=NOW)


def test_credentials_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AuthFailed, match="WATTTIME_USERNAME"):
        WattTimeProvider(zone="CAISO_NORTH")
    monkeypatch.setenv("WATTTIME_USERNAME", "u")
    with pytest.raises(AuthFailed, match="WATTTIME_PASSWORD"):
        WattTimeProvider(zone="CAISO_NORTH")


def test_over_a_real_socket_with_token_expiry(server) -> None:
    with get_provider("watttime", zone="CAISO_NORTH", username=WT_USER, password=WT_PASSWORD, base_url=server.url) as p:
        assert p.current(now=NOW).kind == "marginal"
        server.revoke_tokens()
        assert p.forecast(now=NOW, horizon=timedelta(hours=1)).values()[0] == pytest.approx(475.5, abs=0.1)
    assert server.logins == 2
