"""Throwaway PostgreSQL and Redis servers for the production-setup tests (Debian's packages).

Prefect's production setup is a PostgreSQL database, with Redis for messaging and concurrency lease
storage (``prefect-redis``). Each test session that needs them starts its own in a temp folder on a
free port, the way :mod:`tests.flows.local_server` starts ``prefect server start``, and kills them at
the end. Without the binaries the tests skip, saying so; under ``CI=true`` they fail instead
(``.ci/run`` installs ``postgresql`` and ``redis-server``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.flows.local_server import free_port, unavailable

__all__ = ["LocalPostgres", "LocalRedis", "production_env"]

_PG_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _pg_binary(name: str) -> str | None:
    for folder in _PG_DIRS:  # Debian keeps initdb and pg_ctl off PATH, per major version
        if (folder / name).exists():
            return str(folder / name)
    return shutil.which(name)


def _as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the ``postgres`` user the package made."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


class LocalPostgres:
    """``initdb`` + ``pg_ctl`` in a temp folder of its own on 127.0.0.1:``port``, trust auth, one database ``prefect``.

    Its own folder directly under the system's temp dir: as root the server runs as ``postgres``, who
    cannot enter pytest's root-only temp folders.
    """

    def __init__(self) -> None:
        import tempfile

        self.home = Path(tempfile.mkdtemp(prefix="gridshift-test-pg-"))
        self.port = free_port()
        self.data = self.home / "pg-data"
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/prefect"

    def start(self) -> None:
        initdb, pg_ctl, psql = _pg_binary("initdb"), _pg_binary("pg_ctl"), shutil.which("psql")
        if not (initdb and pg_ctl and psql):
            unavailable("PostgreSQL is not installed (apt-get install -y postgresql): the production-setup tests need it")
        if os.geteuid() == 0:
            shutil.chown(self.home, "postgres", "postgres")
        def run(cmd: list[str]) -> None:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            if done.returncode != 0:
                unavailable(f"{' '.join(cmd[:4])}... failed: {done.stderr.strip()[-400:]}")
        run(_as_postgres([initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]))
        run(_as_postgres([pg_ctl, "-D", str(self.data), "-l", str(self.home / "postgres.log"), "-w", "-t", "120",
                          "-o", f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 -c max_connections=200 "
                                "-c fsync=off -c synchronous_commit=off", "start"]))
        run([psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-c", "CREATE DATABASE prefect"])

    def stop(self) -> None:
        pg_ctl = _pg_binary("pg_ctl")
        if pg_ctl and (self.data / "postmaster.pid").exists():
            subprocess.run(_as_postgres([pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=60)
        shutil.rmtree(self.home, ignore_errors=True)


class LocalRedis:
    """``redis-server`` on 127.0.0.1:``port``, nothing saved to disk."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("Redis is not installed (apt-get install -y redis-server): the production-setup tests need it")
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "redis.log", "wb")
        self._proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", str(self.home)],
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            cli = shutil.which("redis-cli")
            if cli and subprocess.run([cli, "-p", str(self.port), "ping"], capture_output=True, text=True,
                                      timeout=10).stdout.strip() == "PONG":
                return
            time.sleep(0.2)  # waiting for a subprocess to listen, not timing the code under test
        unavailable(f"redis-server did not answer within 60 s (log: {self.home / 'redis.log'})")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


def production_env(postgres: LocalPostgres, redis: LocalRedis) -> dict[str, str]:
    """A Prefect server's settings for PostgreSQL plus Redis messaging and lease storage (docs/fleet.md)."""
    return {"PREFECT_API_DATABASE_CONNECTION_URL": postgres.url,
            "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging", "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
            "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
            "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
            "PREFECT_REDIS_MESSAGING_HOST": "127.0.0.1", "PREFECT_REDIS_MESSAGING_PORT": str(redis.port)}
