"""The Prefect API that ``gridshift run`` talks to: the user's running server, or a temporary one.

When ``PREFECT_API_URL`` names a server (in the environment or the active Prefect profile),
``gridshift run`` uses it after one health check. Otherwise it starts a temporary server of its
own, the same app Prefect's ephemeral mode runs (``prefect.server.api.server:create_app`` under
uvicorn, UI off, SQLite in ``PREFECT_HOME``), but differently in three ways that matter:

- **started at once**, before gridshift imports Prefect: the server's start-up (seconds of imports
  and database checks) overlaps loading the policy, the pre-flight checks and the client's imports;
- **in a session of its own**: the terminal's Ctrl-C (SIGINT to its foreground process group) and a
  group-wide SIGTERM do not reach it, so it stays up until the interrupted run has been recorded;
- **tied to gridshift by a pipe**: it stops when gridshift closes the pipe (:meth:`TemporaryServer.stop`)
  or dies in any way (even SIGKILL), so no server is left behind. Its output goes to a log file.

This module imports neither Prefect nor the server (that is what makes starting early cheap).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:
    import httpx

__all__ = ["PrefectServerError", "TemporaryServer", "configured_api_url", "drain_prefect_workers"]


class PrefectServerError(Exception):
    """The Prefect API cannot be used: a configured server is unreachable, or the temporary one did not start."""


# Runs in the server's process. The watchdog thread turns EOF on stdin (gridshift closed the pipe
# or died) into uvicorn's graceful SIGTERM, and exits hard if shutting down takes too long.
_SERVER_MAIN = """
import os, signal, socket, sys, threading, time

def watchdog():
    sys.stdin.buffer.read()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(float(sys.argv[2]))
    os._exit(1)

threading.Thread(target=watchdog, daemon=True).start()
import uvicorn
config = uvicorn.Config("prefect.server.api.server:create_app", factory=True, log_level="error",
                        lifespan="on", timeout_graceful_shutdown=1)
uvicorn.Server(config).run(sockets=[socket.socket(fileno=int(sys.argv[1]))])
"""

#: how long the temporary server may take to shut down gracefully before it is killed
STOP_GRACE_S = 5.0


def configured_api_url(environ: Mapping[str, str] | None = None) -> str | None:
    """``PREFECT_API_URL`` from the environment, else from the active profile in ``PREFECT_HOME``.

    Read without importing Prefect (which takes seconds); other places Prefect can read settings
    from (``.env``, ``prefect.toml``) are not consulted. When Prefect is imported already, its
    current settings answer instead.
    """
    if environ is None and "prefect.settings" in sys.modules:
        # Prefect is loaded already (a program or a test that uses it): its settings are in force
        from prefect.settings import get_current_settings

        url = get_current_settings().api.url
        return str(url) if url else None
    env = os.environ if environ is None else environ
    if env.get("PREFECT_API_URL"):
        return env["PREFECT_API_URL"]
    home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(env.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    name = env.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    profile = profiles.get("profiles", {}).get(name, {})
    url = profile.get("PREFECT_API_URL") if isinstance(profile, dict) else None
    return str(url) if url else None


def drain_prefect_workers(timeout_s: float = 5.0) -> None:
    """Send what Prefect's background workers still hold (log lines, events) to the API now.

    Call it before stopping a server this process used: otherwise Prefect drains them at exit,
    against a server that is gone, and retries for a minute or more.
    """
    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=timeout_s)


class TemporaryServer:
    """A Prefect API server for one ``gridshift run``: ``start()``, ``wait_ready()``, ``stop()``.

    ``start`` returns at once (the server comes up in the background). The listening socket is
    bound here and handed to the server, so the port is known at once and cannot be taken meanwhile.
    """

    def __init__(self, log_path: Path, *, environ: Mapping[str, str] | None = None) -> None:
        self.log_path = log_path
        self._environ = dict(os.environ if environ is None else environ)
        self._proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def api_url(self) -> str:
        assert self.port is not None, "start() first"
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the server process (its own session; output appended to ``log_path``)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        env = {**self._environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PREFECT_API_URL": self.api_url}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log: IO[bytes] = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER_MAIN, str(sock.fileno()), str(STOP_GRACE_S)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                pass_fds=(sock.fileno(),), start_new_session=True)
        finally:
            log.close()
            sock.close()  # the server holds its own copy

    def wait_ready(self, timeout_s: float, *, on_wait: Callable[[float], None] | None = None,
                   every_s: float = 5.0, client: "httpx.Client | None" = None) -> float:
        """Block until the server answers its health check; returns the seconds waited.

        ``on_wait(seconds waited)`` is called every ``every_s`` while the server is not up (progress
        for the user: a first start on a loaded machine can take a minute). Raises
        :class:`PrefectServerError` if the process exits or ``timeout_s`` passes.
        """
        import httpx

        proc = self._proc  # stop() may clear it meanwhile (the wait can run in a thread of its own)
        assert proc is not None, "start() first"
        t0 = time.monotonic()
        next_note = t0 + every_s
        own = client is None
        # the socket listens from the start: a request waits in its backlog until the app serves
        http = client or httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0))
        try:
            while True:
                if proc.poll() is not None:
                    raise PrefectServerError(f"the temporary Prefect server exited with code {proc.returncode} "
                                             f"before it was ready (its log: {self.log_path})")
                try:
                    if http.get(f"{self.api_url}/health").status_code == 200:
                        return time.monotonic() - t0
                except httpx.HTTPError:
                    pass
                now = time.monotonic()
                if now - t0 > timeout_s:
                    raise PrefectServerError(f"the temporary Prefect server did not start within {timeout_s:.0f} s "
                                             f"(its log: {self.log_path}); a running server can be used instead: "
                                             "`prefect server start` and set PREFECT_API_URL")
                if on_wait is not None and now >= next_note:
                    on_wait(now - t0)
                    next_note = now + every_s
                time.sleep(0.05)  # polling another process's readiness
        finally:
            if own:
                http.close()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Close the pipe (the server shuts down), wait up to ``grace_s``, then kill its process group."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
