"""The benchmark: gridshift's policy and the Zeus replica on every workload x GPU pair, with baselines.

Both policies run under the same simulator with the same seed for the simulation stream (each
sees its own draws, as in Zeus; compare means over seeds, spec section 14.5). gridshift's own rng is
``default_rng([seed, 1])``, independent of both Zeus streams. Beside them, in the same run:

- **default** ("never explore"): the default batch size at its highest limit every recurrence;
- **oracle**: the cheapest (b, p) by expected epochs, no exploration (spec section 12);
- **Zeus reference**: Zeus 0.16.0's own unmodified simulator on the same traces, read from
  ``zeus_reference.json`` when its settings match this run's (eta, beta, recurrences, seeds).

Every figure is modelled from the traces; nothing is measured on hardware here.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from plans.errors import BadTraceFile
from plans.zeus_trace.baselines import default_cost, oracle
from plans.zeus_trace.gridshift_policy import GridshiftPolicy
from plans.zeus_trace.simulator import JobInfo, SimResult, simulate
from plans.zeus_trace.job_table import JOBS, TraceJob, load_trace_job
from plans.zeus_trace.zeus_replica import ZeusReplica

__all__ = ["PairResult", "run_pair", "bench_pairs", "bench_traces", "load_reference", "trace_workloads", "summarise"]


def run_pair(trace: TraceJob, *, recurrences: int, seed: int, eta: float, beta: float) -> tuple[SimResult, SimResult]:
    """(gridshift, zeus_replica) results for one seed."""
    if recurrences < 1:
        raise ValueError("recurrences must be >= 1")
    if not 0.0 <= eta <= 1.0:
        raise ValueError("eta must be in [0, 1]")
    if beta <= 1:
        raise ValueError("beta must be > 1")
    info = JobInfo.of(trace, eta=eta, beta=beta)
    ours = simulate(
        GridshiftPolicy(info, rng=np.random.default_rng([seed, 1])), trace,
        recurrences=recurrences, seed=seed, eta=eta, beta=beta,
    )
    zeus = simulate(ZeusReplica(info, seed=seed), trace, recurrences=recurrences, seed=seed, eta=eta, beta=beta)
    return ours, zeus


@dataclass(frozen=True)
class PairResult:
    """One workload x GPU over several seeds. Costs are cumulative over ``recurrences`` (Zeus units, J)."""

    workload: str
    gpu: str
    recurrences: int
    seeds: tuple[int, ...]
    default_batch_size: int
    oracle_cost: float
    oracle_config: tuple[int, int]
    default_cost: float
    gridshift: tuple[SimResult, ...]
    zeus_replica: tuple[SimResult, ...]
    zeus_reference: float | None

    @property
    def gridshift_mean(self) -> float:
        return float(np.mean([r.cumulative_cost for r in self.gridshift]))

    @property
    def zeus_replica_mean(self) -> float:
        return float(np.mean([r.cumulative_cost for r in self.zeus_replica]))

    @property
    def zeus(self) -> float:
        """Zeus's own figure when the reference covers this run, else the replica's."""
        return self.zeus_reference if self.zeus_reference is not None else self.zeus_replica_mean

    def to_json(self) -> dict[str, Any]:
        def runs(rs: Sequence[SimResult]) -> list[dict[str, object]]:
            return [dict(r.to_json(), seed=s) for s, r in zip(self.seeds, rs)]

        return {
            "workload": self.workload,
            "gpu": self.gpu,
            "recurrences": self.recurrences,
            "seeds": list(self.seeds),
            "default_batch_size": self.default_batch_size,
            "oracle_cost": self.oracle_cost,
            "oracle_config": list(self.oracle_config),
            "default_cost": self.default_cost,
            "gridshift_mean": self.gridshift_mean,
            "zeus_replica_mean": self.zeus_replica_mean,
            "zeus_reference_mean": self.zeus_reference,
            "gridshift_over_zeus": self.gridshift_mean / self.zeus,
            "gridshift_over_oracle": self.gridshift_mean / self.oracle_cost,
            "gridshift": runs(self.gridshift),
            "zeus_replica": runs(self.zeus_replica),
        }


def load_reference(path: Path, *, eta: float, beta: float, recurrences: int, seeds: Sequence[int]) -> dict[tuple[str, str], float]:
    """Zeus's own mean cumulative cost per (workload, gpu), or {} when its settings differ from this run's."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        s = data["settings"]
        same = (float(s["eta_knob"]) == eta and float(s["beta_knob"]) == beta
                and int(s["recurrences"]) == recurrences and sorted(int(x) for x in s["seeds"]) == sorted(seeds))
        rows = data["summary_mean_over_seeds"]
        return {(str(r["workload"]), str(r["gpu"])): float(r["zeus_cumulative_cost_mean"]) for r in rows} if same else {}
    except OSError as exc:
        raise BadTraceFile(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise BadTraceFile(f"{path}: not a Zeus reference file: {exc}") from exc


def trace_workloads(train_csv: Path) -> list[str]:
    """The known workloads that ``train_csv`` has rows for, in the spec's order."""
    try:
        with Path(train_csv).open(newline="", encoding="utf-8") as fh:
            present = {row.get("dataset", "") for row in csv.DictReader(fh)}
    except OSError as exc:
        raise BadTraceFile(f"{train_csv}: cannot read: {exc.strerror or exc}") from exc
    return [w for w in JOBS if w in present]


def bench_traces(
    traces: Sequence[TraceJob],
    *,
    recurrences: int = 50,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    eta: float = 0.5,
    beta: float = 2.0,
    reference: dict[tuple[str, str], float] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[PairResult]:
    """Every trace (one workload x GPU pair each), each over ``seeds``, with the baselines beside;
    ``progress(done, total)`` hears of each (pair, seed) replayed."""
    out = []
    total = len(traces) * len(seeds)
    for trace in traces:
        w = trace.job.dataset
        runs = []
        for s in seeds:
            runs.append(run_pair(trace, recurrences=recurrences, seed=s, eta=eta, beta=beta))
            if progress is not None:
                progress(len(out) * len(seeds) + len(runs), total)
        o_cost, o_b, o_p = oracle(trace, eta=eta)
        out.append(PairResult(
            workload=w, gpu=trace.gpu, recurrences=recurrences, seeds=tuple(seeds),
            default_batch_size=trace.default_b,
            oracle_cost=recurrences * o_cost, oracle_config=(o_b, o_p),
            default_cost=recurrences * default_cost(trace, eta=eta),
            gridshift=tuple(g for g, _ in runs), zeus_replica=tuple(z for _, z in runs),
            zeus_reference=(reference or {}).get((w, trace.gpu)),
        ))
    return out


def bench_pairs(
    *,
    train: Path,
    powers: Sequence[Path],
    workloads: Sequence[str],
    recurrences: int = 50,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    eta: float = 0.5,
    beta: float = 2.0,
    reference: dict[tuple[str, str], float] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[PairResult]:
    """Every (workload, power trace) pair of the trace files, each over ``seeds``."""
    traces = [load_trace_job(train, power, w) for power in powers for w in workloads]
    return bench_traces(traces, recurrences=recurrences, seeds=seeds, eta=eta, beta=beta, reference=reference,
                        progress=progress)


def summarise(pairs: Sequence[PairResult]) -> dict[str, float | int]:
    """The acceptance figures: geometric mean and worst ratios over the pairs."""
    if not pairs:
        return {}
    g_z = [p.gridshift_mean / p.zeus for p in pairs]
    g_o = [p.gridshift_mean / p.oracle_cost for p in pairs]
    return {
        "pairs": len(pairs),
        "geomean_gridshift_over_zeus": math.exp(float(np.mean(np.log(g_z)))),
        "max_gridshift_over_zeus": max(g_z),
        "max_gridshift_over_oracle": max(g_o),
        "pairs_above_zeus": sum(1 for r in g_z if r > 1.0),
        "pairs_with_reference": sum(1 for p in pairs if p.zeus_reference is not None),
    }
