"""The Zeus NSDI'23 recurring-job simulator (``shared/docs/zeus-trace-simulator.md`` sections 4-10).

Costs are charged exactly as the spec says, for any policy:

- one uniform draw of a training run per attempted job run, from the simulation stream (section 9),
  made before the budget check;
- epoch budget ``K = max_epochs``, or ``min(floor(U / c_ep), max_epochs)`` under early stopping with
  ``U = beta * min_cost`` (``min_cost``: the cheapest *recurrence total* so far);
- ``K = 0`` means the run never ran: nothing is charged and no history entry is written;
- a run reaches the target iff its ``target_epoch`` is present and ``<= K``; a miss is charged for K epochs;
- the first run of a batch size carries the profiling epoch, split evenly over the power limits the
  policy actually profiled (Zeus profiles all of them).

A policy sees only what a real job would see: the job description (B, P(b), b0, max_epochs, eta,
beta, MaxPower), the per-epoch time and power of the limits it profiles, and the outcome of its own
runs (:class:`RunObservation`). It never sees the train trace's epochs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from plans.errors import SimulationAborted
from plans.zeus_trace.job_table import TraceJob

__all__ = [
    "JobInfo",
    "RunObservation",
    "RunEntry",
    "RunCharge",
    "SimResult",
    "TracePolicy",
    "zeus_cost",
    "charge_run",
    "simulate",
    "MAX_TRIES",
]

MAX_TRIES = 20


def zeus_cost(energy_j: float, time_s: float, *, eta: float, max_power_w: float) -> float:
    """``eta * E + (1 - eta) * MaxPower * T`` in J (section 4)."""
    return eta * energy_j + (1.0 - eta) * max_power_w * time_s


@dataclass(frozen=True)
class JobInfo:
    """What a policy is allowed to know about the job before running it (section 14.6)."""

    batch_sizes: tuple[int, ...]
    power_limits_w: dict[int, tuple[int, ...]]
    default_b: int
    max_epochs: int
    eta: float
    beta: float
    max_power_w: float

    @classmethod
    def of(cls, trace: TraceJob, *, eta: float, beta: float) -> "JobInfo":
        return cls(
            batch_sizes=trace.batch_sizes,
            power_limits_w=dict(trace.power_limits_w),
            default_b=trace.default_b,
            max_epochs=trace.job.max_epochs,
            eta=eta,
            beta=beta,
            max_power_w=trace.max_power_w,
        )


@dataclass(frozen=True)
class RunObservation:
    """The outcome of one attempted job run, as the job itself would see it.

    ``never_ran`` attempts (budget K = 0) have zero energy, time and cost. ``cost_bound`` is the
    early-stopping bound U in force (``inf`` before the first recurrence completes).
    """

    batch_size: int
    power_limit_w: int
    energy_j: float
    time_s: float
    cost: float
    reached: bool
    epochs: float
    profiled: bool
    never_ran: bool
    cost_bound: float


@dataclass(frozen=True)
class RunEntry:
    """One history entry (section 10): one per job run that ran."""

    recurrence: int
    batch_size: int
    power_limit_w: int
    energy_j: float
    time_s: float
    cost: float
    reached: bool


@dataclass(frozen=True)
class RunCharge:
    energy_j: float
    time_s: float
    cost: float
    reached: bool
    epochs: float
    never_ran: bool


class TracePolicy(Protocol):
    """What the simulator asks of a policy, in order, for each attempted run."""

    def propose(self) -> int:
        """The batch size of the next run."""

    def needs_profile(self, batch_size: int) -> bool:
        """True when no power limit is chosen for ``batch_size`` yet."""

    def profile(self, batch_size: int, measure: Callable[[int], tuple[float, float]]) -> None:
        """Choose a limit for ``batch_size``; ``measure(p)`` returns (time per epoch s, average power W)."""

    def power_limit(self, batch_size: int) -> int:
        """The chosen power limit for ``batch_size``."""

    def observe(self, obs: RunObservation) -> None:
        """The outcome of the run just attempted."""


def charge_run(
    trace: TraceJob,
    batch_size: int,
    power_limit_w: int,
    *,
    target_epoch: float | None,
    cost_bound: float,
    profiled_limits_w: tuple[int, ...],
    eta: float,
) -> RunCharge:
    """Energy, time and cost of one run (section 5, steps 2-6) for a drawn ``target_epoch``."""
    b, p = batch_size, power_limit_w
    t_ep = trace.time_per_epoch_s[b][p]
    e_ep = trace.energy_per_epoch_j(b, p)
    max_epochs = trace.job.max_epochs
    if math.isinf(cost_bound):
        budget = max_epochs
    else:
        c_ep = eta * e_ep + (1.0 - eta) * trace.max_limit_w(b) * t_ep
        budget = min(math.floor(cost_bound / c_ep), max_epochs)
    if budget <= 0:
        return RunCharge(0.0, 0.0, 0.0, False, 0.0, True)
    reached = target_epoch is not None and target_epoch <= budget
    k = float(target_epoch) if reached else float(budget)  # type: ignore[arg-type]
    if profiled_limits_w:
        n = len(profiled_limits_w)
        e_bar = sum(trace.energy_per_epoch_j(b, q) for q in profiled_limits_w) / n
        t_bar = sum(trace.time_per_epoch_s[b][q] for q in profiled_limits_w) / n
        energy = e_bar + (k - 1.0) * e_ep
        time = t_bar + (k - 1.0) * t_ep
    else:
        energy = k * e_ep
        time = k * t_ep
    cost = zeus_cost(energy, time, eta=eta, max_power_w=trace.max_power_w)
    return RunCharge(energy, time, cost, reached, k, False)


@dataclass
class SimResult:
    """Everything one simulation produced (section 10)."""

    entries: list[RunEntry] = field(default_factory=list)
    recurrence_costs: list[float] = field(default_factory=list)

    @property
    def cumulative_cost(self) -> float:
        return float(sum(e.cost for e in self.entries))

    @property
    def cumulative_energy_j(self) -> float:
        return float(sum(e.energy_j for e in self.entries))

    @property
    def cumulative_time_s(self) -> float:
        return float(sum(e.time_s for e in self.entries))

    @property
    def final(self) -> tuple[int, int]:
        last = self.entries[-1]
        return (last.batch_size, last.power_limit_w)

    def to_json(self) -> dict[str, object]:
        return {
            "cumulative_cost": self.cumulative_cost,
            "cumulative_energy_j": self.cumulative_energy_j,
            "cumulative_time_s": self.cumulative_time_s,
            "final": list(self.final),
        }


def simulate(
    policy: TracePolicy,
    trace: TraceJob,
    *,
    recurrences: int,
    seed: int,
    eta: float,
    beta: float,
) -> SimResult:
    """Run ``recurrences`` recurrences of the job under ``policy`` (section 8).

    Raises :class:`SimulationAborted` on Zeus's fatal cases (section 14.11).
    """
    sim_rng = np.random.default_rng(seed)
    result = SimResult()
    min_cost = math.inf
    for i in range(1, recurrences + 1):
        acc = 0.0
        for _ in range(MAX_TRIES):
            b = policy.propose()
            if b not in trace.power_limits_w:
                raise SimulationAborted(f"policy proposed batch size {b}, which is not in B")
            profiled: list[int] = []
            if policy.needs_profile(b):

                def measure(p: int, _b: int = b) -> tuple[float, float]:
                    if p not in trace.time_per_epoch_s[_b]:
                        raise SimulationAborted(f"policy profiled {p} W, which is not in P({_b})")
                    if p not in profiled:
                        profiled.append(p)
                    return trace.time_per_epoch_s[_b][p], trace.avg_power_w[_b][p]

                policy.profile(b, measure)
            p = policy.power_limit(b)
            bound = beta * min_cost
            runs = trace.target_epochs[b]
            tau = runs[int(sim_rng.choice(len(runs), size=1, replace=False)[0])]
            charge = charge_run(
                trace, b, p, target_epoch=tau, cost_bound=bound, profiled_limits_w=tuple(profiled), eta=eta
            )
            policy.observe(
                RunObservation(
                    batch_size=b,
                    power_limit_w=p,
                    energy_j=charge.energy_j,
                    time_s=charge.time_s,
                    cost=charge.cost,
                    reached=charge.reached,
                    epochs=charge.epochs,
                    profiled=bool(profiled) and not charge.never_ran,
                    never_ran=charge.never_ran,
                    cost_bound=bound,
                )
            )
            if charge.never_ran:
                continue
            acc += charge.cost
            result.entries.append(RunEntry(i, b, p, charge.energy_j, charge.time_s, charge.cost, charge.reached))
            if charge.reached:
                min_cost = min(min_cost, acc)
                result.recurrence_costs.append(acc)
                break
            if i == 1:
                raise SimulationAborted("default batch size did not converge")
        else:
            raise SimulationAborted(f"did not reach the target in {MAX_TRIES} tries (recurrence {i})")
    return result
