"""Which GPUs this process drives: ``CUDA_VISIBLE_DEVICES`` and torchrun's ``LOCAL_RANK``.

CUDA's rules, followed here: the variable is a comma-separated list of physical indices, ``GPU-``
UUIDs (a unique prefix is enough) or ``MIG-`` UUIDs; the list stops at the first entry that does
not name a device; duplicates make the whole list invalid; an empty value hides every GPU. Unset
means all GPUs. Under torchrun (``LOCAL_RANK`` set) each process drives only the visible device at
position ``LOCAL_RANK``, so each rank journals and restores its own GPU.

:func:`parse_visible` is pure; :func:`discover` asks NVML (through :class:`~backends.nvidia._nvml.Nvml`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from backends.errors import NoDevice
from backends.nvidia._nvml import Nvml

__all__ = ["Device", "parse_visible", "discover"]


@dataclass(frozen=True)
class Device:
    """One GPU (or MIG instance) this process drives.

    ``visible_index`` is the CUDA ordinal the job sees (``cuda:N``); ``index`` is NVML's physical
    index (the parent's for a MIG instance). Settings live on ``handle`` (the parent GPU for MIG).
    """

    visible_index: int
    index: int
    uuid: str
    name: str
    handle: Any
    mig_uuid: str = ""

    @property
    def is_mig(self) -> bool:
        return bool(self.mig_uuid)

    @property
    def key(self) -> str:
        """The journal key: the physical GPU's UUID (settings belong to the whole GPU)."""
        return self.uuid


def parse_visible(value: str | None) -> list[str] | None:
    """Tokens of ``CUDA_VISIBLE_DEVICES``: None when unset (all GPUs), [] when it hides all."""
    if value is None:
        return None
    return [t.strip() for t in value.split(",") if t.strip()]


def _resolve_token(token: str, nvml: Nvml, count: int, uuids: list[str]) -> tuple[int, str] | None:
    """(physical index, MIG UUID or "") for one token, or None when it names nothing (CUDA stops there)."""
    if token.lstrip("-").isdigit():
        idx = int(token)
        return (idx, "") if 0 <= idx < count else None
    if token.startswith("MIG-"):
        try:
            handle = nvml.handle_by_uuid(token)
            parent = nvml.mig_parent_handle(handle)
            return nvml.index(parent), token
        except Exception:  # a MIG UUID NVML does not know ends the list, as in CUDA
            return None
    if token.startswith("GPU-"):
        matches = [i for i, u in enumerate(uuids) if u.startswith(token)]
        return (matches[0], "") if len(matches) == 1 else None
    return None


def discover(nvml: Nvml, env: Mapping[str, str], *, per_rank: bool = True) -> list[Device]:
    """The devices this process drives, in CUDA order. Raises NoDevice when none is left."""
    count = nvml.device_count()
    handles = [nvml.handle_by_index(i) for i in range(count)]
    uuids = [nvml.uuid(h) for h in handles]
    tokens = parse_visible(env.get("CUDA_VISIBLE_DEVICES"))
    picked: list[tuple[int, str]] = []
    if tokens is None:
        picked = [(i, "") for i in range(count)]
    else:
        for token in tokens:
            found = _resolve_token(token, nvml, count, uuids)
            if found is None:
                break
            if found in picked:  # CUDA treats a duplicate as an invalid list: nothing visible
                picked = []
                break
            picked.append(found)
    devices = [
        Device(visible_index=v, index=i, uuid=uuids[i], name=nvml.name(handles[i]), handle=handles[i], mig_uuid=mig)
        for v, (i, mig) in enumerate(picked)
    ]
    rank = env.get("LOCAL_RANK")
    if per_rank and rank is not None and rank.strip().isdigit() and devices:
        r = int(rank)
        if r >= len(devices):
            raise NoDevice(f"LOCAL_RANK={r} but only {len(devices)} GPU(s) are visible")
        devices = [devices[r]]
    if not devices:
        shown = env.get("CUDA_VISIBLE_DEVICES")
        raise NoDevice(f"no NVIDIA GPU visible (NVML sees {count}; CUDA_VISIBLE_DEVICES={shown!r})")
    return devices
