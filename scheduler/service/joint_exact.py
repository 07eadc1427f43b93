"""The last resort of a joint plan at a capped site: does any plan meet every deadline? A MILP (HiGHS).

When no order of one-run-at-a-time plans meets every deadline (:mod:`scheduler.service.joint`), this
asks the exact question on the planner's slot grid: each run one mode per slot (the policy's and the
cap's power limits), without a gap once started, its work done by its deadline, the runs' power in
every slot within the site's headroom and their GPUs within the node's. Its answer is a power
reservation per run and slot; each run is then planned by the planner itself inside the cap less the
other runs' reservations, which always leaves room for its own (see :func:`reservations`).

Needs ``highspy`` (``pip install 'gridshift[milp]'``, in the dev extras); without it, past ``max_cells``
variables, or with no plan found within ``time_limit_s``, there is no answer (None) and the joint plan
keeps the best order it found. The minimum dwell is not modelled here (one slot): the planner's plans inside the
reservations keep it, and may miss where only a shorter dwell fits.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Sequence

import numpy as np

from scheduler.planner import ModeFigures
from scheduler.planner.power_cap import PowerCap

__all__ = ["plan_exists", "reservations"]

#: per run, the power (start, end, W) it may take in each slot
Reserved = list[tuple[tuple[datetime, datetime, float], ...]]


def plan_exists(windows: Sequence[tuple[datetime, datetime, float, int]], modes: Sequence[ModeFigures],
                headroom: PowerCap, *, now: datetime, slot_s: float, gpus_free: int,
                time_limit_s: float = 60.0) -> bool | None:
    """Whether a plan meeting every deadline exists (True/False), or None when the solver could not tell."""
    found, infeasible = _solve(windows, modes, headroom, now=now, slot_s=slot_s, gpus_free=gpus_free,
                               weights=None, max_cells=400_000, time_limit_s=time_limit_s)
    if found is not None:
        return True
    return False if infeasible else None


def reservations(windows: Sequence[tuple[datetime, datetime, float, int]], modes: Sequence[ModeFigures],
                 headroom: PowerCap, *, now: datetime, slot_s: float, gpus_free: int, weights: np.ndarray | None = None,
                 max_cells: int = 40_000, time_limit_s: float = 20.0, steady: bool = False,
                 changeover: bool = False) -> Reserved | None:
    """Per run (``(not_before, deadline, work_s, gpus)``), the power (start, end, W) it may take per slot in a
    plan meeting every deadline within ``headroom``; None when there is none, or no solver to say.

    ``weights``: a cost per slot per W (the forecast), so that of the plans that meet every deadline the
    reservations follow the cleanest hours; None asks only whether one exists (much faster).

    ``steady``: each run in one mode throughout (a plan the planner's minimum dwell always allows), and
    with ``changeover`` its power counted one more slot past its end (the site's changeover, which
    placement books after a run's last segment)."""
    return _solve(windows, modes, headroom, now=now, slot_s=slot_s, gpus_free=gpus_free, weights=weights,
                  max_cells=max_cells, time_limit_s=time_limit_s, steady=steady, changeover=changeover)[0]


def _solve(windows: Sequence[tuple[datetime, datetime, float, int]], modes: Sequence[ModeFigures],
           headroom: PowerCap, *, now: datetime, slot_s: float, gpus_free: int, weights: np.ndarray | None,
           max_cells: int, time_limit_s: float, steady: bool = False,
           changeover: bool = False) -> tuple[Reserved | None, bool]:
    """(:func:`reservations`' answer, whether the solver proved that no plan exists)."""
    try:
        import highspy
    except ImportError:
        return None, False
    first = [max(int(math.ceil((a - now).total_seconds() / slot_s - 1e-9)), 0) for a, _, _, _ in windows]
    end = [int(math.floor((d - now).total_seconds() / slot_s + 1e-9)) for _, d, _, _ in windows]
    T, M, N = max(end, default=0), len(modes), len(windows)
    if T <= 0 or N * T * M > max_cells:
        return None, False
    power = np.array([m.power_w for m in modes])
    speed = np.array([m.speed for m in modes])
    room = headroom.slot_headroom(now, slot_s, T)
    cost_t = np.zeros(T) if weights is None else np.asarray(weights, dtype=float)[:T]
    from plans.dvfs.oracle import silent_highs

    h = silent_highs(highspy)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 1e-3)
    X = lambda i, t, m: (i * T + t) * M + m  # noqa: E731
    nx = N * T * M
    U = lambda i, t: nx + i * T + t  # noqa: E731
    Y = lambda i, m: nx + N * T + i * M + m  # noqa: E731  (steady: run i's one mode)
    W = lambda i, t, m: nx + N * T + N * M + (i * T + t) * M + m  # noqa: E731  (its changeover slot after it ends)
    n = nx + N * T + (N * M if steady else 0) + (nx if steady and changeover else 0)
    ub, cost = np.zeros(n), np.zeros(n)
    if steady:
        ub[nx + N * T:] = 1.0
    for i in range(N):
        for t in range(first[i], min(end[i], T)):
            ub[[X(i, t, m) for m in range(M)]] = 1.0
            cost[[X(i, t, m) for m in range(M)]] = power * slot_s * cost_t[t] / 3.6e6
            ub[U(i, t)] = 1.0
    h.addVars(n, np.zeros(n), ub)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
    ints = nx + N * T + (N * M if steady else 0)  # the changeover columns are continuous (0 or 1 at the optimum)
    h.changeColsIntegrality(ints, np.arange(ints, dtype=np.int32), np.full(ints, highspy.HighsVarType.kInteger))
    inf = highspy.kHighsInf
    rows: tuple[list[float], list[float], list[int], list[int], list[float]] = ([], [], [], [], [])

    def row(lo: float, hi: float, cols: list[int], vals: list[float]) -> None:
        rows[0].append(lo)
        rows[1].append(hi)
        rows[2].append(len(rows[3]))
        rows[3].extend(cols)
        rows[4].extend(vals)

    for i, (_, _, work_s, _) in enumerate(windows):
        for t in range(T):
            here = [X(i, t, m) for m in range(M)]
            row(-inf, 1.0, here, [1.0] * M)
            prev = [X(i, t - 1, m) for m in range(M)] if t else []
            row(0.0, inf, [U(i, t)] + here + prev, [1.0] + [-1.0] * M + [1.0] * len(prev))
        row(-inf, 1.0, [U(i, t) for t in range(T)], [1.0] * T)
        if steady:
            row(-inf, 1.0, [Y(i, m) for m in range(M)], [1.0] * M)
            for t in range(T):
                for m in range(M):
                    row(-inf, 0.0, [X(i, t, m), Y(i, m)], [1.0, -1.0])
                    if changeover and t:  # W >= x[t-1, m] - (running at t)
                        row(0.0, inf, [W(i, t, m), X(i, t - 1, m)] + [X(i, t, k) for k in range(M)],
                            [1.0, -1.0] + [1.0] * M)
        row(work_s / 3600.0, inf, [X(i, t, m) for t in range(T) for m in range(M)],
            [speed[m] * slot_s / 3600.0 for _ in range(T) for m in range(M)])
    for t in range(T):
        cols = [X(i, t, m) for i in range(N) for m in range(M)]
        if steady and changeover:
            cols += [W(i, t, m) for i in range(N) for m in range(M)]
        k = len(cols) // (N * M)
        if math.isfinite(room[t]):
            row(-inf, room[t] / 1000.0, cols, [power[m] / 1000.0 for _ in range(k * N) for m in range(M)])
        row(-inf, float(gpus_free), cols, [float(windows[i][3]) for _ in range(k) for i in range(N) for _ in range(M)])
    h.addRows(len(rows[0]), np.array(rows[0]), np.array(rows[1]), len(rows[3]), np.array(rows[2], dtype=np.int32),
              np.array(rows[3], dtype=np.int32), np.array(rows[4]))
    h.run()
    infeasible = h.getModelStatus() == highspy.HighsModelStatus.kInfeasible
    # optimal, or a plan meeting every deadline found before the time limit (its carbon not proven least)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal and h.getInfo().primal_solution_status != 2:
        return None, infeasible
    x = np.asarray(h.getSolution().col_value)[:nx].reshape(N, T, M)
    at = lambda t: now + timedelta(seconds=t * slot_s)  # noqa: E731
    return [tuple((at(t), at(t + 1), float(power[int(np.argmax(x[i, t]))])) for t in range(T) if x[i, t].max() > 0.5)
            for i in range(N)], False
