"""The line at a site's GPUs: runs that wait for slots ask for them in the order they were booked.

Prefect's global concurrency limits count, they do not queue: a freed slot goes to whoever asks
next, and when several runs overran their bookings the runs waiting behind them asked every second
or so and a later one could take a GPU ahead of an earlier one. So the waiting runs keep a line in
Prefect itself. A run about to ask for its slots first tags its flow run
``gridshift-waiting:<limit>`` (visible in the UI), then asks the limit only when no other Running
flow run with that tag is ahead of it. Joining before the first ask matters: two runs that reach
the GPUs in the same second would otherwise race for a freed slot with their first asks. Its place is (booked start, placed at, flow run id), taken from its
``placement`` parameter, or from Prefect's scheduled start and creation time for a run that was not
placed. The tag comes off when the run has its slots or gives up. A run whose process died keeps
the tag but leaves the line once Prefect marks it Crashed (no longer Running).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from flows.fleet.names import utc

__all__ = ["PlaceInLine", "WAITING_TAG_PREFIX", "WaitingLine", "place_in_line", "place_of_run", "waiting_line",
           "waiting_tag"]

WAITING_TAG_PREFIX = "gridshift-waiting:"


@dataclass(frozen=True, order=True)
class PlaceInLine:
    """Where a run stands among the runs waiting for one limit: earlier booked start first."""

    booked_start: datetime
    placed_at: datetime
    flow_run_id: str


def waiting_tag(limit: str) -> str:
    """The flow-run tag of the runs waiting in line for ``limit``."""
    return f"{WAITING_TAG_PREFIX}{limit}"


def place_in_line(flow_run_id: str, parameters: Mapping[str, Any], *, scheduled: datetime,
                  created: datetime) -> PlaceInLine:
    """A flow run's place in line: its placement's booked start and placing time, else Prefect's own times."""
    placement = parameters.get("placement") or {}
    start, placed_at = placement.get("start"), placement.get("placed_at")
    return PlaceInLine(booked_start=utc(datetime.fromisoformat(start)) if start else utc(scheduled),
                       placed_at=utc(datetime.fromisoformat(placed_at)) if placed_at else utc(created),
                       flow_run_id=flow_run_id)


def place_of_run(run: Any) -> PlaceInLine:
    """A Prefect flow run's place in line (see :func:`place_in_line`)."""
    return place_in_line(str(run.id), run.parameters or {}, scheduled=run.expected_start_time or run.created,
                         created=run.created)


class WaitingLine:
    """One flow run's place in the line for ``limit``, kept as a tag on that flow run."""

    def __init__(self, client: Any, limit: str, flow_run_id: str,
                 announce: Callable[[str], None] | None = None) -> None:
        self._client = client
        self._limit = limit
        self._announce = announce
        self._tag = waiting_tag(limit)
        self._id = UUID(flow_run_id)
        self._joined = False
        self._announced = False
        run = client.read_flow_run(self._id)
        self.place = place_of_run(run)
        # Prefect replaces a run's tags whole; nothing else retags a Running run, so these are its tags
        self._tags = [t for t in run.tags or [] if t != self._tag]

    def ahead(self) -> list[PlaceInLine]:
        """The Running flow runs waiting in this line ahead of this one, first first."""
        from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType,
                                                    FlowRunFilterTags)
        from prefect.client.schemas.objects import StateType

        waiting = self._client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=[self._tag]),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))), limit=200)
        return sorted(p for p in map(place_of_run, waiting) if p < self.place)

    def join(self) -> None:
        """Stand in line: tag this flow run (once)."""
        if not self._joined:
            self._client.update_flow_run(self._id, tags=[*self._tags, self._tag])
            self._joined = True

    def waiting(self, ahead: int) -> None:
        """The run could not have its slots: say so once, with how many runs stand ahead of it."""
        if self._announce is not None and not self._announced:
            self._announce(f"{self._limit}: the GPU slots are taken; waiting in line behind {ahead} other run(s) "
                           f"(flow-run tag {self._tag})")
            self._announced = True

    def leave(self) -> None:
        """Step out of line: drop the tag (a no-op when this run never joined)."""
        if self._joined:
            self._client.update_flow_run(self._id, tags=self._tags)
            self._joined = False


@contextmanager
def waiting_line(limit: str, flow_run_id: str, announce: Callable[[str], None] | None = None) -> Iterator[WaitingLine]:
    """``flow_run_id`` standing in the line for ``limit``: joined on entry, left on exit whatever happens.

    ``announce`` gets one line if the run has to wait (for the run's log).
    """
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        line = WaitingLine(client, limit, flow_run_id, announce)
        try:
            line.join()
            yield line
        finally:
            line.leave()
