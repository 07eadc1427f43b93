"""GPU slots on a node: a Prefect global concurrency limit per site, and the devices a run pins.

Prefect counts: each site's node has one global concurrency limit, ``gridshift-gpus-<site>``, with
one slot per GPU (created by ``gridshift deploy``, see :func:`ensure_limits`). A run that trains
there takes ``job.gpus`` slots (:func:`hold_gpus`). Placement books GPUs ahead, so a run normally
finds its slots free; when an earlier run overran, the run waits *in Prefect* for them: the same
flow run, Running, asks Prefect's limit until the slots free up (it is never re-created, and the
wait is bounded by ``wait_s``), in line behind the runs booked before it (:mod:`flows.fleet.gpu_line`).
The slots are leased for :data:`GPU_LEASE_S`: the run's process renews the lease while it lives,
and a dead process's slots come back when the lease lapses.

The node picks: holding slots says *how many* GPUs are free, not *which*. Each device has a lock
file under ``$GRIDSHIFT_HOME/gpu-locks/<site>/``; a run takes ``flock`` on as many free ones as it
holds slots and pins them with ``CUDA_VISIBLE_DEVICES`` (so the NVIDIA backend meters exactly
those, and torchrun's ``--nproc-per-node gpu`` starts one rank per pinned GPU). The kernel drops a
dead process's locks.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from flows.fleet.gpu_line import WaitingLine, waiting_line
from flows.fleet.names import GPU_LIMIT_PREFIX, gpu_limit_name

__all__ = ["GpuHold", "GpusBusy", "GPU_LEASE_S", "GPU_LIMIT_PREFIX", "SLOT_POLL_S", "ensure_limits", "gpu_limit_name",
           "hold_gpus", "pin_environment", "room_for", "take_slots"]

#: Prefect's shortest lease: a node that died gives its GPU slots back at most this long after
GPU_LEASE_S = 60.0
#: how often a waiter asks again for slots that are taken (plus up to half as much jitter, so waiters
#: do not ask in step). Prefect's own retry waits as long as the server's Retry-After says: up to
#: 30 s once a few waiters have been turned away, so a slot could stay free for 30 s while runs
#: wait for it and the next in line was whoever happened to wake first.
SLOT_POLL_S = 1.0
#: how often the first run in line, finding the slots taken, checks them against the runs that hold them
RECONCILE_S = 15.0
#: the jitter's own generator: waiting threads leave the process's global random state alone
_JITTER = random.Random()


class _RefusedAsks(logging.Filter):
    """Drops Prefect's ERROR line for a refused slot request (HTTP 423): gridshift handles the refusal itself.

    Prefect's lease service logs every refused ask at ERROR, with the Future it failed, from its own
    event-loop thread; concurrent ``gridshift submit``s printed them although all placed.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Service 'ConcurrencySlotAcquisitionWithLeaseService' failed")


def _quiet_refused_asks() -> None:
    logger = logging.getLogger("prefect._internal.concurrency")
    if not any(isinstance(f, _RefusedAsks) for f in logger.filters):
        logger.addFilter(_RefusedAsks())


class GpusBusy(Exception):
    """The node has fewer free GPUs than the run needs (and they did not free up within the wait)."""


@dataclass(frozen=True)
class GpuHold:
    """Slots held on ``limit`` and the node's devices pinned for one run."""

    site: str
    limit: str
    devices: tuple[int, ...]
    #: when the run began asking for the slots (standing in line from then on), and when it had them
    asked_at: datetime
    acquired_at: datetime

    def as_report(self) -> dict[str, object]:
        return {"site": self.site, "gpu_limit": self.limit, "gpus": list(self.devices),
                "gpus_asked_at": self.asked_at.isoformat(), "gpus_acquired_at": self.acquired_at.isoformat()}


def ensure_limits(slots_by_name: dict[str, int], what: str = "GPU slots") -> list[str]:
    """Create (or resize) the global concurrency limits named, with that many slots; one line per change."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    changes: list[str] = []
    with get_client(sync_client=True) as client:
        for name, gpus in slots_by_name.items():
            try:
                limit = client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=gpus))
                changes.append(f"created global concurrency limit {name} ({gpus} {what})")
                continue
            if limit.limit != gpus:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=gpus))
                changes.append(f"resized global concurrency limit {name}: {limit.limit} -> {gpus} {what}")
    return changes


def _lock_free_devices(lock_dir: Path, gpus_per_node: int, count: int, stack: ExitStack) -> tuple[int, ...]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    taken: list[int] = []
    for index in range(gpus_per_node):
        if len(taken) == count:
            break
        handle: IO[bytes] = open(lock_dir / f"gpu{index}.lock", "ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        stack.callback(handle.close)  # closing drops the lock
        taken.append(index)
    if len(taken) < count:
        raise GpusBusy(f"only {len(taken)} of the node's {gpus_per_node} GPUs are free here, the run needs {count} "
                       f"(a process outside gridshift may hold the others: {lock_dir})")
    return tuple(taken)


def take_slots(names: Sequence[str], occupy: int, *, wait_s: float, lease_s: float, stack: ExitStack,
               poll_s: float = SLOT_POLL_S, line: WaitingLine | None = None) -> bool:
    """Hold ``occupy`` slots of every limit in ``names`` (one request: all or none) until ``stack`` closes.

    Asks once; while the limits answer 423 (taken), looks again every ``poll_s`` (jittered) and asks
    when they count enough slots free, for up to ``wait_s`` seconds. With a ``line`` (the run has
    joined it), it asks only while no run stands ahead of it, and keeps the slots only if none stands
    ahead once it has them (one that joined during the ask goes first: the slots go back). Returns False
    when the wait ran out; raises ConcurrencySlotAcquisitionError for anything but "taken" (e.g. a
    limit that does not exist). The slots are leased for ``lease_s`` and renewed while this process
    lives.
    """
    import httpx
    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
    from prefect.concurrency.sync import concurrency

    _quiet_refused_asks()
    deadline = time.monotonic() + wait_s
    asked = False
    reconciled_at = float("-inf")
    while True:
        # the slots first, the line second: a run booked earlier that joins the line while the slots are
        # looked at is then seen ahead before this run asks (read the other way round, this run could
        # find the line empty, then the slots just freed, and take them from under it)
        free = not asked or room_for(names, occupy)
        ahead = [] if line is None else line.ahead()
        if not ahead and not free and line is not None and time.monotonic() - reconciled_at >= RECONCILE_S:
            # first in line and the slots look taken: some may be a lost lease's (a server restart), not a run's
            from flows.fleet.slots import free_lost_slots

            reconciled_at = time.monotonic()
            free = bool(free_lost_slots(names, announce=line.announce)) and room_for(names, occupy)
        if not ahead and free:
            asked = True
            if line is not None:
                line.asking()  # counted as a holder from before the ask: a slot check meanwhile never frees its slot
            held = ExitStack()
            try:
                held.enter_context(concurrency(list(names), occupy=occupy, max_retries=0, strict=True,
                                               lease_duration=lease_s, raise_on_lease_renewal_failure=False))
            except ConcurrencySlotAcquisitionError as exc:
                cause = exc.__cause__
                if not (isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code == 423):
                    raise
            else:
                # Prefect's slot service queues an ask behind the process's others, so it may reach the server
                # seconds after the line was read: a run booked earlier that joined meanwhile goes first, and
                # this run gives the slots back (CI saw the later run train first)
                ahead = [] if line is None else line.ahead()
                if not ahead:
                    stack.enter_context(held)
                    if line is not None:
                        line.holding()  # out of the line: the runs behind it may ask now
                    return True
                held.close()
        if line is not None:
            line.waiting(len(ahead))
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(poll_s * (1.0 + 0.5 * _JITTER.random()), left))  # the edge that waits: a real slot, a real clock


def room_for(names: Sequence[str], occupy: int) -> bool:
    """Whether every limit in ``names`` counts ``occupy`` slots free now.

    A waiter looks before it asks again: each refused request is an ERROR line from Prefect's lease
    service in the run's log, once a second for as long as the run waits.
    """
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return all(limit.limit - limit.active_slots >= occupy
                   for limit in map(client.read_global_concurrency_limit_by_name, names))


@contextmanager
def hold_gpus(site: str, count: int, gpus_per_node: int, *, lock_dir: Path, wait_s: float = 0.0,
              flow_run_id: str | None = None, announce: Callable[[str], None] | None = None) -> Iterator[GpuHold]:
    """Hold ``count`` of ``site``'s GPU slots and lock that many devices; waits up to ``wait_s`` for the slots.

    ``flow_run_id`` (the run that will train) stands in line (:mod:`flows.fleet.gpu_line`): among the runs
    asking for this site's slots, the one booked first asks first; ``announce`` gets a line if it
    has to wait. Raises GpusBusy when the slots are not free within ``wait_s`` (at once for 0), or
    when a device is held outside gridshift.
    """
    if count > gpus_per_node:
        raise GpusBusy(f"the run needs {count} GPUs, the node at {site} has {gpus_per_node}")
    limit = gpu_limit_name(site)
    # the place in line outlives the wait: marked holding, it tells the slot check that this run has the slots
    try:
        with waiting_line(limit, flow_run_id, announce, slots=count) if flow_run_id else nullcontext() as line:
            with ExitStack() as stack:
                asked_at = datetime.now(timezone.utc)
                taken = take_slots([limit], count, wait_s=wait_s, lease_s=GPU_LEASE_S, stack=stack, line=line)
                if not taken:
                    raise GpusBusy(f"{limit}: fewer than {count} GPU slot(s) free"
                                   + (f" for {wait_s:.0f} s" if wait_s > 0 else ""))
                devices = _lock_free_devices(lock_dir / site, gpus_per_node, count, stack)
                yield GpuHold(site=site, limit=limit, devices=devices, asked_at=asked_at,
                              acquired_at=datetime.now(timezone.utc))
    finally:
        if flow_run_id:
            _check_after_release(limit, announce)


def _check_after_release(limit: str, announce: Callable[[str], None] | None) -> None:
    """After giving its slots back, a run checks them against their holders: a release that named a lease
    the server lost (a restart while the run trained) gave nothing back, and would leave a slot taken for good."""
    from flows.fleet.slots import free_lost_slots

    try:
        free_lost_slots([limit], announce=announce or (lambda _line: None))
    except Exception:  # the run is over either way; the next run in line checks again
        pass


@contextmanager
def pin_environment(devices: Sequence[int]) -> Iterator[None]:
    """Set ``CUDA_VISIBLE_DEVICES`` to ``devices`` for the run (the backend and the job read it), then restore it."""
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous
