"""A real `prefect server start` on loopback for the slow integration tests (see conftest.prefect_server).

PREFECT_HOME in tmp; the server runs in its own process group and is killed with it; skips the test
when the server does not come up within 90 s.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_prefect_server(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Start the server; yields the environment (PREFECT_API_URL etc.) for clients of it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_API_URL=f"http://127.0.0.1:{port}/api", PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW="ignore",
               GRIDSHIFT_HOME=str(tmp_path / "gridshift-home"))
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port),
                             "--analytics-off"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        up = False
        for _ in range(180):  # up to 90 s
            if proc.poll() is not None:
                break
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).json() is True:
                    up = True
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)  # polling a subprocess's readiness, not timing the code under test
        if not up:
            pytest.skip("the local Prefect server did not start within 90 s")
        yield env
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


def run_cli(cmd: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository root with the server's environment."""
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
