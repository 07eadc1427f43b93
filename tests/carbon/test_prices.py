"""Price sources: the documented bodies, the carbon providers' fault handling, publication times, failover."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
import respx

from carbon.errors import BadResponse, BadTrace, NoCoverage, ProviderUnreachable, RateLimited, UnknownZone
from carbon.prices import PriceReader, PriceSeries, get_price_source, market_for, read_price_trace
from carbon.prices.awattar import AwattarPrices
from carbon.prices.day_ahead import ERCOT, SDAC
from carbon.prices.energycharts import EnergyChartsPrices
from carbon.prices.trace import parse_price_text

DATA = Path(__file__).resolve().parents[1] / "data" / "price"
EC = "https://api.energy-charts.info"
UTC = timezone.utc


def _body(name: str) -> object:
    return json.loads((DATA / name).read_text())


def _no_sleep(seconds: float) -> None:
    pass


@respx.mock
def test_energy_charts_reads_its_documented_body() -> None:
    route = respx.get(f"{EC}/price").mock(return_value=httpx.Response(200, json=_body("ec_price_DE-LU_docs-shape.json")))
    start, now = datetime(2020, 4, 21, 10, tzinfo=UTC), datetime(2020, 4, 21, 10, 30, tzinfo=UTC)
    series = EnergyChartsPrices().prices(start=start, end=start + timedelta(hours=4), now=now)
    assert series.values() == [-79.74, -80.09, -83.94]  # negative prices kept; the null (unpublished) hour skipped
    assert series.currency == "EUR" and all(p.duration == timedelta(hours=1) for p in series)
    assert series.points[0].published_at == datetime(2020, 4, 20, 11, tzinfo=UTC)  # 13:00 CEST the day before
    query = route.calls.last.request.url.params
    assert (query["bzn"], int(query["start"]), int(query["end"])) == ("DE-LU", int(start.timestamp()),
                                                                      int(start.timestamp()) + 4 * 3600)


@respx.mock
def test_energy_charts_quarter_hours_last_a_quarter() -> None:
    t0 = int(datetime(2025, 10, 2, tzinfo=UTC).timestamp())
    body = {"unix_seconds": [t0 + 900 * k for k in range(4)], "price": [1.0, 2.0, 3.0, 4.0], "unit": "EUR / MWh"}
    respx.get(f"{EC}/price").mock(return_value=httpx.Response(200, json=body))
    series = EnergyChartsPrices(zone="AT").prices(start=datetime.fromtimestamp(t0, UTC),
                                                   end=datetime.fromtimestamp(t0 + 3600, UTC), now=datetime(2025, 10, 2, tzinfo=UTC))
    assert [p.duration for p in series] == [timedelta(minutes=15)] * 4


@respx.mock
@pytest.mark.parametrize("status, body, error", [
    (422, {"detail": [{"loc": ["query", "bzn"], "msg": "value is not a valid enumeration member"}]}, UnknownZone),
    (404, {"detail": "Not Found"}, NoCoverage),
    (500, {"detail": "Internal Server Error"}, BadResponse),
    (503, {"detail": "down"}, ProviderUnreachable),
    (429, {"detail": "slow down"}, RateLimited),
])
def test_energy_charts_errors_are_the_carbon_providers_errors(status: int, body: object, error: type) -> None:
    route = respx.get(f"{EC}/price").mock(return_value=httpx.Response(status, json=body, headers={"Retry-After": "0"}))
    with pytest.raises(error):
        EnergyChartsPrices(zone="XX", sleep=_no_sleep).prices(start=datetime(2024, 1, 1, tzinfo=UTC),
                                                               end=datetime(2024, 1, 2, tzinfo=UTC), now=datetime(2024, 1, 1, tzinfo=UTC))
    assert route.call_count == (3 if status in (429, 500, 503) else 1)  # retried as the carbon providers retry


@respx.mock
@pytest.mark.parametrize("content", [b'{"unix_seconds": [1', b"", b'{"unix_seconds": [1], "price": [], "unit": "EUR / MWh"}',
                                     b'{"unix_seconds": [1], "price": [5], "unit": "EUR / kWh"}',
                                     b'{"unix_seconds": [1], "price": ["n/a"], "unit": "EUR / MWh"}'])
def test_energy_charts_bad_bodies_are_bad_responses(content: bytes) -> None:
    respx.get(f"{EC}/price").mock(return_value=httpx.Response(200, content=content))
    with pytest.raises(BadResponse):
        EnergyChartsPrices().prices(start=datetime(1970, 1, 1, tzinfo=UTC), end=datetime(1970, 1, 2, tzinfo=UTC),
                                    now=datetime(1970, 1, 2, tzinfo=UTC))


@respx.mock
def test_energy_charts_timeout_is_unreachable() -> None:
    respx.get(f"{EC}/price").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(ProviderUnreachable, match="no answer"):
        EnergyChartsPrices(retries=0).prices(start=datetime(2024, 1, 1, tzinfo=UTC), end=datetime(2024, 1, 2, tzinfo=UTC),
                                             now=datetime(2024, 1, 1, tzinfo=UTC))


@respx.mock
@pytest.mark.parametrize("zone, host", [("DE", "https://api.awattar.de"), ("at", "https://api.awattar.at")])
def test_awattar_reads_its_documented_body(zone: str, host: str) -> None:
    route = respx.get(f"{host}/v1/marketdata").mock(return_value=httpx.Response(200, json=_body("awattar_marketdata_docs.json")))
    start = datetime(2019, 6, 30, 22, tzinfo=UTC)
    series = AwattarPrices(zone=zone).prices(start=start, end=start + timedelta(hours=2), now=datetime(2019, 6, 30, 23, tzinfo=UTC))
    assert series.values() == [28.98, 26.23]
    assert series.points[0].published_at == datetime(2019, 6, 30, 11, tzinfo=UTC)  # 00:00 CEST on 07-01: out 06-30 13:00 CEST
    assert route.calls.last.request.url.params["start"] == str(int(start.timestamp() * 1000))


def test_awattar_refuses_a_zone_it_does_not_serve() -> None:
    with pytest.raises(UnknownZone, match="DE or AT"):
        AwattarPrices(zone="FR")


@respx.mock
def test_awattar_wrong_unit_is_a_bad_response() -> None:
    body = _body("awattar_marketdata_docs.json")
    body["data"][0]["unit"] = "ct/kWh"  # type: ignore[index]
    respx.get("https://api.awattar.de/v1/marketdata").mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(BadResponse, match="unit"):
        AwattarPrices().prices(start=datetime(2019, 6, 30, tzinfo=UTC), end=datetime(2019, 7, 1, tzinfo=UTC),
                               now=datetime(2019, 7, 1, tzinfo=UTC))


@pytest.mark.parametrize("market, delivery, published", [
    (SDAC, datetime(2020, 1, 15, 5, tzinfo=UTC), datetime(2020, 1, 14, 12, tzinfo=UTC)),    # CET: 13:00 = 12:00 UTC
    (SDAC, datetime(2020, 7, 15, 5, tzinfo=UTC), datetime(2020, 7, 14, 11, tzinfo=UTC)),    # CEST: 13:00 = 11:00 UTC
    (SDAC, datetime(2020, 7, 14, 22, 30, tzinfo=UTC), datetime(2020, 7, 14, 11, tzinfo=UTC)),  # 00:30 CEST is day 15
    (ERCOT, datetime(2021, 8, 2, 4, tzinfo=UTC), datetime(2021, 7, 31, 18, 30, tzinfo=UTC)),  # 23:00 CDT Aug 1
    (ERCOT, datetime(2021, 12, 2, 6, tzinfo=UTC), datetime(2021, 12, 1, 19, 30, tzinfo=UTC)),  # 00:00 CST Dec 2
])
def test_a_day_ahead_price_is_published_the_day_before(market: object, delivery: datetime, published: datetime) -> None:
    assert market.published_at(delivery) == published  # type: ignore[attr-defined]


def test_markets_are_found_by_zone() -> None:
    assert market_for("de-lu") is SDAC and market_for("ERCO") is ERCOT and market_for("CAISO") is None


def test_a_trace_shows_only_what_was_published() -> None:
    text = "timestamp,price\n" + "\n".join(f"2020-03-0{d}T{h:02d}:00:00+00:00,{h - 5}" for d in (1, 2) for h in range(24))
    series = parse_price_text(text, market=SDAC, currency="EUR")
    assert series.values()[:6] == [-5.0, -4.0, -3.0, -2.0, -1.0, 0.0]  # negative prices are prices
    before = series.known_at(datetime(2020, 3, 1, 11, 59, tzinfo=UTC))  # day 2 (CET) is published at 12:00 UTC on day 1
    after = series.known_at(datetime(2020, 3, 1, 12, 0, tzinfo=UTC))
    assert before.end == datetime(2020, 3, 1, 23, tzinfo=UTC)  # the end of March 1st, CET
    assert after.end == datetime(2020, 3, 2, 23, tzinfo=UTC)  # the file's last hour is March 3rd, CET: not yet out


def test_a_trace_refuses_an_implausible_price_with_its_line() -> None:
    with pytest.raises(BadTrace, match=r"<prices>:3: price 40000"):
        parse_price_text("t,p\n2020-01-01 00:00,30\n2020-01-01 01:00,40000\n")


def test_the_trace_source_serves_a_window_as_published(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text("timestamp,price\n" + "\n".join(f"2021-08-0{d}T{h:02d}:00:00+00:00,{d * 100 + h}"
                                                     for d in (1, 2, 3) for h in range(24)))
    source = get_price_source("trace", path=str(path), zone="ERCOT")
    assert source.currency == "USD"
    got = source.prices(start=datetime(2021, 8, 1, tzinfo=UTC), end=datetime(2021, 8, 4, tzinfo=UTC),
                        now=datetime(2021, 8, 1, 18, tzinfo=UTC))  # 13:00 CDT: Aug 2 (Central) not yet out
    assert got.end == datetime(2021, 8, 2, 5, tzinfo=UTC)
    with pytest.raises(NoCoverage):
        source.prices(start=datetime(2021, 8, 3, tzinfo=UTC), end=datetime(2021, 8, 4, tzinfo=UTC),
                      now=datetime(2021, 7, 1, tzinfo=UTC))


def test_the_shared_de_trace_reads_as_its_readme_says() -> None:
    from tests.conftest import needs_shared

    path = needs_shared("price", "de_lu_dayahead_2020.csv")  # skips outside CI without ../shared; fails under CI
    series = read_price_trace(path, market=SDAC)
    values = series.values()
    assert (len(series), min(values), max(values), sum(v < 0 for v in values)) == (8808, -83.94, 200.04, 298)


class _Flaky:
    """A price source that fails until told otherwise, counting its calls."""

    name = "flaky"
    market = SDAC
    currency = "EUR"

    def __init__(self, series: PriceSeries, fail: bool) -> None:
        self.series, self.fail, self.calls = series, fail, 0

    def prices(self, *, start: datetime, end: datetime, now: datetime) -> PriceSeries:
        self.calls += 1
        if self.fail:
            raise ProviderUnreachable("down", provider="flaky")
        return self.series.window(start, end).known_at(now)

    def close(self) -> None:
        pass


def test_the_reader_fails_over_and_asks_no_twice_for_what_it_holds() -> None:
    text = "timestamp,price\n" + "\n".join(f"2020-03-0{d}T{h:02d}:00:00+00:00,{h}" for d in (1, 2, 3) for h in range(24))
    series = parse_price_text(text, market=SDAC, currency="EUR")
    down, up = _Flaky(series, True), _Flaky(series, False)
    reader = PriceReader([("down", lambda: down), ("up", lambda: up)])  # type: ignore[list-item, return-value]
    now = datetime(2020, 3, 1, 20, tzinfo=UTC)
    first = reader.read(start=now, end=now + timedelta(hours=12), now=now)
    assert first.source == "up" and first.failures and "down" in first.failures[0]
    again = reader.read(start=now + timedelta(minutes=15), end=now + timedelta(hours=12), now=now + timedelta(minutes=15))
    assert (up.calls, down.calls, again.source) == (1, 1, "up")  # everything publishable by then is held
    up.fail = True  # an outage: what is held is still served
    later = now + timedelta(hours=17)  # the next day's prices are out by now: the reader asks, and keeps what it has
    kept = reader.read(start=now + timedelta(hours=10), end=later + timedelta(hours=2), now=later)
    assert kept.series.values() == [6.0, 7.0] and len(kept.failures) == 2 and up.calls == 2
