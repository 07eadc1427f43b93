"""Turn a policy Mode into concrete backend Settings for the device at hand."""

from __future__ import annotations

from backends.types import Capabilities, Settings
from scheduler.policy.types import Mode

__all__ = ["resolve_settings"]


def resolve_settings(mode: Mode, caps: Capabilities) -> Settings:
    """Absolute settings for ``mode`` on a device described by ``caps``.

    A power-limit fraction is taken of the device's maximum and clamped to its range. A
    ``batch_size: auto`` mode leaves the batch size to the run's proposal (flows.job.trials).
    """
    power_w = mode.power_limit_w
    if mode.power_limit_fraction is not None and caps.power_limit_range_w is not None:
        lo, hi = caps.power_limit_range_w
        power_w = max(lo, min(hi, mode.power_limit_fraction * hi))
    return Settings(
        power_limit_w=power_w,
        sm_clock_mhz=mode.sm_clock_mhz,
        mem_clock_mhz=mode.mem_clock_mhz,
        batch_size=mode.batch_size if isinstance(mode.batch_size, int) else None,
        clock_plan=mode.clock_plan,
    )
