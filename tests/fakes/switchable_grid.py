"""A real local HTTP server that plays the UK Carbon Intensity API with a number the test sets.

Every ``/intensity...`` request (current, forecast, history) is answered with rows around the time of
the request, each at :attr:`SwitchableGrid.g_per_kwh`: one number (a test sets it from clean to dirty
when the job it watches has begun training, so a real ``gridshift run`` switches mode mid-run on an
event, not on the clock of a quiet machine), or a function of the row's start (a forecast with a
dirty stretch, for the planner to pause a job through). Rows are the API's half hours, except for
``row_s``-second rows from an hour before the request to three hours after it::

    with SwitchableGrid(100.0) as grid:        # policy: carbon: {provider: ukgrid, base_url: grid.url}
        ... start gridshift run; once the job prints its first step:
        grid.g_per_kwh = 500.0

Also used by ``benchmarks/device/hf_trainer_check.py`` on the GPU machine.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HALF_HOUR = timedelta(minutes=30)
Value = float | Callable[[datetime], float]


def _row(start: datetime, end: datetime, value: Value) -> dict[str, Any]:
    v = value(start) if callable(value) else value
    return {"from": start.isoformat().replace("+00:00", "Z"), "to": end.isoformat().replace("+00:00", "Z"),
            "intensity": {"forecast": v, "actual": v, "index": "moderate"}}


def _rows(value: Value, now: datetime, row_s: float) -> list[dict[str, Any]]:
    half = now.replace(minute=0 if now.minute < 30 else 30, second=0, microsecond=0)
    fine_from, fine_to = half - 2 * _HALF_HOUR, half + 6 * _HALF_HOUR
    out = [_row(t, t + _HALF_HOUR, value)  # two weeks back (history)
           for t in (fine_from - i * _HALF_HOUR for i in range(14 * 48, 0, -1))]
    step = timedelta(seconds=row_s)
    t = fine_from
    while t < fine_to:
        out.append(_row(t, t + step, value))
        t += step
    out += [_row(fine_to + i * _HALF_HOUR, fine_to + (i + 1) * _HALF_HOUR, value) for i in range(4 * 48)]  # four days on
    return out


class SwitchableGrid:
    """The server; ``url`` is its base URL, ``g_per_kwh`` what it answers from now on."""

    def __init__(self, g_per_kwh: Value, *, row_s: float = 1800.0) -> None:
        self.g_per_kwh = g_per_kwh
        self.row_s = row_s
        grid = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if not self.path.startswith("/intensity"):
                    self.send_error(404)
                    return
                body = json.dumps({"data": _rows(grid.g_per_kwh, datetime.now(timezone.utc), grid.row_s)}).encode()
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
