"""A simulated GPU: takes the same settings as a real one, answers with modelled power and speed.

Used when no GPU is present (``backend: auto`` on a laptop or CI) and for planning. Every figure it
produces is labelled modelled (``measured = False``). Its energy counter integrates the modelled
power of the settings in force over wall time from an injectable clock.
"""

from __future__ import annotations

import time
from typing import Callable, ClassVar

from backends.base import Backend
from backends.gpu_model import H200, TRAINING, GpuSpec, OperatingPoint, Workload, operating_point
from backends.meter import EnergyMeter
from backends.types import Applied, Capabilities, DeviceInfo, Settings

__all__ = ["SimulatedBackend"]


class SimulatedBackend(Backend):
    """A modelled GPU (an H200 by default) running one training workload."""

    name: ClassVar[str] = "simulated"
    measured: ClassVar[bool] = False

    def __init__(
        self,
        *,
        spec: GpuSpec = H200,
        workload: Workload = TRAINING,
        devices: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.workload = workload
        self.devices = devices
        self._clock = clock
        self._settings = Settings(power_limit_w=spec.power_default_w)
        self._prior: Settings | None = None
        self._energy_mj = 0.0
        self._last_s = clock()

    # -- model ---------------------------------------------------------------------------------
    def operating_point(self, settings: Settings | None = None) -> OperatingPoint:
        s = settings or self._settings
        return operating_point(
            self.spec,
            self.workload,
            power_limit_w=s.power_limit_w,
            sm_clock_max_mhz=s.sm_clock_mhz[1] if s.sm_clock_mhz else None,
        )

    def slowdown(self, settings: Settings) -> float:
        """Modelled step time of ``settings`` relative to the default settings (1.0 = same)."""
        return self.operating_point(settings).time_factor / self.operating_point(Settings()).time_factor

    def _advance(self) -> None:
        now = self._clock()
        dt = max(now - self._last_s, 0.0)
        self._energy_mj += self.operating_point().power_w * dt * 1000.0
        self._last_s = now

    # -- contract ------------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        return Capabilities(
            backend=self.name,
            devices=tuple(DeviceInfo(index=i, name=self.spec.name, uuid=f"SIM-{i}") for i in range(self.devices)),
            power_limit_range_w=(self.spec.power_min_w, self.spec.power_max_w),
            default_power_limit_w=self.spec.power_default_w,
            sm_clocks_mhz=tuple(sorted(self.spec.sm_clocks_mhz, reverse=True)),
            mem_clocks_mhz=self.spec.mem_clocks_mhz,
            energy_counter=True,
            can_control=True,
            control_note="simulated: every figure is modelled",
            measured=False,
        )

    def energy_mj(self) -> dict[int, float]:
        self._advance()
        return {i: self._energy_mj for i in range(self.devices)}

    def meter(self) -> EnergyMeter:
        return EnergyMeter(self.energy_mj, clock=self._clock, measured=False, min_window_s=0.0,
                           note="modelled by the simulated GPU")

    def _record_prior(self) -> None:
        self._prior = self._settings

    def _apply(self, settings: Settings) -> Applied:
        self._advance()
        changed: list[str] = []
        skipped: list[str] = []
        current = self._settings
        found = self._prior if self._prior is not None else current
        # "as found, overridden by settings": a field left None goes back to what was found before the
        # first apply; a refused (out-of-range) request leaves what is in force now
        power_w = found.power_limit_w
        if settings.power_limit_w is not None:
            lo, hi = self.spec.power_min_w, self.spec.power_max_w
            if lo <= settings.power_limit_w <= hi:
                power_w = settings.power_limit_w
            else:
                skipped.append(f"power limit {settings.power_limit_w:.0f} W outside {lo:.0f}-{hi:.0f} W")
                power_w = current.power_limit_w
        sm_mhz = found.sm_clock_mhz
        if settings.sm_clock_mhz is not None:
            lo_c, hi_c = settings.sm_clock_mhz
            if lo_c > hi_c or hi_c > self.spec.f0_mhz or lo_c < min(self.spec.sm_clocks_mhz):
                skipped.append(f"SM clock range {lo_c}-{hi_c} MHz not supported")
                sm_mhz = current.sm_clock_mhz
            else:
                sm_mhz = settings.sm_clock_mhz
        if power_w != current.power_limit_w:
            changed.append("power_limit_w")
        if sm_mhz != current.sm_clock_mhz:
            changed.append("sm_clock_mhz")
        new = Settings(power_limit_w=power_w, sm_clock_mhz=sm_mhz, mem_clock_mhz=found.mem_clock_mhz)
        if settings.mem_clock_mhz is not None:
            skipped.append("memory clock locks are not supported on HBM data-centre GPUs")
        # batch size and clock plans are not hardware state; they ride along for the job
        new = Settings(
            power_limit_w=new.power_limit_w,
            sm_clock_mhz=new.sm_clock_mhz,
            mem_clock_mhz=new.mem_clock_mhz,
            batch_size=settings.batch_size,
            clock_plan=settings.clock_plan,
        )
        self._settings = new
        return Applied(requested=settings, in_force=new, changed=tuple(changed), skipped=tuple(skipped))

    def _restore(self) -> None:
        self._advance()
        if self._prior is not None:
            self._settings = self._prior
