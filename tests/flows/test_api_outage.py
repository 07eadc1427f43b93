"""A call to the Prefect API waits out a server outage (flows.run.api_outage), against a real local HTTP server."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest

from flows.run.api_outage import through_outage, unreachable


class _Health(BaseHTTPRequestHandler):
    up = False

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if _Health.up else 503)
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def health_server():
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Health.up = False
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()


def test_a_call_made_while_the_server_is_away_is_made_again_when_it_is_back(health_server: str) -> None:
    calls, said, slept = [], [], []

    def call() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("artifact not written") from httpx.ConnectError("connection refused")
        return "written"

    def sleep(_s: float) -> None:  # the server comes back after three looks
        slept.append(_s)
        _Health.up = len(slept) >= 3

    assert through_outage(call, what="run artifact", log=said.append, api_url=health_server, sleep=sleep) == "written"
    assert len(calls) == 2 and len(slept) == 3
    assert said[0].startswith(f"run artifact: the Prefect API at {health_server} is unreachable (RuntimeError)")
    assert said[1] == "run artifact: the Prefect API is back"


def test_it_gives_up_after_its_wait_and_never_waits_for_a_refusal(health_server: str) -> None:
    now = [0.0]

    def down() -> None:
        raise httpx.ConnectError("connection refused")

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(httpx.ConnectError):
        through_outage(down, what="x", log=lambda _l: None, api_url=health_server, wait_s=30, clock=lambda: now[0],
                       sleep=sleep)
    assert 30 <= now[0] <= 35
    refused = httpx.HTTPStatusError("bad", request=httpx.Request("POST", "http://x"),
                                    response=httpx.Response(422, request=httpx.Request("POST", "http://x")))
    assert not unreachable(refused) and unreachable(httpx.ReadError("reset"))
    with pytest.raises(httpx.HTTPStatusError):
        through_outage(lambda: (_ for _ in ()).throw(refused), what="x", log=lambda _l: None, api_url=health_server,
                       sleep=lambda _s: pytest.fail("waited for a refusal"))
