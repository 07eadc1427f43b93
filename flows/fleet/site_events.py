"""A site's grid events in a Prefect variable: ``gridshift curtail --site`` writes it, the site's runs poll it.

The runs placed on a site run on its node behind a work pool, wherever the operator is: the event
travels through the fleet's Prefect server, in the variable ``gridshift-events-<site>`` (a JSON list
of :class:`carbon.events.GridEvent`). A run on the site reads it every few seconds while it trains
(:class:`flows.cap_watch.CapWatch`); on the node itself, ``gridshift curtail`` without ``--site``
(the machine's event file) reaches the same runs without a server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from carbon.events import GridEvent, end_event, site_scope

__all__ = ["EVENTS_VARIABLE_PREFIX", "add_site_event", "cancel_site_event", "read_site_events", "site_events_variable"]

EVENTS_VARIABLE_PREFIX = "gridshift-events-"


def site_events_variable(site: str) -> str:
    """The Prefect variable that holds ``site``'s grid events."""
    return f"{EVENTS_VARIABLE_PREFIX}{site}"


def read_site_events(site: str) -> list[GridEvent]:
    """``site``'s events as the fleet's Prefect server holds them (none when the variable is unset)."""
    from prefect.variables import Variable

    value = Variable.get(site_events_variable(site), default=None)
    rows = value if isinstance(value, list) else []
    return [GridEvent.from_json(r, where=f"variable {site_events_variable(site)}") for r in rows if isinstance(r, dict)]


def _write(site: str, change: Callable[[list[GridEvent]], list[GridEvent]]) -> list[GridEvent]:
    from prefect.variables import Variable

    events = change(read_site_events(site))
    value: Any = [e.to_json() for e in events]
    Variable.set(site_events_variable(site), value, tags=["gridshift", "grid-events"], overwrite=True)
    return events


def add_site_event(site: str, event: GridEvent) -> None:
    """Add ``event`` to ``site``'s variable (replacing one with the same id); its scope must be the site's."""
    if event.scope != site_scope(site):
        raise ValueError(f"event {event.id} is for {event.scope}, not {site_scope(site)}")
    _write(site, lambda evs: [e for e in evs if e.id != event.id] + [event])


def cancel_site_event(site: str, event_id: str, now: datetime) -> GridEvent | None:
    """End ``event_id`` at ``now`` in ``site``'s variable; None when it is not there."""
    found: list[GridEvent | None] = [None]

    def cut(evs: list[GridEvent]) -> list[GridEvent]:
        out, found[0] = end_event(evs, event_id, now)
        return out

    _write(site, cut)
    return found[0]
