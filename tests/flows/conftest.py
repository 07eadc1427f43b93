"""Fixtures for the flow tests: a real local Prefect server for the slow integration tests."""

from __future__ import annotations

import pytest

from tests.flows.local_server import local_prefect_server


@pytest.fixture
def prefect_server(tmp_path):
    """`prefect server start` on loopback for one test; yields its environment; skips if not up in 90 s."""
    with local_prefect_server(tmp_path) as env:
        yield env
