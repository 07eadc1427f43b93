"""Plain value types shared by every backend (units in every name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Settings", "DeviceInfo", "Capabilities", "Applied", "EnergyWindow"]


@dataclass(frozen=True)
class Settings:
    """What a mode asks of the hardware. ``None`` means "as found before the first apply"
    (see :class:`backends.base.Backend`), not "keep what the previous mode set".

    ``power_limit_w`` is absolute here: the scheduler resolves fractions against the device range
    before calling ``apply``. ``batch_size`` is not a hardware setting; backends pass it through so
    the job can read it (``GRIDSHIFT_BATCH_SIZE``).
    """

    power_limit_w: float | None = None
    sm_clock_mhz: tuple[int, int] | None = None
    mem_clock_mhz: int | None = None
    batch_size: int | None = None
    clock_plan: Path | None = None

    def describe(self) -> str:
        parts = []
        if self.power_limit_w is not None:
            parts.append(f"power limit {self.power_limit_w:.0f} W")
        if self.sm_clock_mhz is not None:
            lo, hi = self.sm_clock_mhz
            parts.append(f"SM clock {lo}-{hi} MHz" if lo != hi else f"SM clock {lo} MHz")
        if self.mem_clock_mhz is not None:
            parts.append(f"memory clock {self.mem_clock_mhz} MHz")
        if self.batch_size is not None:
            parts.append(f"batch size {self.batch_size}")
        if self.clock_plan is not None:
            parts.append(f"clock plan {self.clock_plan}")
        return ", ".join(parts) or "defaults"

    def to_json(self) -> dict[str, Any]:
        return {
            "power_limit_w": self.power_limit_w,
            "sm_clock_mhz": list(self.sm_clock_mhz) if self.sm_clock_mhz else None,
            "mem_clock_mhz": self.mem_clock_mhz,
            "batch_size": self.batch_size,
            "clock_plan": str(self.clock_plan) if self.clock_plan else None,
        }


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    uuid: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can see and do, found without changing anything."""

    backend: str
    devices: tuple[DeviceInfo, ...]
    power_limit_range_w: tuple[float, float] | None = None
    default_power_limit_w: float | None = None
    sm_clocks_mhz: tuple[int, ...] = ()
    mem_clocks_mhz: tuple[int, ...] = ()
    energy_counter: bool = False
    can_control: bool = False
    control_note: str = ""
    measured: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "devices": [{"index": d.index, "name": d.name, "uuid": d.uuid} for d in self.devices],
            "power_limit_range_w": list(self.power_limit_range_w) if self.power_limit_range_w else None,
            "default_power_limit_w": self.default_power_limit_w,
            "sm_clocks_mhz": list(self.sm_clocks_mhz),
            "mem_clocks_mhz": list(self.mem_clocks_mhz),
            "energy_counter": self.energy_counter,
            "can_control": self.can_control,
            "control_note": self.control_note,
            "measured": self.measured,
        }


@dataclass(frozen=True)
class Applied:
    """The outcome of ``apply``: what is in force now, and what could not be done, with reasons."""

    requested: Settings
    in_force: Settings
    changed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    def describe(self) -> str:
        text = self.in_force.describe()
        if self.skipped:
            text += " (not applied: " + "; ".join(self.skipped) + ")"
        return text


@dataclass(frozen=True)
class EnergyWindow:
    """Energy over one named window. ``measured`` is False for modelled figures."""

    name: str
    start_s: float
    end_s: float
    energy_j: float
    per_device_j: dict[int, float] = field(default_factory=dict)
    measured: bool = True
    approximate: bool = False
    note: str = ""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def mean_power_w(self) -> float:
        return self.energy_j / self.duration_s if self.duration_s > 0 else 0.0
