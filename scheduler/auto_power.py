"""``power_limit_select`` in a mode: build the in-process profiler that chooses the limit.

A mode with ``power_limit_select`` leaves ``Settings.power_limit_w`` unset (see
:func:`scheduler.modes.resolve_settings`); the training process instead runs a
:class:`plans.callbacks.PowerLimitCallback` with the profiler built here over the device's power
limit range, walked in ``step_w`` steps from the maximum down.
"""

from __future__ import annotations

from backends.types import Capabilities
from plans.power_limit import PowerLimitProfiler
from plans.selectors import make_selector
from scheduler.policy import Mode

__all__ = ["auto_power_limit_profiler"]


def auto_power_limit_profiler(
    mode: Mode,
    caps: Capabilities,
    *,
    step_w: float = 25.0,
    max_ci_g_per_kwh: float | None = None,
    warmup_steps: int = 10,
    profile_steps: int = 40,
) -> PowerLimitProfiler | None:
    """The profiler for ``mode``, or None when the mode fixes its limit (or the device has no range)."""
    if mode.power_limit_select is None or caps.power_limit_range_w is None:
        return None
    if step_w <= 0:
        raise ValueError("step_w must be positive")
    lo, hi = caps.power_limit_range_w
    limits = []
    p = hi
    while p >= lo - 1e-9:
        limits.append(p)
        p -= step_w
    selector = make_selector(
        mode.power_limit_select,
        eta=mode.eta,
        max_slowdown=mode.max_slowdown,
        max_ci_g_per_kwh=max_ci_g_per_kwh,
        world_size=max(len(caps.devices), 1),
    )
    return PowerLimitProfiler(limits, selector, warmup_steps=warmup_steps, profile_steps=profile_steps)
