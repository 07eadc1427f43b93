"""Kernel-level DVFS plans: profiles, a per-kernel GPU model, a planner with switch costs, plan files, an executor.

Pure planning (no NVML, no clock) except :mod:`plans.dvfs.executor` (a worker thread that calls a
backend) and :mod:`plans.dvfs.profiles.capture` (torch.profiler, imported lazily). See ``docs/dvfs.md``.
"""

from plans.dvfs.errors import DvfsError, ExecutorError, PlanFileError, PlanInputError, ProfileError
from plans.dvfs.executor import ClockControl, DryRunControl, PlanExecutor, attach_to_modules
from plans.dvfs.model import KernelTables, ModelParams, build_tables
from plans.dvfs.plan_file import ClockPlan, PlanParameters, load_plan, plan_from_result, save_plan
from plans.dvfs._search import evaluate_assignment
from plans.dvfs.planner import plan_dvfs
from plans.dvfs.profiles.kernel_profile import KernelProfile, load_profile, save_profile
from plans.dvfs.result import PlanResult, PlannedSegment

__all__ = [
    "ClockControl",
    "ClockPlan",
    "DryRunControl",
    "DvfsError",
    "ExecutorError",
    "KernelProfile",
    "KernelTables",
    "ModelParams",
    "PlanExecutor",
    "PlanFileError",
    "PlanInputError",
    "PlanParameters",
    "PlanResult",
    "PlannedSegment",
    "ProfileError",
    "attach_to_modules",
    "build_tables",
    "evaluate_assignment",
    "load_plan",
    "load_profile",
    "plan_dvfs",
    "plan_from_result",
    "save_plan",
    "save_profile",
]
