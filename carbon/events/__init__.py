"""Grid events: limits on a site's or a machine's power that the grid (or its operator) asks for.

``event.py`` (:class:`GridEvent`, one limit: a cap in W or a reduction in %, a start, an end, where it
applies, and where it came from), ``store.py`` (the events of this machine and its sites, in one file
that ``gridshift curtail`` writes and every running run watches), ``openadr.py`` (OpenADR 3 events,
from a file or a VTN's ``/events`` endpoint, read into grid events: capacity-limit payloads).

Knows nothing of the other rooms: the scheduler turns an event into a run's power cap.
"""

from carbon.events.event import MACHINE, BadEvent, GridEvent, end_event, parse_duration, site_scope
from carbon.events.openadr import events_from_openadr, read_openadr
from carbon.events.store import EventStore, default_store

__all__ = ["MACHINE", "BadEvent", "EventStore", "GridEvent", "default_store", "end_event", "events_from_openadr",
           "parse_duration", "read_openadr", "site_scope"]
