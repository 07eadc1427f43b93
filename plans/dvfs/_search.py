"""The two searches behind :func:`plans.dvfs.planner.plan_dvfs` (formulation in its docstring).

``lagrangian``: the segmentation DP for several prices of time at once, a local search that spends
the leftover slack, and the certified lower bound. ``exact``: the Pareto-front DP over "clock of
the last item", pruned by the budget and the incumbent. Both take a validated :class:`Problem`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

__all__ = ["Method", "Problem", "TooBig", "evaluate_assignment", "lagrangian_dp", "pareto_exact"]

Method = Literal["auto", "lagrangian", "exact"]
_INF = np.inf


@dataclass(frozen=True)
class Problem:
    """A validated instance (the output of ``_plan_iv``)."""

    t: np.ndarray  # (n, m) seconds
    e: np.ndarray  # (n, m) joules
    budget_s: float
    tau_s: float
    esw_j: float
    dmin_s: float
    allowed: np.ndarray  # (n,) bool: may a switch happen before item i (allowed[0] unused)
    default: int
    method: Method
    max_exact_points: int

    @property
    def n(self) -> int:
        return self.t.shape[0]

    @property
    def m(self) -> int:
        return self.t.shape[1]


def evaluate_assignment(t: np.ndarray, e: np.ndarray, assignment: Sequence[int], *, tau_sw_s: float = 0.0,
                        eps_sw_j: float = 0.0, cyclic: bool = False) -> tuple[float, float, int]:
    """(energy_j, time_s, switches) of an assignment; ``cyclic`` also counts the switch back to the first clock."""
    a = np.asarray(assignment, dtype=int)
    rows = np.arange(len(a))
    switches = int(np.count_nonzero(a[1:] != a[:-1]))
    if cyclic and len(a) > 1 and a[0] != a[-1]:
        switches += 1
    return (float(e[rows, a].sum() + eps_sw_j * switches), float(t[rows, a].sum() + tau_sw_s * switches), switches)


# ------------------------------------------------------------------------------------------------
# Lagrangian segmentation DP, vectorised over several prices of time at once
# ------------------------------------------------------------------------------------------------
def _pointers(T: np.ndarray, dmin: float) -> np.ndarray:
    """p[i, f] = largest j <= i-1 with T[i, f] - T[j, f] >= dmin (or -1); T is (n+1, m) prefix time."""
    n1, m = T.shape
    p = np.empty((n1, m), dtype=np.int64)
    for f in range(m):
        p[:, f] = np.searchsorted(T[:, f], T[:, f] - dmin, side="right") - 1
    idx = np.arange(n1)[:, None]
    return np.minimum(p, idx - 1)


def _seg_dp(pb: Problem, lams: np.ndarray, P: np.ndarray, T: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Optimal plans of min E + lam*T for each lam (exact for each lam). Returns assignments and DP values."""
    L, n, m = len(lams), pb.n, pb.m
    if pb.tau_s == 0 and pb.esw_j == 0 and pb.dmin_s == 0 and pb.allowed[1:].all():
        # free switches: the problem separates per item (the multiple-choice knapsack's Lagrangian)
        cost = pb.e[None, :, :] + lams[:, None, None] * pb.t[None, :, :]
        best = np.argmin(cost, axis=2)
        return list(best), np.take_along_axis(cost, best[:, :, None], axis=2)[:, :, 0].sum(axis=1)
    s = pb.esw_j + lams * pb.tau_s  # (L,) price of one switch
    C = np.zeros((L, n + 1, m))
    np.cumsum(pb.e[None, :, :] + lams[:, None, None] * pb.t[None, :, :], axis=1, out=C[:, 1:, :])
    W = np.full((L, n + 1), _INF)
    W[:, 0] = -s  # the first segment pays no switch
    PM = np.full((L, n + 1, m), _INF)
    PA = np.zeros((L, n + 1, m), dtype=np.int32)
    back = np.zeros((L, n + 1), dtype=np.int32)
    fidx = np.arange(m)
    lidx = np.arange(L)[:, None]
    for i in range(1, n + 1):
        j = i - 1
        if j == 0 or pb.allowed[j]:
            g = W[:, j, None] - C[:, j, :]
        else:
            g = np.full((L, m), _INF)
        if j == 0:
            PM[:, 0, :] = g
            PA[:, 0, :] = 0
        else:
            better = g < PM[:, j - 1, :]
            PM[:, j, :] = np.where(better, g, PM[:, j - 1, :])
            PA[:, j, :] = np.where(better, j, PA[:, j - 1, :])
        pi = P[i]  # (m,)
        valid = pi >= 0
        M = np.where(valid[None, :], PM[:, np.maximum(pi, 0), fidx], _INF)
        cand = M + C[:, i, :]
        if i == n and pb.dmin_s > 0:
            # a single segment covering the whole iteration is always allowed, however short
            cand = np.minimum(cand, PM[:, 0, :] * 0 + (W[:, 0, None] - C[:, 0, :]) + C[:, i, :])
        best = np.argmin(cand, axis=1)
        W[:, i] = cand[lidx[:, 0], best] + s
        back[:, i] = best
    values = W[:, n] - 0.0  # includes s per switch; the -s at W(0) cancels the first segment
    plans = []
    for li in range(L):
        a = np.empty(n, dtype=np.int64)
        i = n
        while i > 0:
            f = int(back[li, i])
            pi = int(P[i, f])
            if i == n and pb.dmin_s > 0 and (pi < 0 or not np.isfinite(PM[li, pi, f]) or
                                             PM[li, pi, f] + C[li, i, f] > W[li, 0] - C[li, 0, f] + C[li, i, f] + 1e-12 * abs(W[li, i])):
                j = 0 if (pi < 0 or PM[li, pi, f] + C[li, i, f] >= W[li, 0] - C[li, 0, f] + C[li, i, f]) else int(PA[li, pi, f])
            else:
                j = int(PA[li, pi, f])
            a[j:i] = f
            i = j
        plans.append(a)
    return plans, values


def _repair(pb: Problem, a: np.ndarray, P_T: np.ndarray, P_E: np.ndarray, max_moves: int = 500) -> np.ndarray:
    """Greedy local search on whole segments: re-clock (or merge into a neighbour) while energy falls and time fits.

    Each move is the single best one over all segments and clocks, evaluated with numpy at once.
    """
    a = a.copy()
    opts = np.arange(pb.m)
    for _ in range(max_moves):
        bounds = np.flatnonzero(np.diff(a)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [pb.n]))
        K = len(starts)
        E, Tm, _ = evaluate_assignment(pb.t, pb.e, a, tau_sw_s=pb.tau_s, eps_sw_j=pb.esw_j)
        slack = pb.budget_s - Tm
        seg_t = P_T[ends] - P_T[starts]  # (K, m)
        seg_e = P_E[ends] - P_E[starts]
        f = a[starts]
        left = np.where(np.arange(K) > 0, a[np.maximum(starts - 1, 0)], -1)
        right = np.where(np.arange(K) < K - 1, a[np.minimum(ends, pb.n - 1)], -1)
        d_sw = -((left[:, None] == opts[None, :]).astype(float) + (right[:, None] == opts[None, :]))
        cur_t = seg_t[np.arange(K), f][:, None]
        cur_e = seg_e[np.arange(K), f][:, None]
        dT = seg_t - cur_t + d_sw * pb.tau_s
        dE = seg_e - cur_e + d_sw * pb.esw_j
        ok = (dT <= slack + 1e-15) & (dE < -1e-12 * max(E, 1e-300))
        if pb.dmin_s > 0 and K > 1:
            ok &= seg_t >= pb.dmin_s * (1 - 1e-12)
        ok[np.arange(K), f] = False
        if not ok.any():
            break
        k, j = np.unravel_index(int(np.argmin(np.where(ok, dE, _INF))), ok.shape)
        a[starts[k]:ends[k]] = j
    return a


def _valid_dmin(pb: Problem, a: np.ndarray) -> bool:
    if pb.dmin_s <= 0:
        return True
    bounds = np.flatnonzero(np.diff(a)) + 1
    if bounds.size == 0:
        return True
    if not pb.allowed[bounds].all():
        return False
    starts = np.concatenate(([0], bounds))
    seg_t = np.add.reduceat(pb.t[np.arange(pb.n), a], starts)
    return bool(np.all(seg_t >= pb.dmin_s * (1 - 1e-12)))


def _blend(pb: Problem, fast: np.ndarray, slow: np.ndarray) -> np.ndarray:
    """Round the LP between two neighbouring Lagrangian plans.

    Identical kernels share breakpoints, so one lambda step moves them all at once and leaves slack
    unused. Starting from the feasible ``fast`` plan, move each maximal run where the plans differ
    to ``slow`` in order of energy saved per second spent, while the budget (and d_min) allow.
    Runs are separated by items where both plans agree, so their effects add up independently;
    inside and at the edges of a moved run the switches are exactly those of ``slow``.
    """
    diff = fast != slow
    if not diff.any():
        return fast
    edges = np.flatnonzero(np.diff(np.concatenate(([0], diff.astype(np.int8), [0]))))
    s0, e0 = edges[0::2], edges[1::2]
    rows = np.arange(pb.n)
    cum = lambda x: np.concatenate(([0.0], np.cumsum(x)))  # noqa: E731
    dt = cum(pb.t[rows, slow] - pb.t[rows, fast])
    de = cum(pb.e[rows, slow] - pb.e[rows, fast])
    sw_f = np.concatenate(([0], (fast[1:] != fast[:-1]).astype(int)))
    sw_s = np.concatenate(([0], (slow[1:] != slow[:-1]).astype(int)))
    ds = cum(np.concatenate((sw_s - sw_f, [0])))  # index n is a dummy edge after the last item
    d_switch = ds[np.minimum(e0 + 1, pb.n + 1)] - ds[s0]
    dT = dt[e0] - dt[s0] + d_switch * pb.tau_s
    dE = de[e0] - de[s0] + d_switch * pb.esw_j
    edge_ok = (pb.allowed[s0] | (s0 == 0) | (sw_s[s0] == 0)) & ((e0 >= pb.n) | pb.allowed[np.minimum(e0, pb.n - 1)] | (sw_s[np.minimum(e0, pb.n - 1)] == 0))
    order = np.argsort(np.where(dT > 0, dE / np.where(dT > 0, dT, 1.0), -_INF))
    a = fast.copy()
    Tm = evaluate_assignment(pb.t, pb.e, a, tau_sw_s=pb.tau_s, eps_sw_j=pb.esw_j)[1]
    for r in order:
        if dE[r] >= 0 or not edge_ok[r] or Tm + dT[r] > pb.budget_s * (1 + 1e-12):
            continue
        if pb.dmin_s > 0:
            b = a.copy()
            b[s0[r]:e0[r]] = slow[s0[r]:e0[r]]
            if not _valid_dmin(pb, b):
                continue
            a = b
        else:
            a[s0[r]:e0[r]] = slow[s0[r]:e0[r]]
        Tm += dT[r]
    return a


def lagrangian_dp(pb: Problem, incumbent: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Best feasible plan over a bracketed lambda search, LP-rounded and locally repaired.

    Returns (plan, lower bound on the optimum, number of lambdas evaluated).
    """
    P_T = np.zeros((pb.n + 1, pb.m))
    np.cumsum(pb.t, axis=0, out=P_T[1:])
    P_E = np.zeros((pb.n + 1, pb.m))
    np.cumsum(pb.e, axis=0, out=P_E[1:])
    P = _pointers(P_T, pb.dmin_s)
    cost = lambda a: evaluate_assignment(pb.t, pb.e, a, tau_sw_s=pb.tau_s, eps_sw_j=pb.esw_j)  # noqa: E731
    candidates = [incumbent]
    lower = -_INF
    # lambda is a price of time in W: bracket geometrically around the mean power, then refine twice
    scale = float(pb.e.sum() / pb.t.sum())
    lams = np.concatenate(([0.0], np.geomspace(1e-3, 1e3, 15) * scale))
    evals = 0
    fast_plan = slow_plan = None
    for _round in range(3):
        plans, values = _seg_dp(pb, lams, P, P_T)
        evals += len(lams)
        feas: list[tuple[float, np.ndarray]] = []
        infeas: list[tuple[float, np.ndarray]] = []
        for lam, a, v in zip(lams, plans, values):
            E, Tm, _ = cost(a)
            lower = max(lower, float(v) - lam * pb.budget_s)
            (feas if Tm <= pb.budget_s * (1 + 1e-12) else infeas).append((float(lam), a))
        if feas:
            hi, fast_plan = min(feas, key=lambda x: x[0])
            candidates.append(fast_plan)
        if not infeas or not feas:
            break
        lo, slow_plan = max(((x, a) for x, a in infeas if x < hi), key=lambda x: x[0], default=(0.0, infeas[0][1]))
        if hi - lo <= 1e-9 * max(hi, 1e-9):
            break
        lams = np.linspace(lo, hi, 18)[1:-1]
    if fast_plan is not None and slow_plan is not None:
        candidates.append(_blend(pb, fast_plan, slow_plan))
    repaired = [_repair(pb, c, P_T, P_E) for c in candidates]
    best = min(repaired, key=lambda a: cost(a)[0])
    return best, lower, evals


# ------------------------------------------------------------------------------------------------
# Exact Pareto-front DP (no d_min)
# ------------------------------------------------------------------------------------------------
def _pareto(tv: np.ndarray, ev: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (min t, min e), sorted by t."""
    order = np.lexsort((ev, tv))
    es = ev[order]
    prev_min = np.minimum.accumulate(np.concatenate(([_INF], es[:-1])))
    return order[es < prev_min]


class TooBig(Exception):
    pass


def pareto_exact(pb: Problem, upper_e: float) -> np.ndarray:
    n, m = pb.n, pb.m
    rem_t = np.concatenate((np.cumsum(pb.t.min(axis=1)[::-1])[::-1], [0.0]))  # min time of items i..n-1
    rem_e = np.concatenate((np.cumsum(pb.e.min(axis=1)[::-1])[::-1], [0.0]))
    tol_t = pb.budget_s * (1 + 1e-12)
    tol_e = upper_e * (1 + 1e-12) + 1e-300
    fronts: list[tuple[np.ndarray, np.ndarray]] = []
    history: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per step, per clock: (from_clock, from_idx)
    step_back: list[tuple[np.ndarray, np.ndarray]] = []
    for j in range(m):
        tv, ev = np.array([pb.t[0, j]]), np.array([pb.e[0, j]])
        keep = (tv + rem_t[1] <= tol_t) & (ev + rem_e[1] <= tol_e)
        fronts.append((tv[keep], ev[keep]))
        step_back.append((np.full(keep.sum(), -1), np.full(keep.sum(), -1)))
    history.append(step_back)
    for i in range(1, n):
        all_t = np.concatenate([f[0] for f in fronts])
        all_e = np.concatenate([f[1] for f in fronts])
        all_j = np.concatenate([np.full(len(f[0]), j) for j, f in enumerate(fronts)])
        all_k = np.concatenate([np.arange(len(f[0])) for f in fronts])
        if pb.allowed[i] and all_t.size:
            u = _pareto(all_t, all_e)
            ut, ue, uj, uk = all_t[u], all_e[u], all_j[u], all_k[u]
        else:
            ut = ue = np.empty(0)
            uj = uk = np.empty(0, dtype=int)
        new_fronts, step_back = [], []
        total = 0
        for j in range(m):
            ft, fe = fronts[j]
            ct = np.concatenate((ft + pb.t[i, j], ut + pb.t[i, j] + pb.tau_s))
            ce = np.concatenate((fe + pb.e[i, j], ue + pb.e[i, j] + pb.esw_j))
            cj = np.concatenate((np.full(len(ft), j), uj))
            ck = np.concatenate((np.arange(len(ft)), uk))
            keep = (ct + rem_t[i + 1] <= tol_t) & (ce + rem_e[i + 1] <= tol_e)
            ct, ce, cj, ck = ct[keep], ce[keep], cj[keep], ck[keep]
            if ct.size:
                p = _pareto(ct, ce)
                ct, ce, cj, ck = ct[p], ce[p], cj[p], ck[p]
            new_fronts.append((ct, ce))
            step_back.append((cj, ck))
            total += ct.size
        if total > pb.max_exact_points:
            raise TooBig
        fronts = new_fronts
        history.append(step_back)
    best = (_INF, -1, -1)
    for j, (ft, fe) in enumerate(fronts):
        if fe.size:
            k = int(np.argmin(fe))
            if fe[k] < best[0]:
                best = (float(fe[k]), j, k)
    if best[1] < 0:
        raise TooBig  # nothing beat the incumbent: keep it
    a = np.empty(n, dtype=np.int64)
    j, k = best[1], best[2]
    for i in range(n - 1, -1, -1):
        a[i] = j
        fj, fk = history[i][j]
        j, k = int(fj[k]), int(fk[k])
    return a
