"""The web price sources against a real local HTTP server (tests/fakes/price_server.py): bodies, publication, faults."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Iterator

import pytest

from carbon.errors import BadResponse, CarbonError, NoCoverage, ProviderUnreachable, RateLimited, UnknownZone
from carbon.prices import PriceReader, get_price_source
from tests.fakes.price_server import PriceServer, daily_price

UTC = timezone.utc
NOW = datetime(2024, 3, 5, 14, tzinfo=UTC)  # after 13:00 CET: tomorrow's prices are out


@pytest.fixture
def server() -> Iterator[PriceServer]:
    with PriceServer(published_until=datetime(2024, 3, 6, 23, tzinfo=UTC)) as s:
        yield s


@pytest.mark.parametrize("name, zone", [("energycharts", "DE-LU"), ("awattar", "DE")])
def test_the_web_sources_read_what_the_server_published(server: PriceServer, name: str, zone: str) -> None:
    with get_price_source(name, zone=zone, base_url=server.url) as source:
        got = source.prices(start=NOW, end=NOW + timedelta(days=2), now=NOW)
    assert got.end == datetime(2024, 3, 6, 23, tzinfo=UTC)  # the server lists only what is published
    assert got.values()[:3] == [daily_price(NOW + timedelta(hours=h)) for h in range(3)]
    assert min(got.values()) < 0  # negative prices come through
    assert all(p.published_at is not None and p.published_at <= NOW for p in got)


# the same error classes as the carbon providers for the same failures (tests/carbon/test_http_errors.py)
@pytest.mark.parametrize("failure, error", [
    ("429", RateLimited), ("500", BadResponse), ("503", ProviderUnreachable), ("malformed", BadResponse),
    ("empty", BadResponse), ("unknown-zone", UnknownZone), ("no-coverage", NoCoverage), ("wrong-unit", BadResponse),
    ("timeout", ProviderUnreachable),
])
def test_energy_charts_faults_over_real_http(server: PriceServer, failure: str, error: type[CarbonError]) -> None:
    server.failure = failure
    source = get_price_source("energycharts", zone="DE-LU", base_url=server.url, timeout_s=0.5, retries=1,
                              sleep=lambda s: None)
    with source, pytest.raises(error):
        source.prices(start=NOW, end=NOW + timedelta(hours=6), now=NOW)


def test_a_failing_source_fails_over_to_the_next(server: PriceServer) -> None:
    with PriceServer(published_until=datetime(2024, 3, 6, 23, tzinfo=UTC)) as down:
        down.failure = "503"
        reader = PriceReader([
            ("energycharts", lambda: get_price_source("energycharts", base_url=down.url, retries=0)),
            ("awattar", lambda: get_price_source("awattar", zone="DE", base_url=server.url)),
        ])
        got = reader.read(start=NOW, end=NOW + timedelta(hours=12), now=NOW)
        reader.close()
    assert got.source == "awattar" and "503" in got.failures[0] and len(got.series) == 12


def test_gridshift_prices_prints_what_is_published(server: PriceServer) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    server.published_until = None
    out = CliRunner().invoke(app, ["prices", "--source", "awattar", "--zone", "DE", "--base-url", server.url,
                                   "--hours", "24", "--json"])
    assert out.exit_code == 0, out.output
    import json

    got = json.loads(out.output)
    assert got["currency"] == "EUR" and len(got["points"]) == 24 and "13:00 Europe/Berlin" in got["published"]
    server.failure = "503"
    down = CliRunner().invoke(app, ["prices", "--base-url", server.url, "-o", "retries=0"])
    assert down.exit_code == 3 and "503" in down.output
