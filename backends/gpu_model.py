"""A physical model of GPU power and speed versus power limit and SM clock (modelled, not measured).

Follows ``shared/docs/gpu-facts.md`` section 5, reduced to one "average kernel" per workload:

    x = f / f0                       (f0: the highest SM clock)
    P(f) = P_static + D * phi(x),    phi(x) = a1*x + a3*x^3,  a1 + a3 = 1
    f_eff = min(f_lock_max, f_cap)   where P(f_cap) = power limit (the cap throttles the clock)
    time factor t(f)/t(f0) = beta / x_eff + (1 - beta)

Defaults describe an NVIDIA H200 SXM (measured read-only on the lent card: 345-1980 MHz in 15 MHz
steps, 200-700 W, ~120 W with a live context, ~690 W for a bf16 GEMM loop at the 700 W cap; see
gpu-facts.md section 4). phi's split (a1, a3) is a prior, not a measurement: H100/H200 voltage
curves are not public. Every number from this module is modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GpuSpec", "Workload", "OperatingPoint", "H200", "TRAINING", "operating_point"]


@dataclass(frozen=True)
class GpuSpec:
    name: str
    sm_clocks_mhz: tuple[int, ...]
    mem_clocks_mhz: tuple[int, ...]
    power_min_w: float
    power_max_w: float
    power_default_w: float
    static_power_w: float
    phi_linear: float = 0.3  # a1; a3 = 1 - a1

    @property
    def f0_mhz(self) -> int:
        return max(self.sm_clocks_mhz)

    def phi(self, x: float) -> float:
        a1 = self.phi_linear
        return a1 * x + (1.0 - a1) * x**3


@dataclass(frozen=True)
class Workload:
    """An average kernel: dynamic power at f0 and how compute-bound it is (beta in [0, 1])."""

    name: str
    dynamic_power_w: float
    beta: float


@dataclass(frozen=True)
class OperatingPoint:
    sm_clock_mhz: float
    power_w: float
    #: step time relative to the same workload at the unconstrained highest clock (>= 1)
    time_factor: float
    capped: bool


H200 = GpuSpec(
    name="NVIDIA H200 (simulated)",
    sm_clocks_mhz=tuple(range(345, 1981, 15)),
    mem_clocks_mhz=(3201, 2201),
    power_min_w=200.0,
    power_max_w=700.0,
    power_default_w=700.0,
    static_power_w=120.0,
)

#: a GEMM-heavy training step: ~690 W natural draw at f0 before the cap, mostly compute-bound
TRAINING = Workload(name="transformer training step", dynamic_power_w=900.0, beta=0.85)


def _power(spec: GpuSpec, work: Workload, f_mhz: float) -> float:
    return spec.static_power_w + work.dynamic_power_w * spec.phi(f_mhz / spec.f0_mhz)


def operating_point(
    spec: GpuSpec,
    work: Workload,
    *,
    power_limit_w: float | None = None,
    sm_clock_max_mhz: float | None = None,
) -> OperatingPoint:
    """Where the GPU settles for ``work`` under a power limit and an SM clock ceiling."""
    limit = spec.power_default_w if power_limit_w is None else min(max(power_limit_w, spec.power_min_w), spec.power_max_w)
    f_lock = spec.f0_mhz if sm_clock_max_mhz is None else min(max(sm_clock_max_mhz, min(spec.sm_clocks_mhz)), spec.f0_mhz)
    capped = False
    f = f_lock
    if _power(spec, work, f_lock) > limit:
        capped = True
        lo, hi = float(min(spec.sm_clocks_mhz)), float(f_lock)
        if _power(spec, work, lo) >= limit:
            f = lo
        else:
            for _ in range(60):
                mid = (lo + hi) / 2
                if _power(spec, work, mid) > limit:
                    hi = mid
                else:
                    lo = mid
            f = lo
    x = f / spec.f0_mhz
    time_factor = work.beta / x + (1.0 - work.beta)
    return OperatingPoint(sm_clock_mhz=f, power_w=_power(spec, work, f), time_factor=time_factor, capped=capped)
