"""One grid event: a limit on the GPU power drawn where it applies, from a start to an end."""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from carbon.errors import BadTrace
from carbon.series import as_utc

__all__ = ["MACHINE", "BadEvent", "GridEvent", "end_event", "parse_duration", "site_scope"]

#: the scope of an event for this machine (a plain ``gridshift run``, or every run on this node)
MACHINE = "machine"


def site_scope(site: str) -> str:
    """The scope of an event for one site of a fleet (``site:<name>``)."""
    return f"site:{site}"


class BadEvent(BadTrace):
    """An event that cannot be used (bad input: exit 2), with where it came from."""


_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``60s``, ``15m``, ``2h``, ``1h30m``, a bare number of seconds, or ISO-8601 (``PT1H``, ``PT90S``)."""
    t = text.strip()
    iso = re.fullmatch(r"P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?", t.upper())
    if iso and t.upper() != "P" and t.upper() != "PT":
        d, h, m, s = (float(x) if x else 0.0 for x in iso.groups())
        return timedelta(days=d, hours=h, minutes=m, seconds=s)
    try:
        return timedelta(seconds=float(t))
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(min|s|m|h|d)", t.lower())
    if not parts or "".join(f"{a}{b}" for a, b in parts) != re.sub(r"\s+", "", t.lower()):
        raise BadEvent(f"{text!r}: not a duration (e.g. 60s, 15m, 2h, PT1H)")
    return timedelta(seconds=sum(float(a) * _UNITS[b] for a, b in parts))


@dataclass(frozen=True)
class GridEvent:
    """At most ``cap_w`` of GPU power (or ``reduce_pct`` % less than drawn when it starts) where
    ``scope`` says (:data:`MACHINE` or ``site:<name>``), from ``start`` to ``end`` (None: until
    cancelled). ``source`` names who asked (``gridshift curtail``, ``openadr <VTN event id>``)."""

    start: datetime
    end: datetime | None
    scope: str = MACHINE
    cap_w: float | None = None
    reduce_pct: float | None = None
    source: str = "gridshift curtail"
    reason: str = ""
    id: str = field(default_factory=lambda: f"evt-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        if (self.cap_w is None) == (self.reduce_pct is None):
            raise BadEvent(f"event {self.id}: give a cap in W or a reduction in %, one of them")
        if self.cap_w is not None and not (math.isfinite(self.cap_w) and self.cap_w >= 0):
            raise BadEvent(f"event {self.id}: the cap must be a finite number of W >= 0 (got {self.cap_w})")
        if self.reduce_pct is not None and not (0 < self.reduce_pct <= 100):
            raise BadEvent(f"event {self.id}: the reduction must be above 0 and at most 100 % (got {self.reduce_pct})")
        if self.end is not None and self.end <= self.start:
            raise BadEvent(f"event {self.id}: it ends ({self.end:%Y-%m-%d %H:%M:%S}) before it starts")
        if not (self.scope == MACHINE or (self.scope.startswith("site:") and len(self.scope) > 5)):
            raise BadEvent(f"event {self.id}: scope {self.scope!r}: expected '{MACHINE}' or 'site:<name>'")
        object.__setattr__(self, "start", as_utc(self.start))
        if self.end is not None:
            object.__setattr__(self, "end", as_utc(self.end))

    def in_force(self, t: datetime) -> bool:
        return self.start <= t and (self.end is None or t < self.end)

    def over(self, t: datetime) -> bool:
        """True once the event has ended."""
        return self.end is not None and self.end <= t

    def limit(self) -> str:
        """``1200 W`` or ``25 % less``."""
        return f"{self.cap_w:.0f} W" if self.cap_w is not None else f"{self.reduce_pct:g} % less"

    def describe(self) -> str:
        until = f"to {self.end:%Y-%m-%d %H:%M:%S} UTC" if self.end is not None else "until cancelled"
        where = "this machine" if self.scope == MACHINE else f"site {self.scope[5:]}"
        why = f": {self.reason}" if self.reason else ""
        return (f"{self.id}: {self.limit()} on {where} from {self.start:%Y-%m-%d %H:%M:%S} UTC {until} "
                f"({self.source}{why})")

    def ended_at(self, t: datetime) -> "GridEvent":
        """The event cut short at ``t`` (cancelled)."""
        return replace(self, end=max(t, self.start + timedelta(microseconds=1)))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "scope": self.scope, "start": self.start.isoformat(),
                "end": self.end.isoformat() if self.end else None, "cap_w": self.cap_w, "reduce_pct": self.reduce_pct,
                "source": self.source, "reason": self.reason}

    @classmethod
    def from_json(cls, d: dict[str, Any], *, where: str = "event") -> "GridEvent":
        try:
            return cls(id=str(d["id"]), scope=str(d.get("scope", MACHINE)), start=datetime.fromisoformat(d["start"]),
                       end=datetime.fromisoformat(d["end"]) if d.get("end") else None,
                       cap_w=None if d.get("cap_w") is None else float(d["cap_w"]),
                       reduce_pct=None if d.get("reduce_pct") is None else float(d["reduce_pct"]),
                       source=str(d.get("source", "")), reason=str(d.get("reason", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadEvent(f"{where}: not a gridshift event ({type(exc).__name__}: {exc})") from None


def end_event(events: list[GridEvent], event_id: str, at: datetime) -> tuple[list[GridEvent], GridEvent | None]:
    """``events`` with ``event_id`` ended at ``at`` (kept, so runs see it end), and that event; None when
    there is no such event still on."""
    found: GridEvent | None = None
    out = []
    for e in events:
        if e.id == event_id and not e.over(at):
            e = found = e.ended_at(at)
        out.append(e)
    return out, found


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
