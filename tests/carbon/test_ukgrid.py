"""UK Carbon Intensity API: national and regional, null actuals, path datetimes, documented errors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest
import respx
from tests.fakes.bodies import load_body

from carbon.errors import BadResponse, NoCoverage, UnknownZone
from carbon.providers import get_provider
from carbon.providers.ukgrid import UkGridProvider

NOW = datetime(2018, 1, 20, 12, 10, tzinfo=timezone.utc)
BASE = "https://api.carbonintensity.org.uk"


@respx.mock
def test_national_current_prefers_actual() -> None:
    route = respx.get(f"{BASE}/intensity").mock(return_value=httpx.Response(200, json=load_body("uk_intensity_docs.json")))
    point = UkGridProvider().current(now=NOW)
    assert (point.g_per_kwh, point.estimated, point.duration) == (263.0, False, timedelta(minutes=30))
    assert route.calls.last.request.headers["accept"] == "application/json"


@respx.mock
def test_forecast_rows_with_null_actual_use_the_forecast() -> None:
    route = respx.get(f"{BASE}/intensity/2018-01-20T12:10Z/fw48h").mock(
        return_value=httpx.Response(200, json=load_body("uk_intensity_fw48h_docs-shape.json")))
    fc = UkGridProvider().forecast(now=NOW, horizon=timedelta(hours=48))
    assert route.called
    assert fc.values() == [266.0, 254.0, 241.0]  # the row with neither value is skipped
    assert all(p.estimated and p.forecast for p in fc)


@respx.mock
def test_short_horizon_uses_fw24h_and_trims() -> None:
    respx.get(f"{BASE}/intensity/2018-01-20T12:10Z/fw24h").mock(
        return_value=httpx.Response(200, json=load_body("uk_intensity_fw48h_docs-shape.json")))
    fc = UkGridProvider().forecast(now=NOW, horizon=timedelta(minutes=40))
    assert fc.values() == [266.0, 254.0]


@respx.mock
@pytest.mark.parametrize("zone, path", [("3", "/regional/regionid/3"), ("rg10", "/regional/postcode/RG10")])
def test_regional_current_is_a_forecast(zone: str, path: str) -> None:
    respx.get(f"{BASE}{path}").mock(return_value=httpx.Response(200, json=load_body("uk_regional_regionid_3_docs.json")))
    point = UkGridProvider(zone=zone).current(now=NOW)
    assert (point.g_per_kwh, point.estimated) == (266.0, True)


@respx.mock
def test_regional_forecast_unwraps_the_object_variant() -> None:
    body = load_body("uk_regional_regionid_3_docs.json")
    body["data"] = body["data"][0]
    respx.get(f"{BASE}/regional/intensity/2018-01-20T12:10Z/fw24h/regionid/3").mock(return_value=httpx.Response(200, json=body))
    assert UkGridProvider(zone="3").forecast(now=NOW, horizon=timedelta(hours=2)).values() == [266.0]


@respx.mock
def test_history_in_14_day_chunks() -> None:
    route = respx.get(url__regex=rf"{BASE}/intensity/[^/]+/[^/]+$").mock(
        return_value=httpx.Response(200, json=load_body("uk_intensity_docs.json")))
    UkGridProvider().history(start=NOW - timedelta(days=20), end=NOW)
    assert route.call_count == 2


@respx.mock
def test_regional_400_is_unknown_zone_with_the_api_message() -> None:
    respx.get(f"{BASE}/regional/postcode/ZZ9").mock(return_value=httpx.Response(400, json=load_body("uk_error_400_docs.json")))
    with pytest.raises(UnknownZone, match="valid region id or postcode"):
        UkGridProvider(zone="ZZ9").current(now=NOW)


@respx.mock
def test_500_and_empty_data() -> None:
    respx.get(f"{BASE}/intensity").mock(side_effect=[
        httpx.Response(500, json={"error": {"code": "500 Internal Server Error", "message": "down"}}),
        httpx.Response(200, json={"data": []}),
    ])
    with pytest.raises(BadResponse, match="down"):
        UkGridProvider(retries=0).current(now=NOW)
    with pytest.raises(NoCoverage):
        UkGridProvider().current(now=NOW)


@pytest.mark.parametrize("zone", ["18", "0", "not a postcode"])
def test_bad_zones_are_refused_before_any_request(zone: str) -> None:
    with pytest.raises(UnknownZone):
        UkGridProvider(zone=zone)


def test_over_a_real_socket(server) -> None:
    with get_provider("ukgrid", base_url=server.url) as p:
        assert p.current(now=NOW).g_per_kwh == 263.0
        assert p.forecast(now=NOW, horizon=timedelta(hours=48)).values() == [266.0, 254.0, 241.0]
