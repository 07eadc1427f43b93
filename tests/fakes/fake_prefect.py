"""Test doubles for what `gridshift serve` asks of Prefect.

``FakeDeployments.trigger`` behaves like ``flows.deployments.deploy.trigger_deployment`` against a server that
honours idempotency keys: the first call with a key creates a flow run, a later one returns the same
run. It can be told to fail (``down``, ``fail_next``, a random ``failure_rate``) before creating the
run, or after it (``lose_answer_rate``: the run exists but the caller sees an error, as when the
connection drops mid-request). ``created`` counts creations per key: more than one is a doubled run.

``PrefectApiStub`` is a real local HTTP server that answers the two questions serve asks before it
starts (``/api/health`` and ``/api/deployments/name/{flow}/{name}``).
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class PrefectDown(ConnectionError):
    """What the trigger sees while the fake server is down."""


@dataclass
class FakeDeployments:
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    failure_rate: float = 0.0
    lose_answer_rate: float = 0.0
    down: bool = False
    fail_next: int = 0
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    failures: int = 0

    def trigger(self, *, key: str, deployment: str, **params: Any) -> str:
        self.calls[key] += 1
        if self.down:
            self.failures += 1
            raise PrefectDown("All connection attempts failed")
        if self.fail_next > 0:
            self.fail_next -= 1
            self.failures += 1
            raise PrefectDown("Server disconnected without sending a response")
        if self.failure_rate and self.rng.random() < self.failure_rate:
            self.failures += 1
            raise PrefectDown("HTTP 503 Service Unavailable")
        if key not in self.runs:
            self.created[key] += 1
            self.runs[key] = {"id": f"run-{len(self.runs) + 1}", "deployment": deployment, **params}
        if self.lose_answer_rate and self.rng.random() < self.lose_answer_rate:
            self.failures += 1
            raise PrefectDown("ReadTimeout after the flow run was created")
        return self.runs[key]["id"]


class JsonServer:
    """A real local HTTP server answering GETs with JSON: ``answer(path) -> (status, body)``; ``paths`` seen."""

    def __init__(self, answer: Callable[[str], tuple[int, Any]]) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.paths.append(self.path)
                status, body = answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> "JsonServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class PrefectApiStub(JsonServer):
    """``with PrefectApiStub(["gridshift-nightly/nightly-retrain"]) as api: api.url`` ends in ``/api``."""

    def __init__(self, deployments: list[str]) -> None:
        super().__init__(self._answer)
        self.deployments = set(deployments)
        self.url += "/api"

    def _answer(self, path: str) -> tuple[int, Any]:
        if path == "/api/health":
            return 200, True
        name = path.removeprefix("/api/deployments/name/")
        if name != path:
            return (200, {"id": "d1", "name": name}) if name in self.deployments else (404, {"detail": "Deployment not found"})
        return 404, {"detail": "Not found"}
