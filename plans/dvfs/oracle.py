"""Exact solvers for small instances of the clock-planning problem (tests and benchmarks only).

All three solve exactly the problem stated in :mod:`plans.dvfs.planner` and return
``(energy_j, assignment)``; ``energy_j`` is ``inf`` when nothing fits the budget.

- :func:`brute_force`: every assignment (m**n); supports ``d_min_s`` and boundary masks.
- :func:`pareto_dp`: Pareto fronts of (time, energy) per "clock of the last item"; plain Python,
  written independently of the planner's vectorised version; no ``d_min_s``.
- :func:`milp`: the section 6.1 MILP (x_ij one-hot, z_i >= x_ij - x_(i-1)j) with HiGHS
  (``pip install gridshift[milp]``); no ``d_min_s``.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from plans.dvfs.errors import PlanInputError

__all__ = ["brute_force", "pareto_dp", "milp", "budget_for"]


def budget_for(t: np.ndarray, default: int, epsilon: float) -> float:
    """(1 + epsilon) x the time of every item at the default option."""
    return (1.0 + epsilon) * float(np.asarray(t)[:, default].sum())


def _allowed(n: int, boundaries: Sequence[bool] | None, tau_sw_s: float) -> np.ndarray:
    mask = np.ones(n, dtype=bool) if boundaries is None else np.asarray(boundaries, dtype=bool).copy()
    mask[0] = False
    if not np.isfinite(tau_sw_s):
        mask[:] = False
    return mask


def brute_force(t: np.ndarray, e: np.ndarray, budget_s: float, *, tau_sw_s: float = 0.0, eps_sw_j: float = 0.0,
                d_min_s: float = 0.0, boundaries: Sequence[bool] | None = None, limit: int = 2_000_000) -> tuple[float, np.ndarray]:
    """Enumerate all m**n assignments."""
    t, e = np.asarray(t, float), np.asarray(e, float)
    n, m = t.shape
    if m**n > limit:
        raise PlanInputError(f"brute force over {m}**{n} assignments exceeds the limit {limit}")
    allowed = _allowed(n, boundaries, tau_sw_s)
    tau = tau_sw_s if np.isfinite(tau_sw_s) else 0.0
    esw = eps_sw_j if np.isfinite(eps_sw_j) else 0.0
    best, best_a = np.inf, np.zeros(n, dtype=int)
    for combo in itertools.product(range(m), repeat=n):
        a = np.array(combo)
        sw = np.flatnonzero(a[1:] != a[:-1]) + 1
        if sw.size and not allowed[sw].all():
            continue
        tt = t[np.arange(n), a]
        T = tt.sum() + tau * sw.size
        if T > budget_s * (1 + 1e-12):
            continue
        if d_min_s > 0 and sw.size:
            seg = np.add.reduceat(tt, np.concatenate(([0], sw)))
            if np.any(seg < d_min_s * (1 - 1e-12)):
                continue
        E = e[np.arange(n), a].sum() + esw * sw.size
        if E < best:
            best, best_a = float(E), a
    return best, best_a


def pareto_dp(t: np.ndarray, e: np.ndarray, budget_s: float, *, tau_sw_s: float = 0.0, eps_sw_j: float = 0.0,
              boundaries: Sequence[bool] | None = None) -> tuple[float, np.ndarray]:
    """Exact Pareto-front DP on real-valued data (Nemhauser-Ullmann style)."""
    t, e = np.asarray(t, float), np.asarray(e, float)
    n, m = t.shape
    allowed = _allowed(n, boundaries, tau_sw_s)
    tau = tau_sw_s if np.isfinite(tau_sw_s) else 0.0
    esw = eps_sw_j if np.isfinite(eps_sw_j) else 0.0

    def prune(points: list[tuple[float, float, tuple[int, ...]]]) -> list[tuple[float, float, tuple[int, ...]]]:
        points.sort(key=lambda p: (p[0], p[1]))
        out, best_e = [], np.inf
        for p in points:
            if p[0] <= budget_s * (1 + 1e-12) and p[1] < best_e:
                out.append(p)
                best_e = p[1]
        return out

    fronts = [prune([(t[0, j], e[0, j], (j,))]) for j in range(m)]
    for i in range(1, n):
        union = prune([p for f in fronts for p in f]) if allowed[i] else []
        fronts = [prune([(p[0] + t[i, j], p[1] + e[i, j], p[2] + (j,)) for p in fronts[j]]
                        + [(p[0] + t[i, j] + tau, p[1] + e[i, j] + esw, p[2] + (j,)) for p in union]) for j in range(m)]
    best = min((p for f in fronts for p in f), key=lambda p: p[1], default=None)
    if best is None:
        return np.inf, np.zeros(n, dtype=int)
    return float(best[1]), np.array(best[2])


def silent_highs(highspy):  # type: ignore[no-untyped-def]
    """A HiGHS instance whose start-up banner goes to stderr, not stdout (JSON output stays clean)."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return h


def milp(t: np.ndarray, e: np.ndarray, budget_s: float, *, tau_sw_s: float = 0.0, eps_sw_j: float = 0.0,
         boundaries: Sequence[bool] | None = None, time_limit_s: float = 60.0) -> tuple[float, np.ndarray]:
    """The section 6.1 MILP solved with HiGHS (exact up to its MIP gap, set to 1e-9)."""
    import highspy

    t, e = np.asarray(t, float), np.asarray(e, float)
    n, m = t.shape
    allowed = _allowed(n, boundaries, tau_sw_s)
    tau = tau_sw_s if np.isfinite(tau_sw_s) else 0.0
    esw = eps_sw_j if np.isfinite(eps_sw_j) else 0.0
    nx, nz = n * m, n  # z[0] unused (fixed to 0)
    h = silent_highs(highspy)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 1e-9)
    h.setOptionValue("mip_abs_gap", 0.0)
    h.setOptionValue("time_limit", float(time_limit_s))
    inf = highspy.kHighsInf
    cost = np.concatenate((e.ravel(), np.full(nz, esw)))
    ub = np.ones(nx + nz)
    ub[nx:][~allowed] = 0.0
    h.addVars(nx + nz, np.zeros(nx + nz), ub)
    h.changeColsCost(nx + nz, np.arange(nx + nz, dtype=np.int32), cost)
    h.changeColsIntegrality(nx + nz, np.arange(nx + nz, dtype=np.int32),
                            np.full(nx + nz, highspy.HighsVarType.kInteger))
    lower, upper, starts, index, value = [], [], [], [], []

    def row(lo: float, hi: float, cols: list[int], vals: list[float]) -> None:
        lower.append(lo); upper.append(hi); starts.append(len(index)); index.extend(cols); value.extend(vals)

    for i in range(n):
        row(1.0, 1.0, [i * m + j for j in range(m)], [1.0] * m)
    # time in microseconds: HiGHS's absolute feasibility tolerance (1e-7) would swamp seconds
    row(-inf, budget_s * 1e6, list(range(nx)) + [nx + i for i in range(n)], list(t.ravel() * 1e6) + [tau * 1e6] * n)
    for i in range(1, n):
        for j in range(m):
            if allowed[i]:  # z_i - x_ij + x_(i-1)j >= 0
                row(0.0, inf, [nx + i, i * m + j, (i - 1) * m + j], [1.0, -1.0, 1.0])
            else:  # no switch here: the clock carries over
                row(0.0, 0.0, [i * m + j, (i - 1) * m + j], [1.0, -1.0])
    h.addRows(len(lower), np.array(lower), np.array(upper), len(index), np.array(starts, dtype=np.int32),
              np.array(index, dtype=np.int32), np.array(value))
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return np.inf, np.zeros(n, dtype=int)
    if status != highspy.HighsModelStatus.kOptimal:
        raise PlanInputError(f"HiGHS did not finish: {h.modelStatusToString(status)}")
    x = np.asarray(h.getSolution().col_value)[:nx].reshape(n, m)
    a = np.argmax(x, axis=1)
    sw = int(np.count_nonzero(a[1:] != a[:-1]))
    return float(e[np.arange(n), a].sum() + esw * sw), a
