"""Slots that cannot leak: a site's GPU limit checked against the runs that really hold its GPUs.

Prefect keeps concurrency leases in memory by default (``PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE``).
A server restart forgets them, but not the limit's count of active slots: a run that held a GPU
across the restart can no longer give its slot back (its release names a lease the server no longer
knows, and the server ignores it), and nothing would ever free that slot. A later run then waits for
a phantom GPU.

The truth is in the line (:mod:`flows.fleet.gpu_line`): a run marks its place ``asking`` before it
asks for slots, ``holding`` once it has them, and deletes it after it gave them back. :func:`free_lost_slots` lowers a limit's
active slots to what the *Running* flow runs with such a mark hold, and never raises it. It never
frees a live run's slot: a run is counted from before its ask until after its release, and a run
whose process died is counted until Prefect marks it Crashed, by when its 60 s lease has lapsed and
Prefect's own repossessor has freed its slot. What is left over is a lease the server lost.

Called by the first run in line when the slots it waits for look taken, by ``gridshift deploy`` and
``gridshift serve`` at start, and by the benchmark and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flows.fleet.gpu_line import forget_place, line_records

__all__ = ["MEMORY_LEASES", "free_lost_slots", "held_slots", "lease_storage_note"]

#: Prefect's default lease storage: the server's memory, forgotten on restart
MEMORY_LEASES = "prefect.server.concurrency.lease_storage.memory"


def held_slots(client: object, limit: str) -> int:
    """GPU slots of ``limit`` held by Running flow runs, by their places in line marked ``asking`` or ``holding``."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterState, FlowRunFilterStateType

    records = {r.place.flow_run_id: r for r in line_records(client, limit) if r.counts_as_holder}
    if not records:
        return 0
    running = {str(run.id) for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(  # type: ignore[attr-defined]
        id=FlowRunFilterId(any_=sorted(records)),
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["RUNNING"]))), limit=len(records))}
    for gone in set(records) - running:  # a holder that died, or ended without leaving: its place goes too
        forget_place(client, records[gone].name)
    return sum(records[run_id].slots for run_id in running)


def free_lost_slots(limits: Sequence[str], announce: Callable[[str], None] = lambda _line: None) -> int:
    """Lower each limit's active slots to those Running runs hold; returns how many slots were freed.

    ``announce`` hears one line per limit it corrected. A limit that does not exist is skipped.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    freed = 0
    with get_client(sync_client=True) as client:
        for name in limits:
            held = held_slots(client, name)  # read before the count: a run that asks meanwhile is counted already
            try:
                limit = client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                continue
            if limit.active_slots > held:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=held))
                freed += limit.active_slots - held
                announce(f"{name}: {limit.active_slots} slot(s) counted taken, {held} held by running runs; freed "
                         f"{limit.active_slots - held} (a lease the server lost, e.g. across a restart)")
    return freed


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
