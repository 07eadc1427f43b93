"""A real local HTTP server that plays Electricity Maps, WattTime, the UK grid API and a Carbon Aware SDK.

It listens on 127.0.0.1 (port 0: the OS picks one), answers with the real (or documented) bodies in
``tests/data/carbon/`` and can be switched into any documented failure mode::

    with ProviderServer() as server:
        server.failure = "429"            # every request now gets 429 + Retry-After: 0
        ... gridshift intensity --provider ukgrid --base-url {server.url} --json ...

Credentials it accepts: ``EM_TOKEN`` in ``auth-token``; WattTime Basic ``WT_USER``/``WT_PASSWORD`` at
``/login``, then any bearer token it issued (``revoke_tokens()`` expires them: the next data call
gets WattTime's HTML 403). ``timeout`` mode holds the request until the server stops (never sleeps).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DATA = Path(__file__).resolve().parents[1] / "data" / "carbon"
EM_TOKEN = "em-test-token-7f3a"
WT_USER = "alice"
WT_PASSWORD = "wt-test-password-91c"

#: every failure mode the server can play; see ``_failure``
FAILURES = (
    "401", "403-html", "429", "401-ratelimit", "unknown-zone", "no-coverage", "500", "503", "timeout",
    "malformed", "empty", "204", "wrong-shape",
)


def body(name: str) -> bytes:
    return (DATA / name).read_bytes()


def load(name: str) -> Any:
    return json.loads(body(name))


@dataclass
class Seen:
    """One request as the server saw it."""

    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


def _family(path: str) -> str:
    if path.startswith("/v3/carbon-intensity"):
        return "electricitymaps"
    if path == "/login" or path.startswith("/v3/"):
        return "watttime"
    if path.startswith(("/intensity", "/regional")):
        return "ukgrid"
    if path.startswith("/emissions"):
        return "casdk"
    return "unknown"


_JSON = {"Content-Type": "application/json"}
_HTML = {"Content-Type": "text/html"}


def _failure(mode: str, family: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) for ``mode`` as ``family`` would answer it."""
    j = lambda obj: json.dumps(obj).encode()  # noqa: E731
    if mode in ("401", "401-ratelimit"):
        # Electricity Maps answers a rate-limited caller with the same 401 as a bad token (contrib #8047)
        return 401, _JSON, j({"error": "Invalid auth-token"})
    if mode == "403-html":
        return 403, _HTML, body("wt_login_403.html")
    if mode == "429":
        return 429, {"Retry-After": "0", **_JSON}, b"" if family == "watttime" else j({"error": "Too Many Requests"})
    if mode == "unknown-zone":
        if family == "casdk":
            return 400, _JSON, body("casdk_error_unknown_region.json")
        if family == "ukgrid":
            return 400, _JSON, body("uk_error_400_docs.json")
        if family == "watttime":
            return 404, _JSON, body("wt_error_coordinates_not_found.json")
        return 400, _JSON, j({"error": "Zone 'XX-NOWHERE' does not exist"})
    if mode == "no-coverage":
        if family == "watttime":
            return 403, _JSON, body("wt_error_invalid_scope.json")
        if family == "casdk":
            return 200, _JSON, b"[]"
        if family == "ukgrid":
            return 200, _JSON, j({"data": []})
        latest = load("em_latest_US-CAR-DUK.json")
        latest["carbonIntensity"] = None
        return 200, _JSON, j(latest)
    if mode == "500":
        if family == "ukgrid":
            return 500, _JSON, j({"error": {"code": "500 Internal Server Error", "message": "Internal Server Error"}})
        if family == "casdk":
            return 500, _JSON, j({"title": "InternalServerError", "status": 500, "detail": "boom"})
        return 500, _JSON, j({"error": "Internal Server Error"})
    if mode == "503":
        return 503, {"Retry-After": "0", "Content-Type": "text/plain"}, b"Service Unavailable"
    if mode == "malformed":
        return 200, _JSON, b'{"zone": "DE", "carbonIntensity": '
    if mode == "empty":
        return 200, _JSON, b""
    if mode == "204":
        return 204, {}, b""
    if mode == "wrong-shape":
        return 200, _JSON, b'{"unexpected": true}'
    raise ValueError(f"unknown failure mode {mode!r}")


class ProviderServer:
    """The fake providers on a real socket. Use as a context manager (or ``start()``/``stop()``)."""

    def __init__(self) -> None:
        self.failure: str | None = None
        #: when set, the failure applies only to paths starting with one of these
        self.failure_paths: tuple[str, ...] | None = None
        self.casdk_has_forecast = True
        self.requests: list[Seen] = []
        self._tokens: set[str] = set()
        self._issued = 0
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "ProviderServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                server._handle(self)

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="provider-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ProviderServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        with self._lock:
            self.failure = None
            self.failure_paths = None
            self.casdk_has_forecast = True
            self.requests.clear()

    def revoke_tokens(self) -> None:
        """Expire every WattTime token issued so far."""
        with self._lock:
            self._tokens.clear()

    @property
    def logins(self) -> int:
        return self._issued

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    # -- answering ----------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        path, query = parts.path, parse_qs(parts.query)
        with self._lock:
            self.requests.append(Seen(path=path, query=query, headers={k.lower(): v for k, v in h.headers.items()}))
            mode = self.failure
            if mode and self.failure_paths is not None and not path.startswith(self.failure_paths):
                mode = None
        family = _family(path)
        if mode == "timeout":
            self._release.wait(timeout=30)  # the client gives up long before
            status, headers, payload = 504, {}, b""
        elif mode:
            status, headers, payload = _failure(mode, family, path)
        else:
            status, headers, payload = getattr(self, f"_{family}")(path, query, h)
        try:
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            if payload:
                h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
            pass

    def _unknown(self, path: str, query: dict[str, list[str]], h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        return 404, _JSON, b'{"message":"no Route matched with those values"}'

    def _electricitymaps(self, path: str, query: dict[str, list[str]], h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if h.headers.get("auth-token") != EM_TOKEN:
            return 401, _JSON, b'{"error":"Invalid auth-token"}'
        files = {
            "/v3/carbon-intensity/latest": "em_latest_US-CAR-DUK.json",
            "/v3/carbon-intensity/history": "em_history_DE.json",
            "/v3/carbon-intensity/forecast": "em_forecast_DE_docs-shape.json",
            "/v3/carbon-intensity/past-range": "em_past-range_DK-DK2.json",
        }
        if path not in files:
            return self._unknown(path, query, h)
        return 200, _JSON, body(files[path])

    def _watttime(self, path: str, query: dict[str, list[str]], h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if path == "/login":
            expected = "Basic " + base64.b64encode(f"{WT_USER}:{WT_PASSWORD}".encode()).decode()
            if h.headers.get("Authorization") != expected:
                return 403, _HTML, body("wt_login_403.html")
            with self._lock:
                self._issued += 1
                token = f"wt-token-{self._issued}"
                self._tokens.add(token)
            return 200, _JSON, json.dumps({"token": token}).encode()
        auth = h.headers.get("Authorization", "")
        with self._lock:
            valid = auth.startswith("Bearer ") and auth[7:] in self._tokens
        if not valid:
            return 403, _HTML, body("wt_login_403.html")
        if path == "/v3/forecast":
            data = load("wt_forecast_CAISO_NORTH_docs-example.json")
            if query.get("horizon_hours") == ["0"]:
                data["data"] = data["data"][:1]
            return 200, _JSON, json.dumps(data).encode()
        files = {
            "/v3/historical": "wt_historical_CAISO_NORTH_docs-example.json",
            "/v3/signal-index": "wt_signal-index_PSCO.json",
            "/v3/region-from-loc": "wt_region-from-loc_PSCO.json",
        }
        if path not in files:
            return self._unknown(path, query, h)
        return 200, _JSON, body(files[path])

    def _ukgrid(self, path: str, query: dict[str, list[str]], h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if path == "/intensity":
            return 200, _JSON, body("uk_intensity_docs.json")
        if re.fullmatch(r"/intensity/[^/]+/(fw24h|fw48h|pt24h|[^/]+)", path):
            return 200, _JSON, body("uk_intensity_fw48h_docs-shape.json")
        m = re.fullmatch(r"/regional/(?:intensity/[^/]+/[^/]+/)?(regionid|postcode)/([^/]+)", path)
        if m:
            if m.group(1) == "regionid" and m.group(2) != "3":
                return 400, _JSON, body("uk_error_400_docs.json")
            regional = load("uk_regional_regionid_3_docs.json")
            if path.startswith("/regional/intensity/"):
                regional["data"] = regional["data"][0]  # the range variant wraps one object, not a list
            return 200, _JSON, json.dumps(regional).encode()
        return self._unknown(path, query, h)

    def _casdk(self, path: str, query: dict[str, list[str]], h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        locations = query.get("location", [])
        if not locations or any(loc not in ("eastus", "northeurope", "westus") for loc in locations):
            return 400, _JSON, body("casdk_error_unknown_region.json")
        if path == "/emissions/bylocations":
            return 200, _JSON, body("casdk_bylocations_eastus_docs.json")
        if path == "/emissions/forecasts/current":
            if not self.casdk_has_forecast:
                return 501, _JSON, json.dumps({"title": "NotImplementedException", "status": 501,
                                               "detail": "The method or operation is not implemented."}).encode()
            return 200, _JSON, body("casdk_forecast_northeurope_docs.json")
        return self._unknown(path, query, h)
