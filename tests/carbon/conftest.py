"""Fixtures for the carbon tests: real provider bodies and a fake clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from fakes.provider_server import ProviderServer

DATA = Path(__file__).resolve().parents[1] / "data" / "carbon"


def load_body(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def raw_body(name: str) -> bytes:
    return (DATA / name).read_bytes()


@pytest.fixture(scope="module")
def provider_server() -> Iterator[ProviderServer]:
    with ProviderServer() as server:
        yield server


@pytest.fixture
def server(provider_server: ProviderServer) -> Iterator[ProviderServer]:
    provider_server.reset()
    yield provider_server
    provider_server.reset()
