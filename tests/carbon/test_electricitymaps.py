"""Electricity Maps v3 against its real bodies (respx), plus one run over a real socket."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest
import respx
from tests.fakes.bodies import load_body
from tests.fakes.provider_server import EM_TOKEN

from carbon.errors import AuthFailed, BadResponse, NoCoverage, UnknownZone
from carbon.providers import get_provider
from carbon.providers.electricitymaps import ElectricityMapsProvider

NOW = datetime(2024, 3, 6, 19, 30, tzinfo=timezone.utc)
BASE = "https://api.electricitymap.org"


def em(**kw) -> ElectricityMapsProvider:
    return ElectricityMapsProvider(zone=kw.pop("zone", "US-CAR-DUK"), token="tok", sleep=lambda s: None, **kw)


@respx.mock
def test_latest_real_body() -> None:
    route = respx.get(f"{BASE}/v3/carbon-intensity/latest").mock(return_value=httpx.Response(200, json=load_body("em_latest_US-CAR-DUK.json")))
    p = em()
    point = p.current(now=NOW)
    assert (point.g_per_kwh, point.kind, point.estimated) == (216.0, "average", True)
    assert point.start == datetime(2024, 3, 6, 19, tzinfo=timezone.utc) and point.duration == timedelta(hours=1)
    req = route.calls.last.request
    assert req.headers["auth-token"] == "tok" and req.url.params["zone"] == "US-CAR-DUK"
    assert "tok" not in str(req.url)


@respx.mock
def test_history_real_body_oldest_first_and_windowed() -> None:
    respx.get(f"{BASE}/v3/carbon-intensity/history").mock(return_value=httpx.Response(200, json=load_body("em_history_DE.json")))
    p = em(zone="DE")
    start = datetime(2024, 3, 5, 20, tzinfo=timezone.utc)
    hist = p.history(start=start, end=start + timedelta(hours=4))
    assert hist.values() == [599.0, 607.0, 599.0, 606.0]
    assert not any(pt.forecast for pt in hist)


@respx.mock
def test_past_range_chunks_when_history_does_not_reach_back() -> None:
    respx.get(f"{BASE}/v3/carbon-intensity/history").mock(return_value=httpx.Response(200, json=load_body("em_history_DE.json")))
    rng = respx.get(f"{BASE}/v3/carbon-intensity/past-range").mock(return_value=httpx.Response(200, json=load_body("em_past-range_DK-DK2.json")))
    p = em(zone="DK-DK2")
    start = datetime(2024, 3, 18, 2, tzinfo=timezone.utc)
    hist = p.history(start=start, end=start + timedelta(days=12))
    assert rng.call_count == 2  # 10 days + 2 days
    assert hist.values()[:2] == [161.0, 167.0]


@respx.mock
def test_forecast_and_lat_lon() -> None:
    route = respx.get(f"{BASE}/v3/carbon-intensity/forecast").mock(return_value=httpx.Response(200, json=load_body("em_forecast_DE_docs-shape.json")))
    p = ElectricityMapsProvider(lat=52.5, lon=13.4, token="tok")
    fc = p.forecast(now=NOW, horizon=timedelta(hours=100))
    assert fc.values() == [331.0, 318.0] and all(pt.forecast for pt in fc)
    params = route.calls.last.request.url.params
    assert params["horizonHours"] == "72" and params["lat"] == "52.5" and params["shouldUseFallbackCallerLookup"] == "false"


@respx.mock
@pytest.mark.parametrize("status, body, cls, words", [
    (401, {"error": "Invalid auth-token"}, AuthFailed, "rate-limited"),
    (400, {"error": "zone not found"}, UnknownZone, "400"),
    (404, {"message": "no Route matched with those values"}, BadResponse, "no Route"),
])
def test_errors(status: int, body: dict, cls: type, words: str) -> None:
    respx.get(f"{BASE}/v3/carbon-intensity/latest").mock(return_value=httpx.Response(status, json=body))
    with pytest.raises(cls, match=words):
        em().current(now=NOW)


@respx.mock
def test_null_intensity_is_no_coverage() -> None:
    body = load_body("em_latest_US-CAR-DUK.json") | {"carbonIntensity": None}
    respx.get(f"{BASE}/v3/carbon-intensity/latest").mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(NoCoverage):
        em().current(now=NOW)


def test_token_from_environment_and_missing_token(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AuthFailed, match="ELECTRICITYMAPS_TOKEN"):
        ElectricityMapsProvider(zone="DE")
    monkeypatch.setenv("ELECTRICITYMAPS_TOKEN", "from-env")
    assert ElectricityMapsProvider(zone="DE")._token.get_secret_value() == "from-env"


def test_needs_a_zone_or_coordinates() -> None:
    with pytest.raises(UnknownZone):
        ElectricityMapsProvider(token="t")


def test_over_a_real_socket(server) -> None:
    with get_provider("electricitymaps", zone="US-CAR-DUK", token=EM_TOKEN, base_url=server.url) as p:
        assert p.current(now=NOW).g_per_kwh == 216.0
    assert server.requests[-1].headers["auth-token"] == EM_TOKEN


@respx.mock
def test_free_token_without_past_range_still_gets_the_last_24_h() -> None:
    respx.get(f"{BASE}/v3/carbon-intensity/history").mock(return_value=httpx.Response(200, json=load_body("em_history_DE.json")))
    respx.get(f"{BASE}/v3/carbon-intensity/past-range").mock(return_value=httpx.Response(401, json={"error": "Invalid auth-token"}))
    p = em(zone="DE")
    end = datetime(2024, 3, 6, 20, tzinfo=timezone.utc)
    hist = p.history(start=end - timedelta(days=7), end=end)
    assert len(hist) == 24


def test_prefect_secret_block_is_loaded_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys
    import types

    code = ("import sys; from carbon.providers.electricitymaps import ElectricityMapsProvider as P; "
            "P(zone='DE', token='x'); print('prefect' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # no block named, no Prefect import

    class Secret:  # the shape of prefect.blocks.system.Secret: load(name).get()
        @classmethod
        def load(cls, name: str) -> "Secret":
            assert name == "em-token"
            return cls()

        def get(self) -> str:
            return "from-block"

    fake = types.ModuleType("prefect.blocks.system")
    fake.Secret = Secret  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "prefect.blocks.system", fake)
    assert ElectricityMapsProvider(zone="DE", token_block="em-token")._token.get_secret_value() == "from-block"
