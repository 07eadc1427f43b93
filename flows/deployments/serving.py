"""What ``gridshift serve`` needs from Prefect, checked before it starts: a reachable API and the deployments.

``serve`` triggers deployments on a long-running Prefect server; it must never fall back to an
ephemeral server of its own (which would take the runs to a database no worker reads) and never
send Prefect telemetry. :func:`quiet_prefect_environment` sets that up before Prefect is imported;
:func:`check_prefect` answers, with one line, why serve cannot start.
"""

from __future__ import annotations

import os

import httpx

__all__ = ["PrefectNotReady", "check_prefect", "prefect_api_url", "quiet_prefect_environment"]

#: Prefect settings serve pins: no ephemeral server, no telemetry or analytics, and one quick
#: client attempt per trigger (serve retries with its own backoff, and keeps its loop responsive)
_SERVE_ENV = {
    "PREFECT_SERVER_EPHEMERAL_ENABLED": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
    "PREFECT_CLIENT_MAX_RETRIES": "0",
}


class PrefectNotReady(Exception):
    """The Prefect API is not configured or not reachable, or a deployment is not on it (exit 3)."""


def quiet_prefect_environment() -> None:
    """Pin :data:`_SERVE_ENV` in this process's environment (a value the user set is kept)."""
    for name, value in _SERVE_ENV.items():
        os.environ.setdefault(name, value)


def prefect_api_url() -> str:
    """``PREFECT_API_URL`` from the environment or the active Prefect profile; PrefectNotReady when unset."""
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        from prefect.settings import PREFECT_API_URL

        url = PREFECT_API_URL.value()
    if not url:
        raise PrefectNotReady("serve needs a running Prefect server: start one (`prefect server start`) and set "
                              "PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)")
    return str(url).rstrip("/")


def check_prefect(api_url: str, deployments: list[str], *, client: httpx.Client | None = None) -> None:
    """Raise PrefectNotReady unless ``api_url`` answers its health check and has every ``flow/deployment``."""
    headers = {"Authorization": f"Bearer {os.environ['PREFECT_API_KEY']}"} if os.environ.get("PREFECT_API_KEY") else {}
    own = client is None
    http = client or httpx.Client(timeout=10.0, headers=headers)
    try:
        try:
            health = http.get(f"{api_url}/health")
        except httpx.HTTPError as exc:
            raise PrefectNotReady(f"the Prefect API at {api_url} is not reachable ({type(exc).__name__}: {exc}); "
                                  "start the server or fix PREFECT_API_URL") from None
        if health.status_code != 200:
            raise PrefectNotReady(f"the Prefect API at {api_url} answered its health check with HTTP {health.status_code}")
        for name in deployments:
            flow, _, dep = name.partition("/")
            try:
                resp = http.get(f"{api_url}/deployments/name/{flow}/{dep}")
            except httpx.HTTPError as exc:
                raise PrefectNotReady(f"the Prefect API at {api_url} failed reading deployment {name}: {exc}") from None
            if resp.status_code == 404:
                raise PrefectNotReady(f"deployment {name} is not on the Prefect server at {api_url}: create it with "
                                      "`gridshift deploy POLICY --no-schedule`")
            if resp.status_code != 200:
                raise PrefectNotReady(f"the Prefect API at {api_url} answered HTTP {resp.status_code} for deployment {name}")
    finally:
        if own:
            http.close()
