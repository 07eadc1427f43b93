"""One benchmark run: gridshift's policy and the Zeus replica on the same trace job, plus baselines.

Both policies run under the same simulator with the same seed for the simulation stream (each
sees its own draws, as in Zeus; compare means over seeds, section 14.5). gridshift's own rng is
``default_rng([seed, 1])``, independent of both Zeus streams.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from plans.zeus_trace.baselines import default_cost, oracle
from plans.zeus_trace.gridshift_policy import GridshiftPolicy
from plans.zeus_trace.simulator import JobInfo, SimResult, simulate
from plans.zeus_trace.trace import TraceJob, load_trace_job
from plans.zeus_trace.zeus_replica import ZeusReplica

__all__ = ["run_pair", "bench_zeus_trace"]


def run_pair(trace: TraceJob, *, recurrences: int, seed: int, eta: float, beta: float) -> tuple[SimResult, SimResult]:
    """(gridshift, zeus_replica) results for one seed."""
    if recurrences < 1:
        raise ValueError("recurrences must be >= 1")
    if not 0.0 <= eta <= 1.0:
        raise ValueError("eta must be in [0, 1]")
    if beta <= 0:
        raise ValueError("beta must be > 0")
    info = JobInfo.of(trace, eta=eta, beta=beta)
    ours = simulate(
        GridshiftPolicy(info, rng=np.random.default_rng([seed, 1])), trace,
        recurrences=recurrences, seed=seed, eta=eta, beta=beta,
    )
    zeus = simulate(ZeusReplica(info, seed=seed), trace, recurrences=recurrences, seed=seed, eta=eta, beta=beta)
    return ours, zeus


def bench_zeus_trace(
    *, train: Path, power: Path, workload: str, recurrences: int = 50, seed: int = 0, eta: float = 0.5, beta: float = 2.0
) -> dict[str, Any]:
    """The ``gridshift bench zeus-trace --json`` object."""
    trace = load_trace_job(train, power, workload)
    ours, zeus = run_pair(trace, recurrences=recurrences, seed=seed, eta=eta, beta=beta)
    return {
        "workload": workload,
        "gpu": trace.gpu,
        "recurrences": recurrences,
        "seed": seed,
        "gridshift": ours.to_json(),
        "zeus_replica": zeus.to_json(),
        "oracle_cost_per_run": oracle(trace, eta=eta)[0],
        "default_cost_per_run": default_cost(trace, eta=eta),
    }
