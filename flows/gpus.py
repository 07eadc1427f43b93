"""GPU slots on a node: a Prefect global concurrency limit per site, and the devices a run pins.

Prefect counts: each site's node has one global concurrency limit, ``gridshift-gpus-<site>``, with
one slot per GPU (created by ``gridshift deploy``, see :func:`ensure_gpu_limits`). A run that trains
there takes ``job.gpus`` slots *without waiting* (:func:`hold_gpus`); when they are not free it does
not sleep in the worker: the caller ends the run and schedules a new flow run a little later
(:func:`flows.nightly`), so the wait is a Scheduled flow run in Prefect.

The node picks: holding slots says *how many* GPUs are free, not *which*. Each device has a lock
file under ``$GRIDSHIFT_HOME/gpu-locks/<site>/``; a run takes ``flock`` on as many free ones as it
holds slots and pins them with ``CUDA_VISIBLE_DEVICES`` (so the NVIDIA backend meters exactly
those, and torchrun's ``--nproc-per-node gpu`` starts one rank per pinned GPU). The kernel drops a
dead process's locks; Prefect expires a dead run's slots when its lease lapses.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

__all__ = ["GpuHold", "GpusBusy", "GPU_LIMIT_PREFIX", "ensure_gpu_limits", "gpu_limit_name", "hold_gpus",
           "pin_environment"]

GPU_LIMIT_PREFIX = "gridshift-gpus-"


class GpusBusy(Exception):
    """The node has fewer free GPUs than the run needs right now (the run waits in Prefect instead)."""


@dataclass(frozen=True)
class GpuHold:
    """Slots held on ``limit`` and the node's devices pinned for one run."""

    site: str
    limit: str
    devices: tuple[int, ...]
    acquired_at: datetime

    def as_report(self) -> dict[str, object]:
        return {"site": self.site, "gpu_limit": self.limit, "gpus": list(self.devices),
                "gpus_acquired_at": self.acquired_at.isoformat()}


def gpu_limit_name(site: str) -> str:
    """The global concurrency limit that counts the GPUs of ``site``'s node."""
    return f"{GPU_LIMIT_PREFIX}{site}"


def ensure_gpu_limits(gpus_per_site: dict[str, int]) -> list[str]:
    """Create (or resize) one global concurrency limit per site; returns one line per change."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    changes: list[str] = []
    with get_client(sync_client=True) as client:
        for site, gpus in gpus_per_site.items():
            name = gpu_limit_name(site)
            try:
                limit = client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=gpus))
                changes.append(f"created global concurrency limit {name} ({gpus} GPU slots)")
                continue
            if limit.limit != gpus:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=gpus))
                changes.append(f"resized global concurrency limit {name}: {limit.limit} -> {gpus} GPU slots")
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


def _take_slots(limit: str, count: int, stack: ExitStack) -> None:
    import httpx
    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
    from prefect.concurrency.sync import concurrency

    try:
        # no retries: a busy node must not keep a worker process waiting; the run waits in Prefect instead
        stack.enter_context(concurrency(limit, occupy=count, max_retries=0, strict=True,
                                        raise_on_lease_renewal_failure=False))
    except ConcurrencySlotAcquisitionError as exc:
        cause = exc.__cause__
        if isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code == 423:
            raise GpusBusy(f"{limit}: fewer than {count} GPU slot(s) free") from None
        raise


@contextmanager
def hold_gpus(site: str, count: int, gpus_per_node: int, *, lock_dir: Path) -> Iterator[GpuHold]:
    """Hold ``count`` of ``site``'s GPU slots and lock that many devices; raises GpusBusy at once if not free."""
    if count > gpus_per_node:
        raise GpusBusy(f"the run needs {count} GPUs, the node at {site} has {gpus_per_node}")
    limit = gpu_limit_name(site)
    with ExitStack() as stack:
        _take_slots(limit, count, stack)
        devices = _lock_free_devices(lock_dir / site, gpus_per_node, count, stack)
        yield GpuHold(site=site, limit=limit, devices=devices, acquired_at=datetime.now(timezone.utc))


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
