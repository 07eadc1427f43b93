"""Exact solvers of the planner's slotted problem, independent of the planner: a MILP and a DP.

Used by tests (``tests/scheduler/test_planner_exact.py``) and ``benchmarks/simulate_exact.py`` to
check ``scheduler.planner`` against something that shares none of its code: ``exact_slots`` is a MILP
(numpy and HiGHS, ``highspy`` in the dev extras, no work quanta); ``exact_dp`` a dynamic programme on
whole work units (nothing rounded), fast enough for real sizes and years.

The problem (the planner's, see ``scheduler/planner/solve.py``): slots of ``slot_s`` with intensity
``c[t]``; in each slot the job waits or runs one mode; every running slot but the last is run whole
and the last in part; minimise ``sum power_w[m] x slot_s x c[t] x (share of slot t run in m) / 3.6e6``
(grams) subject to: work done >= ``work_s`` (+ ``resume_overhead_s`` per start after the first);
nothing before ``first_start`` or from ``deadline_slots`` on; no start after ``last_start``; one start
unless ``pausable``; a mode entered is held ``dwell_slots`` slots unless the job ends first.

Variables per slot t and mode m: ``x`` (runs m in t, binary), ``w`` (share of t run in m), ``y``
(enters m at t, binary, only with a dwell); per slot: ``e`` (t is the last running slot), ``u`` (a
start, or a resume, at t).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["exact_slots"]


def _highs():  # type: ignore[no-untyped-def]
    """A silent HiGHS instance: the DVFS oracle's (a solver utility, not the planner)."""
    import highspy

    from plans.dvfs.oracle import silent_highs

    return highspy, silent_highs(highspy)


def exact_slots(c: np.ndarray, power_w: np.ndarray, speed: np.ndarray, *, slot_s: float, work_s: float,
                first_start: int, deadline_slots: int, dwell_slots: int = 1, pausable: bool = False,
                resume_overhead_s: float = 0.0, last_start: int | None = None,
                time_limit_s: float = 120.0) -> tuple[float, np.ndarray]:
    """(the optimal carbon in grams, the mode per slot, -1 = not running); (inf, []) when infeasible."""
    highspy, h = _highs()
    c = np.asarray(c, dtype=float)
    power_w, speed = np.asarray(power_w, dtype=float), np.asarray(speed, dtype=float)
    T, M, D = int(deadline_slots), len(power_w), max(int(dwell_slots), 1)
    nx = T * M
    X, Wc, Y = 0, nx, 2 * nx
    E = 3 * nx if D > 1 else 2 * nx
    U = E + T
    n = U + T
    inf = highspy.kHighsInf
    h.setOptionValue("mip_rel_gap", 1e-8)
    h.setOptionValue("time_limit", float(time_limit_s))
    ub = np.ones(n)
    for t in range(T):
        if t < first_start:
            ub[X + t * M: X + (t + 1) * M] = 0.0
        if t < first_start:
            ub[U + t] = 0.0
    cost = np.zeros(n)
    cost[Wc:Wc + nx] = (power_w[None, :] * slot_s * c[:T, None] / 3.6e6).ravel()
    h.addVars(n, np.zeros(n), ub)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
    binary = [k for k in range(n) if not Wc <= k < Wc + nx]
    h.changeColsIntegrality(len(binary), np.array(binary, dtype=np.int32),
                            np.full(len(binary), highspy.HighsVarType.kInteger))
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

    xs = lambda t: [X + t * M + m for m in range(M)]  # noqa: E731
    ws = lambda t: [Wc + t * M + m for m in range(M)]  # noqa: E731
    for t in range(T):
        row(-inf, 1.0, xs(t), [1.0] * M)                                          # one mode per slot
        for m in range(M):
            row(-inf, 0.0, [Wc + t * M + m, X + t * M + m], [1.0, -1.0])           # share only where it runs
        row(0.0, inf, ws(t) + xs(t) + [E + t], [1.0] * M + [-1.0] * M + [1.0])     # whole unless the last
        row(0.0, inf, xs(t) + [E + t], [1.0] * M + [-1.0])                         # the last slot runs
        row(-inf, 1.0, xs(t) + [E + k for k in range(t)], [1.0] * (M + t))         # nothing after the last
        prev = xs(t - 1) if t else []
        row(0.0, inf, [U + t] + xs(t) + prev, [1.0] + [-1.0] * M + [1.0] * len(prev))  # a start where a run begins
        if D > 1:
            for m in range(M):
                cols = [Y + t * M + m, X + t * M + m] + ([X + (t - 1) * M + m] if t else [])
                row(0.0, inf, cols, [1.0, -1.0] + ([1.0] if t else []))            # entering m at t
                for j in range(1, D):
                    if t + j < T:                                                   # held D slots or the job ends
                        row(0.0, inf, [X + (t + j) * M + m, Y + t * M + m] + [E + k for k in range(t, t + j)],
                            [1.0, -1.0] + [1.0] * j)
    row(1.0, 1.0, [E + t for t in range(T)], [1.0] * T)                            # the job finishes
    if not pausable:
        row(-inf, 1.0, [U + t for t in range(T)], [1.0] * T)
    if last_start is not None:
        row(1.0, inf, [U + t for t in range(min(last_start + 1, T))], [1.0] * min(last_start + 1, T))  # first start
    over = resume_overhead_s if pausable else 0.0
    # work in hours, so that HiGHS's absolute tolerance (1e-7) is far below a second of work
    row((work_s - over) / 3600.0, inf, [Wc + k for k in range(nx)] + [U + t for t in range(T)],
        list(np.tile(speed, T) * slot_s / 3600.0) + [-over / 3600.0] * T)
    h.addRows(len(lower), np.array(lower), np.array(upper), len(index), np.array(starts, dtype=np.int32),
              np.array(index, dtype=np.int32), np.array(value))
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return math.inf, np.zeros(0, dtype=int)
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS did not finish: {h.modelStatusToString(status)}")
    sol = np.asarray(h.getSolution().col_value)
    x = sol[X:X + nx].reshape(T, M)
    modes = np.where(x.max(axis=1) > 0.5, x.argmax(axis=1), -1)
    last = int(np.flatnonzero(modes >= 0).max()) if (modes >= 0).any() else -1
    return float(h.getInfo().objective_function_value), modes[:last + 1]


def exact_dp(c: np.ndarray, power_w: np.ndarray, units_per_slot: np.ndarray, *, slot_s: float, work_units: int,
             first_start: int, deadline_slots: int, dwell_slots: int = 1, pausable: bool = False,
             resume_units: int = 0, allowed: np.ndarray | None = None) -> float:
    """The optimal carbon (grams) of the same problem by dynamic programming on exact work.

    Each mode's work in a slot is a whole number of units (``units_per_slot``: speeds that are
    multiples of 1/n of the reference mode's slot work), so nothing is rounded: the value at every
    (slot, mode, slots held, units left) is exact. Fast enough for year-long benchmarks and
    real-size tests, where :func:`exact_slots` (the MILP) is not; tests check the two agree.
    ``allowed``: a (slots, modes) mask, False where a mode may not run in a slot (a power cap).
    """
    c = np.asarray(c, dtype=float)
    g = np.asarray(units_per_slot, dtype=np.int64)
    M, T, D = len(g), int(deadline_slots), max(int(dwell_slots), 1)
    R = int(work_units) + (3 * int(resume_units) if pausable else 0)
    e = np.asarray(power_w, dtype=float) * slot_s / 3.6e6
    r = np.arange(R + 1)
    inf = math.inf
    run = np.full((M, D, R + 1), inf)     # at the start of slot t+1: running m, held k+1 slots, r units left
    run[:, :, 0] = 0.0
    pause = np.full(R + 1, inf)
    pause[0] = 0.0
    start = np.full(R + 1, inf)
    start[0] = 0.0

    def step(nxt: np.ndarray, m: int, t: int) -> np.ndarray:
        """Running m in slot t, then ``nxt`` (values over units left): finishing inside t costs its share."""
        out = np.empty(R + 1)
        if allowed is not None and t < len(allowed) and not allowed[t, m]:
            out[:] = inf
            out[0] = 0.0
            return out
        gm = int(g[m])
        out[: gm + 1] = e[m] * c[t] * r[: gm + 1] / gm
        out[gm + 1:] = e[m] * c[t] + nxt[1: R + 1 - gm]
        return out

    for t in range(T - 1, -1, -1):
        enter = np.stack([step(run[m, 0], m, t) for m in range(M)])           # a fresh entry holds 1 slot after t
        best_entry = enter.min(axis=0)
        new = np.empty_like(run)
        for m in range(M):
            for k in range(D):
                cont = step(run[m, min(k + 1, D - 1)], m, t)
                if k == D - 1:                                                 # dwell served: may switch or pause
                    others = np.min(np.delete(enter, m, axis=0), axis=0) if M > 1 else np.full(R + 1, inf)
                    cont = np.minimum(cont, others)
                    if pausable:
                        cont = np.minimum(cont, pause)
                new[m, k] = cont
        # k counts slots held before slot t: k == D - 1 means D or more, so dwell is served
        if pausable:
            resumed = np.full(R + 1, inf)
            o = int(resume_units)
            resumed[: R + 1 - o] = best_entry[o:]
            resumed[0] = 0.0
            pause = np.minimum(pause, resumed)
        if t >= first_start:
            start = np.minimum(start, best_entry)
        run = new
    return float(start[int(work_units)])
