"""Kernel timeline profiles: what one training iteration ran on the GPU, kernel by kernel.

A profile file is versioned JSON (``format = "gridshift.kernel_profile"``, ``version = 1``):

- ``meta``: GPU model, driver, supported SM/memory clocks, default clock, power limit, the
  workload fingerprint, and the step power measured over a window (when it was measured);
- ``kernels``: one record per GPU kernel/memset/memcpy in launch order, with its duration at the
  default clock, stream, phase label (``layer3.forward.attention``, ``optimizer``...), iteration
  index and start time relative to that iteration;
- ``iterations``: iteration boundaries (start/end in µs on the profiler's clock).

``source`` says where the timeline came from: ``measured`` (captured with torch.profiler) or
``synthetic`` (generated; never to be presented as a measurement).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from plans.dvfs._versioned_json import load_versioned
from plans.dvfs.errors import ProfileError
from plans.profile_store import workload_fingerprint  # one hash for power profiles and kernel profiles

__all__ = [
    "PROFILE_FORMAT",
    "PROFILE_VERSION",
    "KernelRecord",
    "IterationSpan",
    "ProfileMeta",
    "KernelProfile",
    "load_profile",
    "save_profile",
    "workload_fingerprint",
]

PROFILE_FORMAT = "gridshift.kernel_profile"
PROFILE_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KernelRecord(_Frozen):
    """One GPU activity (kernel, memset or memcpy) as the profiler saw it at the default clock."""

    name: str = Field(description="demangled kernel name as reported by the profiler")
    order: int = Field(ge=0, description="launch order within the profile (0-based, global)")
    iteration: int = Field(ge=0, description="iteration index this kernel belongs to")
    start_us: float = Field(ge=0, description="start time relative to its iteration's start, µs")
    duration_us: float = Field(gt=0, description="duration at the default clock, µs")
    stream: int = Field(default=7, description="CUDA stream id")
    phase: str = Field(default="", description="innermost record_function label, e.g. layer0.forward.mlp")
    category: Literal["kernel", "memset", "memcpy"] = "kernel"
    # optional counters (Nsight Compute) and measured power; absent -> the model falls back to priors
    sm_throughput_frac: float | None = Field(default=None, ge=0, le=1, description="SM throughput / peak")
    dram_throughput_frac: float | None = Field(default=None, ge=0, le=1, description="DRAM throughput / peak")
    power_w: float | None = Field(default=None, gt=0, description="measured board power while it runs, W")


class IterationSpan(_Frozen):
    """One iteration's boundaries on the profiler clock (µs)."""

    index: int = Field(ge=0)
    start_us: float
    end_us: float

    @model_validator(mode="after")
    def _ordered(self) -> "IterationSpan":
        if self.end_us < self.start_us:
            raise ValueError("iteration end_us is before start_us")
        return self

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


class ProfileMeta(_Frozen):
    """Where and what the profile was taken: hardware, software and workload identity."""

    gpu_model: str = Field(description="NVML device name, e.g. 'NVIDIA H200'")
    driver: str = Field(default="", description="NVIDIA driver version")
    workload: str = Field(description="human description of the step that was profiled")
    workload_fingerprint: str = Field(description="hash of the workload's shape (see workload_fingerprint)")
    source: Literal["measured", "synthetic"] = Field(description="measured (torch.profiler) or synthetic")
    sm_clocks_mhz: tuple[int, ...] = Field(description="supported SM clocks (NVML list for the memory clock in use)")
    mem_clocks_mhz: tuple[int, ...] = Field(default=(), description="supported memory clocks")
    default_sm_clock_mhz: int = Field(gt=0, description="the clock the durations were measured at (f0)")
    default_mem_clock_mhz: int | None = None
    power_limit_w: float | None = Field(default=None, gt=0, description="power limit in force while profiling")
    idle_power_w: float | None = Field(default=None, gt=0, description="board power with a live context and no work")
    step_power_w: float | None = Field(default=None, gt=0, description="mean board power over repeated steps")
    step_power_window_s: float | None = Field(default=None, gt=0, description="length of the window step_power_w was measured over")
    step_time_s: float | None = Field(default=None, gt=0, description="mean wall time per step over that window")
    memory_clock_lockable: bool = Field(default=False, description="True only where run-time memory locks work (GeForce)")
    torch_version: str = ""
    captured_at: str = Field(default="", description="ISO-8601 UTC time of capture")
    note: str = ""


class KernelProfile(_Frozen):
    """A versioned kernel timeline. Kernels are sorted by ``order``."""

    format: Literal["gridshift.kernel_profile"] = PROFILE_FORMAT
    version: int = PROFILE_VERSION
    meta: ProfileMeta
    iterations: tuple[IterationSpan, ...]
    kernels: tuple[KernelRecord, ...]

    @model_validator(mode="after")
    def _consistent(self) -> "KernelProfile":
        if not self.kernels:
            raise ValueError("a profile needs at least one kernel")
        orders = [k.order for k in self.kernels]
        if orders != sorted(orders) or len(set(orders)) != len(orders):
            raise ValueError("kernels must be sorted by a unique 'order'")
        known = {it.index for it in self.iterations}
        missing = {k.iteration for k in self.kernels} - known
        if missing:
            raise ValueError(f"kernels refer to iterations without a span: {sorted(missing)}")
        if self.meta.default_sm_clock_mhz not in self.meta.sm_clocks_mhz:
            raise ValueError("meta.default_sm_clock_mhz must be one of meta.sm_clocks_mhz")
        return self

    def iteration_kernels(self, index: int | None = None) -> tuple[KernelRecord, ...]:
        """The kernels of one iteration (default: the last, usually the warmest)."""
        idx = self.iterations[-1].index if index is None else index
        ks = tuple(k for k in self.kernels if k.iteration == idx)
        if not ks:
            raise ProfileError(f"profile has no kernels in iteration {idx}")
        return ks

    def phases(self, index: int | None = None) -> tuple[str, ...]:
        """Phase labels in first-seen order for one iteration."""
        seen: dict[str, None] = {}
        for k in self.iteration_kernels(index):
            seen.setdefault(k.phase, None)
        return tuple(seen)




def load_profile(path: str | Path) -> KernelProfile:
    """Read and validate a profile file; every failure is a :class:`ProfileError` naming the file."""
    return load_versioned(Path(path), KernelProfile, fmt=PROFILE_FORMAT, version=PROFILE_VERSION,
                          what="kernel profile", error_cls=ProfileError)


def save_profile(profile: KernelProfile, path: str | Path) -> Path:
    """Write ``profile`` as indented JSON; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(profile.model_dump_json(indent=1) + "\n")
    return p
