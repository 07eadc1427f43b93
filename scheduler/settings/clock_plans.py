"""Clock plans named by policy modes (``clock_plan: path``): load and check them before a job starts.

The flow does not execute a plan: its job is a subprocess, and clock switches must happen at phase
boundaries inside the training loop. The job runs it with :class:`plans.integrations.clock_runner.ClockPlanRunner`
(the shipped callbacks and helper: the first plan from ``GRIDSHIFT_CLOCK_PLAN``, later ones from the
mode file) and reports what it ran in its result file; the flow checks the file early, so a bad plan is bad
input (exit 2) and not a surprise hours into a deferred run, and records which plan applied and what
it is predicted to save (always modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from backends.types import Capabilities
from plans.dvfs.errors import PlanFileError
from plans.dvfs.plan_file import ClockPlan, load_mode_plan
from plans.integrations.protocol import CLOCK_PLAN_ENV
from scheduler.errors import PolicyError
from scheduler.policy.types import Policy

__all__ = ["CLOCK_PLAN_ENV", "ModePlan", "load_clock_plans", "load_mode_clock_plan", "load_plan_files"]



@dataclass(frozen=True)
class ModePlan:
    """A mode's clock plan, loaded and checked, with the file it came from."""

    mode: str
    path: Path
    plan: ClockPlan

    def describe(self) -> str:
        p = self.plan.prediction
        return (f"clock plan {self.path.name} (modelled: energy {p.energy_change_pct:+.1f}%, "
                f"time {p.time_change_pct:+.1f}% per step)")

    def to_json(self) -> dict[str, Any]:
        p = self.plan.prediction
        return {
            "mode": self.mode,
            "file": str(self.path),
            "gpu_model": self.plan.gpu_model,
            "workload_fingerprint": self.plan.workload_fingerprint,
            "segments": len(self.plan.segments),
            "predicted_energy_saving_pct": -p.energy_change_pct,
            "predicted_slowdown_pct": p.time_change_pct,
            "modelled": True,
            "executed_by": "the job (plans.integrations.clock_runner.ClockPlanRunner, GRIDSHIFT_CLOCK_PLAN); "
                           "confirmed only by the job's result file (see each span's settings_detail)",
        }


def load_clock_plans(policy: Policy, policy_path: str | Path | None,
                     caps: Capabilities | None = None) -> dict[str, ModePlan]:
    """Load every mode's clock plan (any mode may be entered mid-run), relative to the policy file.

    With ``caps``, each plan is also checked against the device: its SM clocks must be supported,
    and on measured hardware its GPU model must match (a simulated GPU stands in for any model).
    Raises :class:`PolicyError` whose message is ``file: message``.
    """
    paths: dict[str, Path] = {}
    for name, mode in policy.modes.items():
        if mode.clock_plan is None:
            continue
        path = Path(mode.clock_plan)
        if not path.is_absolute() and policy_path is not None:
            path = Path(policy_path).resolve().parent / path
        paths[name] = path
    return load_plan_files(paths, caps)


def load_plan_files(paths: Mapping[str, Path], caps: Capabilities | None = None) -> dict[str, ModePlan]:
    """Load and check each mode's plan file (``RunSpec.clock_plan_paths``; see :func:`load_clock_plans`)."""
    return {name: load_mode_clock_plan(name, path, caps) for name, path in paths.items()}


def load_mode_clock_plan(mode: str, path: Path, caps: Capabilities | None = None) -> ModePlan:
    """Load and check one mode's plan file (see :func:`load_clock_plans`)."""
    gpu_model = caps.devices[0].name if caps is not None and caps.measured and caps.devices else None
    clocks = caps.sm_clocks_mhz if caps is not None else None
    try:
        plan = load_mode_plan(path, gpu_model=gpu_model, sm_clocks_mhz=clocks or None)
        plan.phase_clocks()  # the executor acts at phase starts: refuse a plan it cannot run
    except PlanFileError as exc:
        msg = str(exc)
        if not msg.startswith(str(path)):
            msg = f"{path}: {msg}"
        raise PolicyError(f"{msg} (clock_plan of mode {mode!r})", path=str(path)) from None
    return ModePlan(mode=mode, path=path, plan=plan)
