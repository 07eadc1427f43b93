"""The process's place in a ``torch.distributed`` job, and the two agreements the integrations need.

One rank writes the job's files (rank 0); every rank follows the mode. Ranks must agree where they
act together: when to stop for a pause (a rank that stops a step early leaves the others waiting in
a collective) and which batch size an epoch uses (ranks with different step counts per epoch hang).
Both agreements are collectives, so every rank must call them at the same point of its loop.
Without an initialised process group (one process, or ranks not yet joined) they are local.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["any_rank", "from_rank0", "process_rank"]

T = TypeVar("T")


def _dist() -> Any | None:
    """``torch.distributed`` when a process group is up (never imports torch itself)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def process_rank(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(rank, world_size)``: the process group's, else torchrun's ``RANK`` / ``WORLD_SIZE``, else (0, 1)."""
    dist = _dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    env = os.environ if environ is None else environ
    try:
        return int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def _device(dist: Any) -> Any:
    import torch

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on any (a collective)."""
    dist = _dist()
    if dist is None or dist.get_world_size() < 2:
        return flag
    import torch

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_device(dist))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def from_rank0(value: T) -> T:
    """Rank 0's ``value`` on every rank (a collective; ``value`` must pickle)."""
    dist = _dist()
    if dist is None or dist.get_world_size() < 2:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=_device(dist) if dist.get_backend() == "nccl" else None)
    return box[0]
