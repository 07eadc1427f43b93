"""OpenADR 3 events, from a file or a VTN's ``/events`` endpoint, read into :class:`GridEvent`\\ s.

The shape read (OpenADR 3.0/3.1 ``event`` objects; the fields gridshift uses)::

    {"id": "...", "programID": "...", "eventName": "...",
     "payloadDescriptors": [{"objectType": "EVENT_PAYLOAD_DESCRIPTOR",
                             "payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
     "intervalPeriod": {"start": "2021-08-25T20:00:00Z", "duration": "PT1H"},
     "intervals": [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [12.5]}]},
                   {"id": 1, "intervalPeriod": {...}, "payloads": [...]}]}

Each interval with an ``IMPORT_CAPACITY_LIMIT`` payload ("the maximum import level for the site") is
one grid event: its cap in W (``units`` KW or W; no other unit is a power), its start and duration
from its own ``intervalPeriod`` or, without one, the event's, intervals following each other in the
order given. A start of ``0001-01-01`` means now and a duration of ``P9999Y`` until cancelled, as the
OpenADR User Guide says. Other payload types (prices, levels, alerts) are not limits and are skipped.
A file or an endpoint holds one event or a list of them (``GET /events`` answers a list).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

from carbon.events.event import MACHINE, BadEvent, GridEvent, parse_duration
from carbon.series import as_utc

__all__ = ["CAPACITY_LIMIT", "OPENADR_TOKEN_ENV", "events_from_openadr", "read_openadr"]

#: the OpenADR 3 payload type that is a power limit
CAPACITY_LIMIT = "IMPORT_CAPACITY_LIMIT"
#: a bearer token for the VTN (OpenADR 3 VTNs authenticate clients with OAuth2 client credentials)
OPENADR_TOKEN_ENV = "GRIDSHIFT_OPENADR_TOKEN"
_W_PER_UNIT = {"KW": 1000.0, "W": 1.0}


def _when(period: dict[str, Any] | None, where: str, now: datetime) -> tuple[datetime | None, timedelta | None]:
    if not period:
        return None, None
    start = None
    if period.get("start"):
        text = str(period["start"])
        if text.startswith("0001-01-01"):
            start = now
        else:
            try:
                start = as_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
            except ValueError:
                raise BadEvent(f"{where}: intervalPeriod.start {text!r} is not a date-time") from None
    duration = None
    if period.get("duration"):
        text = str(period["duration"]).upper()
        if text.startswith("P9999Y"):
            duration = timedelta.max
        else:
            duration = parse_duration(text)
    return start, duration


def events_from_openadr(data: Any, *, now: datetime, scope: str = MACHINE, where: str = "openadr") -> list[GridEvent]:
    """The capacity limits in one OpenADR 3 event or a list of them (see the module docstring)."""
    items = data if isinstance(data, list) else [data]
    out: list[GridEvent] = []
    for k, ev in enumerate(items):
        at = f"{where}: event {ev.get('id', k + 1) if isinstance(ev, dict) else k + 1}"
        if not isinstance(ev, dict) or not isinstance(ev.get("intervals", []), list):
            raise BadEvent(f"{at}: not an OpenADR 3 event (an object with intervals)")
        units = {str(d.get("payloadType")): str(d.get("units") or "").upper()
                 for d in ev.get("payloadDescriptors") or [] if isinstance(d, dict)}
        start, duration = _when(ev.get("intervalPeriod"), at, now)
        for j, iv in enumerate(ev.get("intervals") or []):
            own_start, own_duration = _when(iv.get("intervalPeriod") if isinstance(iv, dict) else None, at, now)
            span_start, span = own_start or start, own_duration or duration
            limits = [p for p in (iv.get("payloads") or []) if isinstance(p, dict) and p.get("type") == CAPACITY_LIMIT]
            if span_start is not None and span is not None and own_start is None and span != timedelta.max:
                start = span_start + span  # the next interval follows this one
            if not limits:
                continue
            unit = units.get(CAPACITY_LIMIT, "")
            if unit not in _W_PER_UNIT:
                raise BadEvent(f"{at}: {CAPACITY_LIMIT} needs a payloadDescriptor with units KW (or W), got {unit or 'none'}")
            values = limits[0].get("values") or []
            if len(values) != 1 or isinstance(values[0], bool) or not isinstance(values[0], (int, float)):
                raise BadEvent(f"{at} interval {iv.get('id', j)}: {CAPACITY_LIMIT} takes one number, got {values!r}")
            if span_start is None:
                raise BadEvent(f"{at} interval {iv.get('id', j)}: no intervalPeriod start (on the interval or the event)")
            end = None if span is None or span == timedelta.max else span_start + span
            name = ev.get("eventName") or ev.get("programID") or ""
            out.append(GridEvent(id=f"openadr-{ev.get('id', k)}-{iv.get('id', j)}", scope=scope, start=span_start, end=end,
                                 cap_w=float(values[0]) * _W_PER_UNIT[unit],
                                 source=f"openadr event {ev.get('id', k)}", reason=str(name)))
    return out


def read_openadr(source: str, *, now: datetime, scope: str = MACHINE, client: Any = None,
                 program: str | None = None, sleep: Callable[[float], None] = time.sleep) -> list[GridEvent]:
    """The capacity limits of the OpenADR 3 events in a file, or at a VTN (``http(s)://.../events``,
    read as the carbon providers read: retries on 429/5xx, one clear CarbonError; a bearer token from
    ``GRIDSHIFT_OPENADR_TOKEN``). ``program``: only that program's events (the ``programID`` query)."""
    if source.startswith(("http://", "https://")):
        from carbon.providers._http import JsonApi

        base, _, last = source.rstrip("/").rpartition("/")
        token = os.environ.get(OPENADR_TOKEN_ENV)
        api = JsonApi(provider="openadr", base_url=base, client=client, sleep=sleep,
                      headers={"Authorization": f"Bearer {token}"} if token else None)
        try:
            data = api.get_json(last, params={"programID": program} if program else None)
        finally:
            api.close()
        return events_from_openadr(data, now=now, scope=scope, where=source)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadEvent(f"{source}: cannot read OpenADR events: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadEvent(f"{source}:{exc.lineno}: not JSON: {exc.msg}") from None
    events = events_from_openadr(data, now=now, scope=scope, where=source)
    if program is not None:
        keep = {str(e.get("id")) for e in (data if isinstance(data, list) else [data])
                if isinstance(e, dict) and e.get("programID") == program}
        events = [e for e in events if e.source.removeprefix("openadr event ") in keep]
    return events

