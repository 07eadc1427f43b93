"""A call to the Prefect API that waits out a server outage instead of losing what it carries.

Prefect's client retries a failed request for about a minute; a server restarted after two minutes
is longer than that. A deployment run whose job finished while the server was away used to lose its
report artifact, and its flow run ended Failed (ConnectError) although the job had completed. Here the
call is tried; when the API is unreachable (the connection refused or dropped, or the server
answering 502-504), it waits for ``GET /health`` to answer, for up to ``wait_s``, saying so once, and
tries again. The run stays Running meanwhile, so the state it then ends in is the one it earned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["API_RETURN_WAIT_S", "through_outage", "unreachable"]

T = TypeVar("T")

#: how long a finished deployment run waits for its server to come back before giving up its artifact
API_RETURN_WAIT_S = 900.0
_POLL_S = 5.0


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the API could not be reached, rather than refused the request."""
    import httpx

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError,
                             httpx.ConnectTimeout, httpx.ReadTimeout, ConnectionError)):
            return True
        response = getattr(seen, "response", None)
        if response is not None and getattr(response, "status_code", 0) in (502, 503, 504):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _healthy(api_url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api_url.rstrip('/')}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def through_outage(call: Callable[[], T], *, what: str, log: Callable[[str], None], wait_s: float = API_RETURN_WAIT_S,
                   api_url: str | None = None, poll_s: float = _POLL_S,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, once more after the API came back when it failed because the API was away (up to ``wait_s``).

    Raises what the call raised when the API did not come back in time, or when the failure was not an
    outage. ``api_url`` defaults to Prefect's ``PREFECT_API_URL`` setting.
    """
    try:
        return call()
    except Exception as exc:
        if wait_s <= 0 or not unreachable(exc):
            raise
        failure = exc
    if api_url is None:
        from prefect.settings import PREFECT_API_URL

        api_url = str(PREFECT_API_URL.value() or "")
    log(f"{what}: the Prefect API at {api_url} is unreachable ({type(failure).__name__}); waiting up to "
        f"{wait_s:.0f} s for it to come back")
    deadline = clock() + wait_s
    while not (api_url and _healthy(api_url)):
        if clock() >= deadline:
            raise failure
        sleep(poll_s)  # the edge that waits for a real server
    log(f"{what}: the Prefect API is back")
    return call()
