"""Carbon Aware SDK WebAPI: repeated location=, TimeSpan durations, optimalDataPoints, 204 and 501."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest
from tests.fakes.bodies import load_body

from carbon.errors import BadResponse, NoCoverage, UnknownZone
from carbon.providers import get_provider
from carbon.providers.casdk import CarbonAwareSdkProvider, parse_timespan

NOW = datetime(2022, 7, 19, 13, 40, tzinfo=timezone.utc)


def sdk(handler, **kw) -> tuple[CarbonAwareSdkProvider, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return handler(req)

    p = CarbonAwareSdkProvider(zone=kw.pop("zone", "eastus"), base_url="http://sdk.local",
                               client=httpx.Client(transport=httpx.MockTransport(record)), sleep=lambda s: None, **kw)
    return p, seen


@pytest.mark.parametrize("text, seconds", [("00:05:00", 300), ("1.02:00:00", 93600), ("00:00:30.5000000", 30.5)])
def test_timespan(text: str, seconds: float) -> None:
    assert parse_timespan(text).total_seconds() == seconds


def test_current_from_bylocations() -> None:
    p, seen = sdk(lambda r: httpx.Response(200, json=load_body("casdk_bylocations_eastus_docs.json")))
    point = p.current(now=NOW)
    assert (point.g_per_kwh, point.duration, point.kind) == (70.0, timedelta(minutes=5), "average")
    assert seen[0].url.path == "/emissions/bylocations" and seen[0].url.params.get_list("location") == ["eastus"]


def test_several_locations_repeat_the_parameter() -> None:
    p, seen = sdk(lambda r: httpx.Response(200, json=load_body("casdk_bylocations_eastus_docs.json")), zone="eastus,westus")
    p.current(now=NOW)
    assert seen[0].url.params.get_list("location") == ["eastus", "westus"]
    assert "locations=" not in str(seen[0].url)


def test_forecast_and_optimal_data_points() -> None:
    p, seen = sdk(lambda r: httpx.Response(200, json=load_body("casdk_forecast_northeurope_docs.json")), kind="marginal")
    fc = p.forecast(now=NOW, horizon=timedelta(hours=12))
    assert fc.values() == [532.02293146, 525.5] and fc.kind == "marginal"
    assert fc.points[0].duration == timedelta(minutes=10)
    best = p.optimal(now=NOW, horizon=timedelta(hours=12), window=timedelta(minutes=10))
    assert [b.g_per_kwh for b in best] == [448.4451043375]
    assert seen[-1].url.params["windowSize"] == "10" and "dataStartAt" in seen[-1].url.params


def test_204_is_no_coverage_and_501_is_no_forecast() -> None:
    p, _ = sdk(lambda r: httpx.Response(204))
    with pytest.raises(NoCoverage, match="204"):
        p.current(now=NOW)
    p, _ = sdk(lambda r: httpx.Response(501, json={"title": "NotImplementedException", "status": 501}))
    with pytest.raises(NoCoverage, match="no forecasts"):
        p.forecast(now=NOW, horizon=timedelta(hours=1))


def test_unknown_region_problem_details() -> None:
    p, _ = sdk(lambda r: httpx.Response(400, json=load_body("casdk_error_unknown_region.json")))
    with pytest.raises(UnknownZone, match="Unknown region"):
        p.current(now=NOW)


def test_validation_400_is_not_called_an_unknown_zone() -> None:
    body = {"title": "ValidationProblem", "status": 400, "errors": {"dataEndAt": ["must be after dataStartAt"]}}
    p, _ = sdk(lambda r: httpx.Response(400, json=body))
    with pytest.raises(BadResponse):
        p.current(now=NOW)


def test_over_a_real_socket_and_501(server) -> None:
    with get_provider("casdk", zone="westus", base_url=server.url) as p:
        assert p.current(now=NOW).g_per_kwh == 70.0
        server.casdk_has_forecast = False
        with pytest.raises(NoCoverage):
            p.forecast(now=NOW, horizon=timedelta(hours=1))
