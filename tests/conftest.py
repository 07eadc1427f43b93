"""Shared fixtures: a hermetic environment (no tokens, temp homes) and ONE Prefect server per session."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: the project's shared data beside the checkout (real traces, API bodies); not in a clone of the repository
SHARED_DATA = Path(os.environ.get("GRIDSHIFT_SHARED_DATA", REPO.parent / "shared" / "data"))


def needs_shared(*parts: str) -> Path:
    """``SHARED_DATA / parts``; a test without it skips with the reason (a fresh clone has no ../shared), and
    FAILS under ``CI=true``, where the data is expected and a skip would hide the test."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        why = (f"needs {path}: the project's shared data beside the checkout (../shared/data, or set "
               "GRIDSHIFT_SHARED_DATA); a clone of the repository alone does not have it")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (CI=true: a test that needs the shared data fails instead of skipping)")
        pytest.skip(why)
    return path

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
def prefect_server(tmp_path_factory: pytest.TempPathFactory):
    """ONE real `prefect server start` on loopback for the whole session (tests/flows/local_server.py;
    under pytest-xdist one per worker that needs it, started when its first test does):
    subprocess clients take ``prefect_server.env_for(tmp_path)``; outage tests may ``stop()`` and
    ``start()`` it (same port and database). Skips locally, FAILS in CI, when it does not come up."""
    from tests.flows.local_server import LocalPrefectServer

    server = LocalPrefectServer(tmp_path_factory.mktemp("prefect-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def _production_server(home: Path):
    from tests.flows.local_server import LocalPrefectServer
    from tests.flows.local_services import LocalPostgres, LocalRedis, production_env

    postgres, redis = LocalPostgres(), LocalRedis(home / "redis")
    try:
        postgres.start()
        redis.start()
        server = LocalPrefectServer(home, production_env(postgres, redis))
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        redis.stop()
        postgres.stop()


@pytest.fixture(scope="session")
def prefect_server_pg(tmp_path_factory: pytest.TempPathFactory):
    """Prefect's production setup, for the fleet: a real `prefect server start` on a throwaway PostgreSQL,
    with Redis for messaging and lease storage (tests/flows/local_services.py). One per session (per
    xdist worker that needs it). Skips locally without the binaries, FAILS in CI."""
    with _production_server(tmp_path_factory.mktemp("prefect-server-pg")) as server:
        yield server


@pytest.fixture
def own_prefect_server_pg(tmp_path_factory: pytest.TempPathFactory):
    """The production setup for one test alone: a test that kills workers and flow processes on it leaves the
    session's shared one untouched."""
    with _production_server(tmp_path_factory.mktemp("own-prefect-server-pg")) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def fleet_api(request: pytest.FixtureRequest):
    """This process's Prefect client pointed, for one test, at the SQLite server (``prefect_server``) or at the
    production setup (``prefect_server_pg``): the fleet's real-server tests run on both. Yields the server."""
    server = request.getfixturevalue("prefect_server" if request.param == "sqlite" else "prefect_server_pg")
    request.getfixturevalue("prefect_harness")  # the process-wide settings it sets up, then this test's server
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from prefect.concurrency.services import ConcurrencySlotAcquisitionWithLeaseService

    with temporary_settings({PREFECT_API_URL: server.url}):
        with prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
            try:
                yield server
            finally:
                # Prefect keeps one slot-acquisition service per set of limit names, bound to the server it first
                # talked to: the other variant of the same test (same names) must not send its asks there
                ConcurrencySlotAcquisitionWithLeaseService.drain_all()


@pytest.fixture(scope="session")
def prefect_harness(prefect_server):
    """In-process flows against the session's Prefect server; heartbeats off (~1 s each).

    What ``prefect.testing.utilities.prefect_test_harness`` does, minus its second server: point this
    process's settings, and the process-global settings context that new threads fall back to, at
    ``prefect_server``.
    """
    os.environ.setdefault("PREFECT_HOME", str(prefect_server.home / "client-home"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    import prefect.context
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.run.prefect_server import drain_prefect_workers

    with temporary_settings({PREFECT_API_URL: prefect_server.url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        with prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
            try:
                yield
            finally:
                # what is still queued goes now, while the server is up: at exit Prefect would retry
                # it against a stopped server for over a minute
                drain_prefect_workers()


@pytest.fixture
def shared_data() -> Path:
    """The read-only ../shared/data folder (real traces and API bodies); see :func:`needs_shared`."""
    return needs_shared()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test that mostly waits on real servers and workers (minutes at low CPU) starts a worker's
    # share: under xdist its waiting then overlaps the CPU-bound rest instead of ending the run alone.
    # xdist's worksteal hands each of its N workers one contiguous 1/N of the collection first. The
    # waiting tests go to the first N - 2 shares (all N when N < 3), longest first, each to the share
    # with the fewest minutes of waiting so far (``@pytest.mark.waits(minutes=M)``, default 5): two
    # workers start on CPU-bound tests at once, one per core, while the others wait; all at the
    # front of one share, one worker would wait through them in turn while the others ran out of work.
    def minutes(item: pytest.Item) -> float:
        return float(item.get_closest_marker("waits").kwargs.get("minutes", 5))  # type: ignore[union-attr]

    waits = sorted((item for item in items if item.get_closest_marker("waits") is not None), key=minutes, reverse=True)
    rest = [item for item in items if item.get_closest_marker("waits") is None]
    # the collection that counts is the workers' own, where xdist names their number in the environment
    workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    waiting = shares[:workers - 2] if workers >= 3 else shares
    for item in waits:
        min(waiting, key=lambda share: sum(map(minutes, share))).append(item)
    size, extra = divmod(len(items), workers)
    for i, share in enumerate(shares):
        fill = max(size + (1 if i < extra else 0) - len(share), 0)
        share += rest[:fill]
        del rest[:fill]
    items[:] = [item for share in shares for item in share] + rest
