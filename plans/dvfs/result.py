"""PlanResult: the one result shape every DVFS planner and oracle returns (after SciPy's OptimizeResult)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PlannedSegment", "PlanResult", "STATUS_MESSAGES"]

#: status -> meaning; every solver reports through this one table
STATUS_MESSAGES: dict[int, str] = {
    0: "optimal: exact solution of the stated problem",
    1: "feasible: Lagrangian plan; 'gap' bounds its distance from the optimum",
    2: "reference: no plan beats the default clocks within the budget",
}


@dataclass(frozen=True)
class PlannedSegment:
    """A maximal run of consecutive items at one clock."""

    start_item: int
    end_item: int  # exclusive
    start_kernel: int  # index within the iteration of the segment's first kernel
    sm_clock_mhz: int
    mem_clock_mhz: int
    duration_s: float  # modelled, at this clock
    first_phase: str


@dataclass(frozen=True)
class PlanResult:
    """What a planner decided and what the model predicts for it (every figure is modelled).

    ``energy_j``/``time_s`` include switch costs (``switches`` x tau_sw, eps_sw) but not the
    clock-independent CPU gaps of the iteration. ``gap`` = (energy - lower bound) / lower bound,
    0 for exact solvers; ``lower_bound_j`` is a valid lower bound on the optimum.
    """

    assignment: np.ndarray
    segments: tuple[PlannedSegment, ...]
    energy_j: float
    time_s: float
    switches: int
    reference_energy_j: float
    reference_time_s: float
    budget_s: float
    lower_bound_j: float
    success: bool
    status: int
    method: str
    n_evals: int
    provenance: str
    message: str = ""

    @property
    def gap(self) -> float:
        return max(self.energy_j - self.lower_bound_j, 0.0) / self.lower_bound_j if self.lower_bound_j > 0 else 0.0

    @property
    def energy_saving_pct(self) -> float:
        return 100.0 * (1.0 - self.energy_j / self.reference_energy_j)

    @property
    def slowdown_pct(self) -> float:
        return 100.0 * (self.time_s / self.reference_time_s - 1.0)

    @property
    def modelled(self) -> bool:
        return self.provenance != "measured"

    @property
    def static_clock_mhz(self) -> int | None:
        """The clock when the plan is one segment, else None."""
        return self.segments[0].sm_clock_mhz if len(self.segments) == 1 else None
