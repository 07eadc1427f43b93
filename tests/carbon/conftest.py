"""Fixtures for the carbon tests: the local fake provider server (one per module, reset per test)."""

from __future__ import annotations

from typing import Iterator

import pytest
from tests.fakes.provider_server import ProviderServer


@pytest.fixture(scope="module")
def provider_server() -> Iterator[ProviderServer]:
    with ProviderServer() as server:
        yield server


@pytest.fixture
def server(provider_server: ProviderServer) -> Iterator[ProviderServer]:
    provider_server.reset()
    yield provider_server
    provider_server.reset()
