"""A real local HTTP server that plays Energy-Charts' ``/price`` and aWATTar's ``/v1/marketdata``.

It answers with hourly prices from ``price(t)`` (EUR/MWh, negative ones included) for the hours of
the request that start before ``published_until`` (the services list only what the auction has
published), and can be switched into a failure mode::

    with PriceServer() as server:
        server.failure = "503"             # every request now gets 503 + Retry-After: 0
        EnergyChartsPrices(base_url=server.url) ...

``timeout`` holds the request until the server stops (the client's timeout ends it; nothing sleeps).
"""

from __future__ import annotations

import json
import math
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

FAILURES = ("429", "500", "503", "timeout", "malformed", "empty", "unknown-zone", "no-coverage", "wrong-unit")
_HOUR = timedelta(hours=1)


def daily_price(t: datetime) -> float:
    """A day's shape: cheap at 13:00 UTC (below zero), dear in the evening."""
    return round(40.0 - 60.0 * math.cos((t.hour - 13) / 24 * 2 * math.pi), 2)


class PriceServer:
    """The fake price services on a real socket; ``requests`` lists (path, query) as seen."""

    def __init__(self, price: Callable[[datetime], float] = daily_price,
                 published_until: datetime | None = None) -> None:
        self.price, self.published_until = price, published_until
        self.failure: str | None = None
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                server.requests.append((url.path, query))
                status, headers, body = server.answer(url.path, query)
                if status == 0:  # timeout: hold until the server stops
                    server._stop.wait()
                    return
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="price-server", daemon=True)

    def _hours(self, a: datetime, b: datetime) -> list[datetime]:
        t = a.replace(minute=0, second=0, microsecond=0)
        out = []
        while t < b and (self.published_until is None or t < self.published_until):
            out.append(t)
            t += _HOUR
        return out

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        j = lambda obj: json.dumps(obj).encode()  # noqa: E731
        mode = self.failure
        if mode == "timeout":
            return 0, {}, b""
        if mode == "429":
            return 429, {"Retry-After": "0"}, j({"detail": "Too Many Requests"})
        if mode in ("500", "503"):
            return int(mode), {"Retry-After": "0"}, j({"detail": "Internal Server Error"})
        if mode == "malformed":
            return 200, {}, b'{"unix_seconds": [1, 2'
        if mode == "empty":
            return 200, {}, b""
        if path == "/price":
            if mode == "unknown-zone" or query.get("bzn", [""])[0] not in ("DE-LU", "AT", "FR", "NL"):
                return 422, {}, j({"detail": [{"loc": ["query", "bzn"], "msg": "value is not a valid enumeration member",
                                               "type": "type_error.enum"}]})
            if mode == "no-coverage":
                return 404, {}, j({"detail": "no data for the requested period"})
            a = datetime.fromtimestamp(int(query["start"][0]), tz=timezone.utc)
            b = datetime.fromtimestamp(int(query["end"][0]), tz=timezone.utc)
            hours = self._hours(a, b)
            return 200, {}, j({"license_info": "CC BY 4.0 from Bundesnetzagentur | SMARD.de",
                               "unix_seconds": [int(t.timestamp()) for t in hours],
                               "price": [self.price(t) for t in hours],
                               "unit": "EUR / kWh" if mode == "wrong-unit" else "EUR / MWh", "deprecated": False})
        if path == "/v1/marketdata":
            if mode in ("unknown-zone", "no-coverage"):
                return 404, {}, j({"detail": "Not Found"})
            a = datetime.fromtimestamp(int(query["start"][0]) / 1000, tz=timezone.utc)
            b = datetime.fromtimestamp(int(query["end"][0]) / 1000, tz=timezone.utc)
            rows = [{"start_timestamp": int(t.timestamp() * 1000), "end_timestamp": int((t + _HOUR).timestamp() * 1000),
                     "marketprice": self.price(t), "unit": "ct/kWh" if mode == "wrong-unit" else "Eur/MWh"}
                    for t in self._hours(a, b)]
            return 200, {}, j({"object": "list", "data": rows, "url": "/de/v1/marketdata"})
        return 404, {}, j({"detail": "Not Found"})

    def __enter__(self) -> "PriceServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
