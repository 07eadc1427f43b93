"""The line at a site's GPUs: runs that wait for slots ask for them in the order they were booked.

Prefect's global concurrency limits count, they do not queue: a freed slot goes to whoever asks
next. So the waiting runs keep a line in Prefect itself. A run about to ask for its slots first
writes its place in line as a Prefect variable of its own, ``gridshift-line--<limit>--<flow run
id>`` (the UI's Variables page shows who waits), then asks the limit only when no live run is ahead
of it. Joining before the first ask matters: two runs that reach the GPUs in the same second would
otherwise race for a freed slot with their first asks. Its place is (booked start, placed at, flow
run id), taken from its ``placement`` parameter, or from Prefect's scheduled start and creation time
for a run that was not placed.

Each run writes only its own variable, so no run can undo another's write (a line kept in the flow
runs' tags was rewritten whole from an old copy, and a tag added meanwhile was lost). A waiting run
touches its variable every :data:`REFRESH_S`; one not touched for :data:`STALE_S` by the server's
clock belongs to a run whose process died, and the others step past it at once instead of waiting
until Prefect marks that run Crashed (up to two minutes). Such a record is deleted by the first run
that finds it :data:`FORGET_S` old. It is marked ``asking`` just before the run asks (it stays in line:
no run behind it may race it for the slot) and ``holding`` once it has them, and stays while the run holds its
GPUs (:mod:`flows.fleet.slots` counts those to free slots a lost lease left taken), and goes when it
gives them back; a holder that died leaves it to the slot check and the crash recorder, which delete
it once Prefect no longer has the run Running.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from flows.fleet.names import utc

__all__ = ["FORGET_S", "LINE_PREFIX", "LineRecord", "PlaceInLine", "REFRESH_S", "STALE_S", "WaitingLine",
           "forget_place", "line_records", "line_variable", "live_ahead", "place_in_line", "place_of_run",
           "places_of_run", "waiting_line"]

LINE_PREFIX = "gridshift-line--"
#: how often a waiting run touches its place in line
REFRESH_S = 5.0
#: a place in line not touched this long (server clock) belongs to a dead waiter: the line steps past it.
#: Well above REFRESH_S: a live waiter starved of CPU on a loaded node went 20 s between touches
STALE_S = 60.0
#: a dead waiter's place is deleted once this old
FORGET_S = 600.0


@dataclass(frozen=True, order=True)
class PlaceInLine:
    """Where a run stands among the runs waiting for one limit: earlier booked start first."""

    booked_start: datetime
    placed_at: datetime
    flow_run_id: str


@dataclass(frozen=True)
class LineRecord:
    """One run's place in a limit's line as the server has it: its place, whether it holds the GPUs, when touched."""

    place: PlaceInLine
    #: "waiting" in line, "asking" for its slots (still in line: others must not pass it), or "holding" them
    state: str
    touched: datetime
    name: str
    slots: int = 1

    @property
    def counts_as_holder(self) -> bool:
        """Whether the slot check counts its slots as held: from before its ask until after its release."""
        return self.state in ("asking", "holding")


def line_variable(limit: str, flow_run_id: str) -> str:
    """The Prefect variable that holds ``flow_run_id``'s place in the line for ``limit``."""
    return f"{LINE_PREFIX}{limit}--{flow_run_id}"


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


def live_ahead(mine: PlaceInLine, records: list[LineRecord], reference: datetime,
               stale_s: float = STALE_S) -> list[PlaceInLine]:
    """The places ahead of ``mine`` whose runs still wait: touched within ``stale_s`` of ``reference``
    (the server's time of this run's own last touch), not holding their GPUs already. First first.

    A run *asking* is still ahead: a run behind it that passed it then would race it for the same slot."""
    cutoff = reference - timedelta(seconds=stale_s)
    return sorted(r.place for r in records if r.state != "holding" and r.touched >= cutoff and r.place < mine)


def line_records(client: Any, limit: str) -> list[LineRecord]:
    """Every place in ``limit``'s line as the server has it (one request)."""
    prefix = f"{LINE_PREFIX}{limit}--"
    found = client.request("POST", "/variables/filter",
                           json={"variables": {"name": {"like_": f"{prefix}%"}}, "limit": 200}).json()
    out = []
    for var in found:
        value = var.get("value") or {}
        if not var["name"].startswith(prefix) or not isinstance(value, dict) or "booked_start" not in value:
            continue
        place = PlaceInLine(utc(datetime.fromisoformat(value["booked_start"])),
                            utc(datetime.fromisoformat(value["placed_at"])), str(value["flow_run_id"]))
        out.append(LineRecord(place, str(value.get("state", "waiting")), utc(datetime.fromisoformat(var["updated"])),
                              var["name"], int(value.get("slots", 1))))
    return out


def forget_place(client: Any, name: str) -> None:
    """Delete a place in line (a no-op when another run deleted it first)."""
    from prefect.exceptions import ObjectNotFound

    try:
        client.delete_variable_by_name(name)
    except ObjectNotFound:
        pass


def places_of_run(client: Any, flow_run_id: str) -> list[str]:
    """The names of every place ``flow_run_id`` holds in any line (a crashed run's, to clean up)."""
    found = client.request("POST", "/variables/filter",
                           json={"variables": {"name": {"like_": f"{LINE_PREFIX}%--{flow_run_id}"}}, "limit": 50}).json()
    return [v["name"] for v in found if v["name"].endswith(f"--{flow_run_id}")]


class WaitingLine:
    """One flow run's place in the line for ``limit``, kept as a Prefect variable only this run writes."""

    def __init__(self, client: Any, limit: str, flow_run_id: str,
                 announce: Callable[[str], None] | None = None, clock: Callable[[], float] | None = None,
                 slots: int = 1) -> None:
        import time

        self._client = client
        self._limit = limit
        self._slots = slots
        self._announce = announce
        #: where this run's log lines go (None: nowhere)
        self.announce: Callable[[str], None] = announce or (lambda _line: None)
        self._clock = clock or time.monotonic
        self.name = line_variable(limit, flow_run_id)
        self._joined = False
        self._state = "waiting"
        self._announced = False
        self._touched_at = float("-inf")
        self.place = place_of_run(client.read_flow_run(UUID(flow_run_id)))

    def _value(self, state: str) -> dict[str, Any]:
        return {"booked_start": self.place.booked_start.isoformat(), "placed_at": self.place.placed_at.isoformat(),
                "flow_run_id": self.place.flow_run_id, "state": state,
                "slots": self._slots}

    def ahead(self) -> list[PlaceInLine]:
        """The live runs waiting in this line ahead of this one, first first; forgets long-dead places."""
        self._touch()
        records = line_records(self._client, self._limit)
        mine = next((r for r in records if r.name == self.name), None)
        if mine is None:  # our own place was lost (deleted by hand, or the server forgot it): stand again
            self._joined = False
            self.join()
            records = line_records(self._client, self._limit)
            mine = next((r for r in records if r.name == self.name), None)
        reference = mine.touched if mine is not None else max((r.touched for r in records), default=self.place.placed_at)
        # a waiter's place untouched this long is a dead waiter's (a holder's is never touched: the slot
        # check and the crash recorder remove those, once the run is no longer Running)
        for dead in (r for r in records if r.state == "waiting" and r.touched < reference - timedelta(seconds=FORGET_S)):
            forget_place(self._client, dead.name)
        return live_ahead(self.place, records, reference)

    def join(self) -> None:
        """Stand in line: write this run's place (once)."""
        from prefect.client.schemas.actions import VariableCreate
        from prefect.exceptions import ObjectAlreadyExists

        if not self._joined:
            try:
                self._client.create_variable(VariableCreate(name=self.name, value=self._value("waiting"),
                                                            tags=["gridshift", "gridshift-line"]))
            except ObjectAlreadyExists:  # a retry of this same run: take the place again
                self._write("waiting")
            self._joined = True
            self._touched_at = self._clock()

    def _touch(self) -> None:
        if self._joined and self._state == "waiting" and self._clock() - self._touched_at >= REFRESH_S:
            self._write("waiting")

    def _write(self, state: str) -> None:
        from prefect.client.schemas.actions import VariableUpdate

        self._client.update_variable(VariableUpdate(name=self.name, value=self._value(state)))
        self._state = state
        self._touched_at = self._clock()

    def asking(self) -> None:
        """The run is about to ask for its slots: counted as a holder from now on, and still in line."""
        if self._joined and self._state != "asking":
            self._write("asking")

    def holding(self) -> None:
        """The run has its slots: out of the line, still counted as a holder until it leaves."""
        if self._joined:
            self._write("holding")

    def waiting(self, ahead: int) -> None:
        """The run could not have its slots: say so once, with how many runs stand ahead of it."""
        if self._joined and self._state == "asking":  # it asked and was refused: a waiter again
            self._write("waiting")
        if self._announce is not None and not self._announced:
            self._announce(f"{self._limit}: the GPU slots are taken; waiting in line behind {ahead} other run(s) "
                           f"(Prefect variable {self.name})")
            self._announced = True

    def leave(self) -> None:
        """Step out of line: delete this run's place (a no-op when it never joined)."""
        if self._joined:
            forget_place(self._client, self.name)
            self._joined = False



@contextmanager
def waiting_line(limit: str, flow_run_id: str, announce: Callable[[str], None] | None = None,
                 slots: int = 1) -> Iterator[WaitingLine]:
    """``flow_run_id`` standing in the line for ``limit``: joined on entry, left on exit whatever happens.

    ``announce`` gets one line if the run has to wait (for the run's log). The caller marks the
    place ``asking`` before it asks and ``holding`` once it has the slots; the place is left (deleted) on exit, after the slots went back.
    """
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        line = WaitingLine(client, limit, flow_run_id, announce, slots=slots)
        try:
            line.join()
            yield line
        finally:
            line.leave()
