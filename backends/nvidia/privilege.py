"""Is this process allowed to change GPU settings? Decided without changing anything.

NVML has no "may I?" query, and trying a write to find out would change the GPU. The heuristic:

1. NVML's device commands (power limit, locked clocks) need root or ``CAP_SYS_ADMIN``
   (NVML docs: "Non-admin users will see NVML_ERROR_NO_PERMISSION"). We read the effective
   capability set from ``/proc/self/status`` (``CapEff`` bit 21), as Zeus does, and the effective
   UID. Either one means "permitted".
2. ``nvmlDeviceGetAPIRestriction`` (application clocks) is reported in status for information
   only: it governs the legacy application clocks, not power limits or locked clocks, and the H200
   answers NOT_SUPPORTED.

Known blind spots: a container can be root with the capability yet be refused by the host's
driver (e.g. a GPU shared by several VMs); then the first write fails with NO_PERMISSION, which
the backend reports as "not applied" instead of crashing. Admins can force measure-only with
``backend.options.control: false``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["CAP_SYS_ADMIN", "Privilege", "probe_privilege"]

CAP_SYS_ADMIN = 21


@dataclass(frozen=True)
class Privilege:
    allowed: bool
    note: str


def _cap_eff(status_path: Path) -> int | None:
    try:
        for line in status_path.read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return None
    return None


def probe_privilege(
    *, status_path: Path = Path("/proc/self/status"), geteuid: Callable[[], int] = os.geteuid
) -> Privilege:
    """Root or CAP_SYS_ADMIN -> allowed. Reads only."""
    cap = _cap_eff(status_path)
    has_cap = cap is not None and bool(cap >> CAP_SYS_ADMIN & 1)
    if has_cap:
        return Privilege(True, "CAP_SYS_ADMIN is effective" + (" (root)" if geteuid() == 0 else ""))
    if geteuid() == 0 and cap is None:
        return Privilege(True, "running as root")
    if geteuid() == 0:
        return Privilege(False, "root without CAP_SYS_ADMIN (container dropped it): NVML setters will refuse")
    return Privilege(False, "not root and no CAP_SYS_ADMIN: NVML setters need admin rights")
