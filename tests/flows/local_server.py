"""A real `prefect server start` on loopback, ONE per test session (fixture ``prefect_server`` in tests/conftest.py).

PREFECT_HOME (and so the server's SQLite database) lives in the session's tmp; the server runs in its
own process group and is killed with it. ``stop()``/``start()`` take it down and bring it back on the
same port and database, for outage tests. When it does not come up in time the test is skipped
locally and FAILS in CI (``CI=true``), so a loaded CI machine cannot lose the integration tests.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: a loaded 2-core machine has taken 95 s to start one
START_TIMEOUT_S = float(os.environ.get("GRIDSHIFT_TEST_PREFECT_START_S", "240"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable(why: str) -> None:
    """Skip, or fail when running in CI: a test that needs a local server must not vanish there."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: a test that needs a local Prefect server fails instead of skipping)")
    pytest.skip(why)


class LocalPrefectServer:
    """`prefect server start` on 127.0.0.1; ``url`` is its API (``.../api``)."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None, *, ui: bool = False) -> None:
        self.home = home
        self.ui = ui  # serve Prefect's web UI too (the browser tests); the session's server does without
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self._env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self._env.update(PREFECT_HOME=str(home / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                         PREFECT_API_URL=self.url, PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW="ignore",
                         # SQLite's wait for a write lock, as Prefect's own test server has it (the default
                         # 10 s turns into 503s when a 2-core CI machine runs a fleet of flow processes)
                         PREFECT_SERVER_DATABASE_TIMEOUT="30", PREFECT_SERVER_DATABASE_CONNECTION_TIMEOUT="30")
        # the production setup (PostgreSQL, Redis: tests/flows/local_services.py): the server reads these;
        # its clients get them too, harmlessly, so that a worker or flow process sees the same settings
        self._env.update(extra_env or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def env_for(self, tmp_path: Path) -> dict[str, str]:
        """The environment for a client of this server, with the test's own GRIDSHIFT_HOME."""
        return {**self._env, "GRIDSHIFT_HOME": str(tmp_path / "gridshift-home")}

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).json() is True
        except (httpx.HTTPError, ValueError):
            return False

    def start(self) -> None:
        """Start (or restart, on the same port and database); skips/fails when not up in time."""
        log = open(self.home / f"server-{self.starts}.log", "wb")
        self.starts += 1
        self._proc = subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port), "--analytics-off",
             *(() if self.ui else ("--no-ui",))],
            env=self._env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self.healthy():
                return
            time.sleep(0.5)  # polling a subprocess's readiness, not timing the code under test
        self.stop()
        unavailable(f"the local Prefect server did not start within {START_TIMEOUT_S:.0f} s "
                    f"(log: {self.home}/server-{self.starts - 1}.log)")

    def stop(self) -> None:
        """Kill the server's process group and wait for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=20)


def run_cli(cmd: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository root with the server's environment."""
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
