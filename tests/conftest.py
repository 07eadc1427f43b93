"""Shared fixtures: a hermetic environment (no tokens, temp homes) and one Prefect server per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"

_SCRUB = (
    "ELECTRICITYMAPS_TOKEN", "WATTTIME_USERNAME", "WATTTIME_PASSWORD", "HTTP_PROXY", "HTTPS_PROXY",
    "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "CUDA_VISIBLE_DEVICES", "LOCAL_RANK",
)


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GRIDSHIFT_HOME", str(tmp_path / "gridshift-home"))


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory):
    """A real Prefect API server (temporary SQLite) for the whole session; heartbeats off (~1 s each)."""
    os.environ.setdefault("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect-home")))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield


@pytest.fixture
def shared_data() -> Path:
    """The read-only ../shared/data folder (real traces and API bodies); skips when absent."""
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data is not present beside the checkout")
    return SHARED_DATA
