"""GPUs freed early go to the run queued next on their site: it starts now, not at its booked start.

On a full fleet, placement books a run meant to start now at the moment the first GPU frees up, by
the expected durations of the runs before it (``queued``, see :mod:`flows.fleet.placing`). A run that ends
sooner than expected would leave its GPUs idle until that booked start. So a site run, once it has
given its GPUs back, moves the first run queued on its site (first by its place in line,
:mod:`flows.fleet.gpu_line`) to start now, when the node has room for it through its whole booked length
beside every other booking (changeover included) and Prefect counts that many of its GPU slots
free. The move happens under the site's placing lock, so no placement reads the bookings
half-moved, and it is recorded in the run's ``placement`` parameter (``moved_up_from``,
``moved_up_at``) beside the new start and finish.

Only a run still Scheduled moves; one a worker has already handed to a process waits for its booked
time there. Only the first in line moves: when it cannot, nothing behind it overtakes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from flows.fleet.gpu_line import PlaceInLine, place_of_run
from scheduler.policy.types import Site
from scheduler.service.placement import Booking, has_room

__all__ = ["LOCK_WAIT_S", "MIN_GAIN_S", "MovedUp", "SiteRun", "next_to_start_early", "start_queued_early"]

#: a queued run due sooner than this is left alone: moving it would not start it measurably earlier
#: (a worker polls for runs every few seconds and boots a process in several more)
MIN_GAIN_S = 30.0
#: how long a finished run waits for a placement in progress on its site before it leaves the move be
LOCK_WAIT_S = 10.0


@dataclass(frozen=True)
class SiteRun:
    """A run placed on a site that has not finished: its place in line, its booking and its Prefect state."""

    place: PlaceInLine
    booking: Booking
    state: str


@dataclass(frozen=True)
class MovedUp:
    """A queued run moved to start now: which, and from when."""

    flow_run_id: str
    name: str
    booked_start: datetime
    start: datetime

    def sentence(self, site: str) -> str:
        return (f"{site}: GPUs free {(self.booked_start - self.start).total_seconds():.0f} s before the next queued "
                f"run's booked start; flow run {self.name} ({self.flow_run_id}) starts now instead of at "
                f"{self.booked_start:%H:%M:%S} UTC")


def next_to_start_early(site: Site, runs: Sequence[SiteRun], now: datetime,
                        min_gain_s: float = MIN_GAIN_S) -> SiteRun | None:
    """The queued run that can start at ``now`` on ``site`` instead of at its booked start, or None.

    ``runs`` are the site's unfinished runs but the one that just gave its GPUs back. Only the first
    queued run in line that has not started is considered; it moves when it is still Scheduled, due
    at least ``min_gain_s`` from now, and the node has room for its booked length from now on beside
    every other run's booking.
    """
    queued = sorted((r for r in runs if r.booking.queued and r.state != "RUNNING"), key=lambda r: r.place)
    if not queued:
        return None
    first = queued[0]
    if first.state != "SCHEDULED" or (first.booking.start - now).total_seconds() < min_gain_s:
        return None
    others = [r.booking for r in runs if r is not first]
    length = first.booking.end - first.booking.start
    return first if has_room(site, first.booking.gpus, others, now, now + length) else None


def start_queued_early(site: Site, *, finished_run_id: str, now: datetime | None = None,
                       lock_wait_s: float = LOCK_WAIT_S) -> MovedUp | None:
    """Move the next run queued on ``site`` to start now, if it can (see :func:`next_to_start_early`).

    Called by a site run (``finished_run_id``) once it has given its GPUs back. Returns the move, or
    None. Raises RuntimeError when the site's placing lock is not free within ``lock_wait_s``.
    """
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    from flows.fleet.gpus import gpu_limit_name, room_for
    from flows.fleet.names import utc
    from flows.fleet.placing import placing_lock

    now = utc(now) if now is not None else datetime.now(timezone.utc)
    if _choose(site, finished_run_id, now) is None:
        return None  # nothing to move (the usual end of a run): no lock taken, no placement held up
    with placing_lock([site.name], wait_s=lock_wait_s):
        chosen = _choose(site, finished_run_id, now)  # again: a placement may have changed the bookings meanwhile
        # the bookings count a run that overran its planned length as done; Prefect's count knows better
        if chosen is None or not room_for([gpu_limit_name(site.name)], chosen[1].gpus):
            return None
        run, booking = chosen
        with get_client(sync_client=True) as client:
            if client.read_flow_run(run.id).state_type.value != "SCHEDULED":  # a worker took it meanwhile
                return None
            booked = run.parameters["placement"]
            moved = {**booked, "start": now.isoformat(), "finish": (now + (booking.end - booking.start)).isoformat(),
                     "moved_up_from": booked["start"], "moved_up_at": now.isoformat()}
            client.update_flow_run(run.id, parameters={**run.parameters, "placement": moved,
                                                       "planned_start": now.isoformat()})
            result = client.set_flow_run_state(run.id, Scheduled(scheduled_time=now))
            if result.status.value != "ACCEPT":  # the server kept its state: put the booking back as it was
                client.update_flow_run(run.id, parameters=run.parameters)
                return None
    return MovedUp(flow_run_id=str(run.id), name=run.name, booked_start=booking.start, start=now)


def _choose(site: Site, finished_run_id: str, now: datetime) -> tuple[Any, Booking] | None:
    """The Prefect flow run to move (with its booking), from the site's runs as Prefect has them now."""
    from flows.fleet.placing import placed_runs

    found = {str(run.id): (run, booking) for run, booking in placed_runs([site.name], now)}
    found.pop(finished_run_id, None)
    runs = [SiteRun(place_of_run(run), booking, run.state_type.value) for run, booking in found.values()]
    chosen = next_to_start_early(site, runs, now)
    return None if chosen is None else found[chosen.place.flow_run_id]
