"""Slots that cannot leak: a site's GPU limit checked against the runs that really hold its GPUs.

Prefect keeps concurrency leases in memory by default (``PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE``).
A server restart forgets them, but not the limit's count of active slots: a run that held a GPU
across the restart can no longer give its slot back (its release names a lease the server no longer
knows, and the server ignores it), and nothing would ever free that slot. A later run then waits for
a phantom GPU.

The truth is in the line (:mod:`flows.fleet.gpu_line`): a run marks its place ``asking`` before it
asks for slots, ``holding`` once it has them, and deletes it after it gave them back. :func:`free_lost_slots`
takes back the slots that no *Running* flow run with such a mark holds, and never raises a count.

It never frees a live run's slot, though runs ask and give back while it looks:

- It looks only while no live run is asking, and reads the marks before and after it reads the
  count; when they changed (a run began to ask, or left), it frees nothing this time. So every slot
  the count includes belongs to a mark it read, or to nobody.
- It frees by *decrementing* the count, not by writing it: a slot given back meanwhile is not
  undone, nor counted twice.
- One check per limit at a time (a Prefect variable, ``gridshift-check--<limit>``, that only its
  writer deletes; one a dead checker left is taken over after :data:`CHECK_STALE_S`): two checks
  that both found the same lost slot would free it twice.
- A run whose process died is counted until Prefect marks it Crashed, by when its 60 s lease has
  lapsed and Prefect's own repossessor has freed its slot.

What is left over is a lease the server lost. Called by the first run in line when the slots it
waits for look taken, by each run after it gives its slots back, by ``gridshift deploy`` and
``gridshift serve`` at start, and by the benchmark and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from flows.fleet.gpu_line import LineRecord, forget_place, line_records

__all__ = ["CHECK_PREFIX", "CHECK_STALE_S", "MEMORY_LEASES", "free_lost_slots", "lease_storage_note"]

#: Prefect's default lease storage: the server's memory, forgotten on restart
MEMORY_LEASES = "prefect.server.concurrency.lease_storage.memory"
#: the variable that says a check of one limit is under way
CHECK_PREFIX = "gridshift-check--"
#: a check's variable this old (server clock) was left by a checker that died: the next check takes it over
CHECK_STALE_S = 60.0


def _holders(client: Any, limit: str) -> dict[str, LineRecord]:
    """The places in ``limit``'s line marked ``asking`` or ``holding``, by flow run id."""
    return {r.place.flow_run_id: r for r in line_records(client, limit) if r.counts_as_holder}


def _running(client: Any, flow_run_ids: Sequence[str]) -> set[str]:
    """Which of ``flow_run_ids`` Prefect has Running (one request)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterState, FlowRunFilterStateType

    if not flow_run_ids:
        return set()
    return {str(run.id) for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(
        id=FlowRunFilterId(any_=sorted(flow_run_ids)),
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["RUNNING"]))), limit=len(flow_run_ids))}


@contextmanager
def _checking(client: Any, limit: str) -> Iterator[bool]:
    """Whether this process may check ``limit`` now (no other check under way); the variable goes on exit."""
    from prefect.client.schemas.actions import VariableCreate
    from prefect.exceptions import ObjectAlreadyExists

    name = f"{CHECK_PREFIX}{limit}"

    def take() -> bool:
        try:
            client.create_variable(VariableCreate(name=name, value={"checking": True}, tags=["gridshift"]))
        except ObjectAlreadyExists:
            return False
        return True

    mine = take()
    if not mine:
        found = client.request("POST", "/variables/filter", json={"variables": {"name": {"any_": [name]}}})
        now = parsedate_to_datetime(found.headers["date"])
        left = [v for v in found.json() if v["name"] == name]
        if left and datetime.fromisoformat(left[0]["updated"]) < now - timedelta(seconds=CHECK_STALE_S):
            forget_place(client, name)  # a checker that died mid-check; two that saw it at once may both check
            mine = take()
    try:
        yield mine
    finally:
        if mine:
            forget_place(client, name)


def _check_limit(client: Any, name: str, announce: Callable[[str], None]) -> int:
    """One limit's check (see the module's docstring); returns how many slots it freed."""
    from prefect.exceptions import ObjectNotFound

    with _checking(client, name) as mine:
        if not mine:
            return 0  # another run is checking this limit now
        before = _holders(client, name)
        running = _running(client, list(before))
        if any(record.state == "asking" for run_id, record in before.items() if run_id in running):
            return 0  # a live run is asking: its slot may be counted or not yet; a later check looks again
        try:
            limit = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            return 0
        if _holders(client, name) != before:
            return 0  # a run asked or gave back while the count was read
        for gone in set(before) - running:  # a holder that died, or ended without leaving: its place goes too
            forget_place(client, before[gone].name)
        held = sum(before[run_id].slots for run_id in running)
        lost = limit.active_slots - held
        if lost <= 0:
            return 0
        client.request("POST", "/v2/concurrency_limits/decrement", json={"names": [name], "slots": lost})
        announce(f"{name}: {limit.active_slots} slot(s) counted taken, {held} held by running runs; freed "
                 f"{lost} (a lease the server lost, e.g. across a restart)")
        return lost


def free_lost_slots(limits: Sequence[str], announce: Callable[[str], None] = lambda _line: None) -> int:
    """Take back each limit's slots that no Running run holds; returns how many slots were freed.

    ``announce`` hears one line per limit it corrected. A limit that does not exist is skipped, and
    so is one that another run is checking, or whose holders changed during the check (a later check
    looks again).
    """
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return sum(_check_limit(client, name, announce) for name in limits)


def lease_storage_note(client: object = None) -> str | None:
    """One line when the server keeps concurrency leases in memory (Prefect's default), else None.

    Read from the server's own settings (``GET /admin/settings``); None when it does not say.
    """
    from prefect.client.orchestration import get_client

    try:
        if client is None:
            with get_client(sync_client=True) as own:
                settings = own.request("GET", "/admin/settings").json()  # type: ignore[arg-type]
        else:
            settings = client.request("GET", "/admin/settings").json()  # type: ignore[attr-defined]
        storage = settings["server"]["concurrency"]["lease_storage"]
    except Exception:  # an older server, or one that hides its settings: nothing to say
        return None
    if storage != MEMORY_LEASES:
        return None
    return ("warning: this Prefect server keeps concurrency leases in memory (PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE "
            "is Prefect's default); a restart forgets them and the GPU slots they held stay taken until gridshift "
            "frees them (within two minutes: docs/fleet.md). For a fleet, set it to prefect_redis.lease_storage "
            "(pip install 'gridshift[production]') or prefect.server.concurrency.lease_storage.filesystem")
