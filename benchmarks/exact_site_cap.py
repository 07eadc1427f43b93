"""The exact joint plan of several runs at one power-capped site: a MILP in HiGHS, independent of the planner.

Used by ``tests/fleet/test_site_cap.py`` and ``simulation/site_cap.py``'s exact column to check gridshift's
placement (one run after another, then :func:`scheduler.service.joint.plan_together`) against the
truth: whether a plan meeting every deadline exists at all, and the least carbon of one.

The problem, on slots of ``slot_s`` with one intensity ``c[t]`` each: run ``i`` may run in slots
``[first[i], end[i])``, one mode per slot (power ``power_w[m]`` for the whole run, speed ``speed[m]``
in reference seconds per second), without a gap once started (the nightly jobs cannot pause), and must
do ``work_s[i]``; in every slot the runs' summed power is at most ``cap_w`` and their GPUs at most
``gpus_per_node``. Slots are counted whole (a run's last slot is charged in full): the feasibility is
the planner's exactly, the carbon an upper bound of the planner's count.

Variables: ``x[i, t, m]`` (run i in mode m in slot t, binary) and ``u[i, t]`` (run i starts at t, binary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["ExactRun", "exact_site_cap"]


@dataclass(frozen=True)
class ExactRun:
    """One run: its work (reference s), the slots it may use ``[first, end)``, its GPUs."""

    work_s: float
    first: int
    end: int
    gpus: int = 1


def exact_site_cap(c: np.ndarray, runs: Sequence[ExactRun], power_w: np.ndarray, speed: np.ndarray, *,
                   slot_s: float, cap_w: float, gpus_per_node: int = 1_000_000,
                   time_limit_s: float = 120.0) -> tuple[float, list[np.ndarray]]:
    """(least carbon in grams, the mode per slot of each run, -1 = not running); (inf, []) when no plan meets
    every deadline under the cap."""
    import highspy

    from plans.dvfs.oracle import silent_highs

    h = silent_highs(highspy)
    h.setOptionValue("mip_rel_gap", 1e-6)
    h.setOptionValue("time_limit", float(time_limit_s))
    c = np.asarray(c, dtype=float)
    power_w, speed = np.asarray(power_w, dtype=float), np.asarray(speed, dtype=float)
    T, M, N = len(c), len(power_w), len(runs)
    X = lambda i, t, m: (i * T + t) * M + m  # noqa: E731
    nx = N * T * M
    U = lambda i, t: nx + i * T + t  # noqa: E731
    n = nx + N * T
    ub = np.zeros(n)
    cost = np.zeros(n)
    for i, r in enumerate(runs):
        for t in range(max(r.first, 0), min(r.end, T)):
            for m in range(M):
                ub[X(i, t, m)] = 1.0
                cost[X(i, t, m)] = power_w[m] * slot_s * c[t] / 3.6e6
            ub[U(i, t)] = 1.0
    h.addVars(n, np.zeros(n), ub)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
    inf = highspy.kHighsInf
    lower: list[float] = []
    upper: list[float] = []
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []

    def row(lo: float, hi: float, cols: list[int], vals: list[float]) -> None:
        lower.append(lo)
        upper.append(hi)
        starts.append(len(index))
        index.extend(cols)
        value.extend(vals)

    for i, r in enumerate(runs):
        for t in range(T):
            row(-inf, 1.0, [X(i, t, m) for m in range(M)], [1.0] * M)                     # one mode per slot
            prev = [X(i, t - 1, m) for m in range(M)] if t else []
            # a start where running begins: u[i,t] >= r[i,t] - r[i,t-1]
            row(0.0, inf, [U(i, t)] + [X(i, t, m) for m in range(M)] + prev, [1.0] + [-1.0] * M + [1.0] * len(prev))
        row(-inf, 1.0, [U(i, t) for t in range(T)], [1.0] * T)                               # one block: no pause
        # work in hours, so that HiGHS's absolute tolerance is far below a second of work
        row(r.work_s / 3600.0, inf, [X(i, t, m) for t in range(T) for m in range(M)],
            [speed[m] * slot_s / 3600.0 for _ in range(T) for m in range(M)])
    for t in range(T):
        cols = [X(i, t, m) for i in range(N) for m in range(M)]
        row(-inf, cap_w / 1000.0, cols, [power_w[m] / 1000.0 for _ in range(N) for m in range(M)])  # the cap, kW
        row(-inf, float(gpus_per_node), cols, [float(runs[i].gpus) for i in range(N) for _ in range(M)])
    h.addRows(len(lower), np.array(lower), np.array(upper), len(index), np.array(starts, dtype=np.int32),
              np.array(index, dtype=np.int32), np.array(value))
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return math.inf, []
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS did not finish: {h.modelStatusToString(status)}")
    x = np.asarray(h.getSolution().col_value)[:nx].reshape(N, T, M)
    modes = [np.where(x[i].max(axis=1) > 0.5, x[i].argmax(axis=1), -1) for i in range(N)]
    return float(h.getInfo().objective_function_value), modes
