"""A real local HTTP server that plays the UK Carbon Intensity API with one number the test sets.

Every ``/intensity...`` request (current, forecast, history) is answered with half-hour rows around
the time of the request, all at :attr:`SwitchableGrid.g_per_kwh`. A test sets it from clean to dirty
when the job it watches has begun training, so a real ``gridshift run`` switches mode mid-run on an
event, not on the clock of a quiet machine::

    with SwitchableGrid(100.0) as grid:        # policy: carbon: {provider: ukgrid, base_url: grid.url}
        ... start gridshift run; once the job prints its first step:
        grid.g_per_kwh = 500.0
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HALF_HOUR = timedelta(minutes=30)


def _rows(value: float, now: datetime) -> list[dict[str, Any]]:
    start = now.replace(minute=0 if now.minute < 30 else 30, second=0, microsecond=0) - 14 * 24 * 2 * _HALF_HOUR
    out = []
    for i in range(14 * 24 * 2 + 4 * 24 * 2):  # two weeks back (history), four days on (forecast)
        t = start + i * _HALF_HOUR
        out.append({"from": f"{t:%Y-%m-%dT%H:%MZ}", "to": f"{t + _HALF_HOUR:%Y-%m-%dT%H:%MZ}",
                    "intensity": {"forecast": value, "actual": value, "index": "moderate"}})
    return out


class SwitchableGrid:
    """The server; ``url`` is its base URL, ``g_per_kwh`` what it answers from now on."""

    def __init__(self, g_per_kwh: float) -> None:
        self.g_per_kwh = g_per_kwh
        grid = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if not self.path.startswith("/intensity"):
                    self.send_error(404)
                    return
                body = json.dumps({"data": _rows(grid.g_per_kwh, datetime.now(timezone.utc))}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="switchable-grid", daemon=True)

    def __enter__(self) -> "SwitchableGrid":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
