"""Clock plan files: versioned JSON that a policy mode names with ``clock_plan: path``.

A plan says, for one GPU model and one workload (fingerprint), which SM clock to lock from which
kernel (and, where the boundary is a phase start, from which ``record_function`` phase) of each
training iteration, plus what the model predicts it saves. Every prediction is modelled.

Format ``gridshift.clock_plan`` version 1; a newer version is refused with both numbers named.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from plans.dvfs._versioned_json import load_versioned
from plans.dvfs.errors import PlanFileError
from plans.dvfs.model import KernelTables
from plans.dvfs.profiles.kernel_profile import KernelProfile
from plans.dvfs.result import PlanResult

__all__ = ["PLAN_FORMAT", "PLAN_VERSION", "PlanParameters", "PlanSegment", "Prediction", "ClockPlan",
           "plan_from_result", "save_plan", "load_plan", "load_mode_plan"]

PLAN_FORMAT = "gridshift.clock_plan"
PLAN_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlanParameters(_Frozen):
    """The planner settings the plan was made with."""

    epsilon: float = Field(ge=0, description="allowed slowdown (0.02 = 2 %)")
    tau_sw_s: float = Field(ge=0, description="time lost per clock switch, s (1e9 stands for 'never switch')")
    eps_sw_j: float = Field(ge=0, description="energy lost per clock switch, J")
    d_min_s: float = Field(ge=0, description="minimum segment duration, s")
    clock_floor_mhz: float = Field(ge=0, description="lowest clock considered")
    boundaries: str = Field(description="kernel, phase, pass or custom")
    method: str = Field(description="planner method used (exact, lagrangian, static)")
    respect_power_cap: bool = True


class PlanSegment(_Frozen):
    """From ``start_kernel`` (index within the iteration) on, lock the SM clock to ``sm_clock_mhz``."""

    start_kernel: int = Field(ge=0)
    start_phase: str = Field(description="phase label of the first kernel")
    phase_aligned: bool = Field(description="True when the segment starts where its phase starts (the executor can act there)")
    sm_clock_mhz: int = Field(gt=0)
    mem_clock_mhz: int | None = Field(default=None, gt=0)
    duration_s: float = Field(gt=0, description="modelled duration of the segment at its clock")


class Prediction(_Frozen):
    """What the model predicts per iteration versus the default clocks (always modelled)."""

    energy_change_pct: float
    time_change_pct: float
    switches_per_iteration: int = Field(ge=0)
    energy_j: float = Field(gt=0)
    reference_energy_j: float = Field(gt=0)
    time_s: float = Field(gt=0)
    reference_time_s: float = Field(gt=0)
    gap: float = Field(ge=0, description="certified relative distance from the optimum of the model")
    modelled: Literal[True] = True


class ClockPlan(_Frozen):
    """A versioned clock plan for one GPU model and workload."""

    format: Literal["gridshift.clock_plan"] = PLAN_FORMAT
    version: int = PLAN_VERSION
    gpu_model: str
    driver: str = ""
    workload_fingerprint: str
    profile_source: Literal["measured", "synthetic"]
    provenance: Literal["measured", "modelled", "mixed"] = Field(description="of the time/energy tables")
    n_kernels: int = Field(gt=0, description="kernels per iteration the plan indexes into")
    parameters: PlanParameters
    segments: tuple[PlanSegment, ...]
    prediction: Prediction
    created_at: str = ""

    @model_validator(mode="after")
    def _segments_ok(self) -> "ClockPlan":
        if not self.segments:
            raise ValueError("a plan needs at least one segment")
        if self.segments[0].start_kernel != 0:
            raise ValueError("the first segment must start at kernel 0")
        starts = [s.start_kernel for s in self.segments]
        if any(b <= a for a, b in zip(starts, starts[1:])):
            raise ValueError("segment start_kernel values must be strictly increasing")
        if starts[-1] >= self.n_kernels:
            raise ValueError(f"segment starts at kernel {starts[-1]} but the iteration has {self.n_kernels}")
        return self

    @property
    def static_clock_mhz(self) -> int | None:
        """The clock when the plan is one static lock, else None."""
        return self.segments[0].sm_clock_mhz if len(self.segments) == 1 else None

    def phase_clocks(self) -> dict[str, int]:
        """``{phase label: clock}`` for every segment start, for the runtime executor.

        Raises :class:`PlanFileError` when a segment starts mid-phase: the executor sees phases,
        not kernels, so such a plan must be re-made with ``boundaries="phase"``.
        """
        out: dict[str, int] = {}
        for s in self.segments:
            if not s.phase_aligned:
                raise PlanFileError(f"segment at kernel {s.start_kernel} starts inside phase {s.start_phase!r}; "
                                    "re-plan with boundaries='phase' to execute it")
            out[s.start_phase] = s.sm_clock_mhz
        return out


def plan_from_result(result: PlanResult, profile: KernelProfile, tables: KernelTables, *,
                     parameters: PlanParameters, iteration: int | None = None,
                     now: datetime | None = None) -> ClockPlan:
    """Build a plan file model from a planner result and the profile it was planned on."""
    kernels = profile.iteration_kernels(iteration)
    first_of_phase = {i for i, k in enumerate(kernels) if i == 0 or k.phase != kernels[i - 1].phase}
    segs = tuple(PlanSegment(start_kernel=s.start_kernel, start_phase=kernels[s.start_kernel].phase,
                             phase_aligned=s.start_kernel in first_of_phase, sm_clock_mhz=s.sm_clock_mhz,
                             mem_clock_mhz=s.mem_clock_mhz if profile.meta.memory_clock_lockable else None,
                             duration_s=s.duration_s) for s in result.segments)
    pred = Prediction(energy_change_pct=-result.energy_saving_pct, time_change_pct=result.slowdown_pct,
                      switches_per_iteration=result.switches, energy_j=result.energy_j,
                      reference_energy_j=result.reference_energy_j, time_s=result.time_s,
                      reference_time_s=result.reference_time_s, gap=result.gap)
    prov = tables.provenance()
    return ClockPlan(gpu_model=profile.meta.gpu_model, driver=profile.meta.driver,
                     workload_fingerprint=profile.meta.workload_fingerprint, profile_source=profile.meta.source,
                     provenance=prov, n_kernels=len(kernels), parameters=parameters, segments=segs, prediction=pred,
                     created_at=(now or datetime.now(timezone.utc)).isoformat())


def save_plan(plan: ClockPlan, path: str | Path) -> Path:
    """Write ``plan`` as indented JSON; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(plan.model_dump_json(indent=1) + "\n")
    return p


def load_plan(path: str | Path, *, gpu_model: str | None = None, sm_clocks_mhz: Sequence[int] | None = None,
              workload_fingerprint: str | None = None) -> ClockPlan:
    """Read and validate a plan file, optionally against the GPU and workload at hand.

    Every failure is a :class:`PlanFileError` whose message starts with the file name.
    """
    p = Path(path)
    plan = load_versioned(p, ClockPlan, fmt=PLAN_FORMAT, version=PLAN_VERSION, what="clock plan",
                          error_cls=PlanFileError)
    if gpu_model is not None and plan.gpu_model != gpu_model:
        raise PlanFileError(f"{p}: plan is for {plan.gpu_model!r}, this GPU is {gpu_model!r}")
    if workload_fingerprint is not None and plan.workload_fingerprint != workload_fingerprint:
        raise PlanFileError(f"{p}: plan is for workload {plan.workload_fingerprint}, this job is {workload_fingerprint}")
    if sm_clocks_mhz:
        supported = set(int(c) for c in sm_clocks_mhz)
        bad = sorted({s.sm_clock_mhz for s in plan.segments} - supported)
        if bad:
            raise PlanFileError(f"{p}: SM clocks {bad} MHz are not supported by this GPU")
    return plan


def load_mode_plan(clock_plan: str | Path, *, policy_path: str | Path | None = None, gpu_model: str | None = None,
                   sm_clocks_mhz: Sequence[int] | None = None) -> ClockPlan:
    """Load the plan a policy mode names (``clock_plan: path``).

    A relative path is resolved against the policy file's folder, so a policy and its plan can move
    together. Errors are :class:`PlanFileError` naming the resolved file.
    """
    p = Path(clock_plan)
    if not p.is_absolute() and policy_path is not None:
        p = Path(policy_path).resolve().parent / p
    return load_plan(p, gpu_model=gpu_model, sm_clocks_mhz=sm_clocks_mhz)
