r"""Plan SM clocks over one training iteration: least energy within a slowdown budget, honest about switches.

Formulation (gpu-facts.md section 6.1). Items i = 1..n in launch order, clock options j = 1..m with
modelled or measured time ``t[i, j]`` and energy ``e[i, j]``. A plan assigns one option per item;
a *switch* happens where consecutive items differ, and costs ``tau_sw_s`` seconds and ``eps_sw_j``
joules (the GPU idles at static power while the driver changes the clock)::

    minimise    sum_i e[i, x_i] + eps_sw * S
    subject to  sum_i t[i, x_i] + tau_sw * S <= (1 + epsilon) * T_ref,   T_ref = sum_i t[i, default]
                every maximal constant-clock segment lasts >= d_min_s,  S = number of switches
                switches only where ``boundaries`` allows them

Algorithms:

- ``lagrangian`` (production): for a price of time lambda the problem min E + lambda*T separates
  into a segmentation DP ``W(i) = min_f min_{j <= p_f(i)} [W(j) - C_f(j)] + C_f(i) + s`` with prefix
  sums C_f, running prefix minima and a monotone pointer ``p_f(i)`` (last j with T_f(i) - T_f(j) >=
  d_min), i.e. O(n*m) per lambda. The DP runs for 16 lambdas at once as numpy arrays; three rounds
  bracket the cheapest feasible lambda. A local search then spends the leftover slack on whole
  segments (re-clocking or merging them). Weak duality gives a lower bound, so ``gap`` is certified.
- ``exact``: a Pareto-front DP over states "clock of the last item" (no ``d_min``), pruned by the
  budget and by the incumbent's energy. Exact on real-valued data; used by ``auto`` when it fits in
  ``max_exact_points`` points, because on small instances the switch term makes the Lagrangian
  duality gap large (up to 9 % seen on n=7 instances).
- ``auto`` (default): ``exact`` when possible, else ``lagrangian``.

References: Sinha & Zoltners (1979) for the MCKP hull; Nemhauser & Ullmann (1969) for Pareto DPs;
Perseus (SOSP'24), Kareus (OSDI'26) and Spaan et al. (CF'26) for the granularity trade-off.

Example
-------
>>> from plans.dvfs.profiles.synthetic import gpt3xl_layer_profile
>>> from plans.dvfs.model import build_tables
>>> tables = build_tables(gpt3xl_layer_profile())
>>> res = plan_dvfs(tables, epsilon=0.02, tau_sw_s=5e-3)
>>> res.success, res.switches
(True, 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from plans.dvfs.errors import PlanInputError
from plans.dvfs.model import KernelTables
from plans.dvfs.result import STATUS_MESSAGES, PlannedSegment, PlanResult

__all__ = ["plan_dvfs", "solve_arrays", "evaluate_assignment", "phase_boundaries", "Problem"]

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


def phase_boundaries(phases: Sequence[str], *, level: int | None = None) -> np.ndarray:
    """A boundary mask allowing switches only where the phase label changes.

    ``level`` truncates dotted labels first: ``level=2`` turns ``layer0.forward.mlp`` into
    ``layer0.forward`` (per-layer passes); ``None`` uses the full label.
    """
    labels = [".".join(p.split(".")[:level]) if level else p for p in phases]
    mask = np.zeros(len(labels), dtype=bool)
    for i in range(1, len(labels)):
        mask[i] = labels[i] != labels[i - 1]
    return mask


def _plan_iv(t: np.ndarray, e: np.ndarray, default: int, *, epsilon: float, tau_sw_s: float, eps_sw_j: float,
             d_min_s: float, boundaries: np.ndarray | None, method: str, max_exact_points: int) -> Problem:
    t = np.asarray(t, dtype=float)
    e = np.asarray(e, dtype=float)
    if t.ndim != 2 or t.shape != e.shape or t.shape[0] == 0 or t.shape[1] == 0:
        raise PlanInputError(f"time and energy tables must be equal non-empty 2-D arrays, got {t.shape} and {e.shape}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(e))) or np.any(t <= 0) or np.any(e < 0):
        raise PlanInputError("tables must be finite with positive times and non-negative energies")
    if not 0 <= default < t.shape[1]:
        raise PlanInputError(f"default option {default} is out of range 0..{t.shape[1] - 1}")
    for name, v in (("epsilon", epsilon), ("d_min_s", d_min_s)):
        if not (np.isfinite(v) and v >= 0):
            raise PlanInputError(f"{name} must be finite and >= 0, got {v!r}")
    for name, v in (("tau_sw_s", tau_sw_s), ("eps_sw_j", eps_sw_j)):
        if np.isnan(v) or v < 0:
            raise PlanInputError(f"{name} must be finite and >= 0, got {v!r}")
    if method not in ("auto", "lagrangian", "exact"):
        raise PlanInputError(f"method must be auto, lagrangian or exact, got {method!r}")
    n = t.shape[0]
    allowed = np.ones(n, dtype=bool) if boundaries is None else np.asarray(boundaries, dtype=bool)
    if allowed.shape != (n,):
        raise PlanInputError(f"boundaries must have one flag per item ({n}), got shape {allowed.shape}")
    allowed = allowed.copy()
    allowed[0] = False
    if not np.isfinite(tau_sw_s) or not np.isfinite(eps_sw_j):
        allowed[:] = False  # an infinite switch cost forbids switching: one static clock
        tau_sw_s, eps_sw_j = 0.0, 0.0
    if method == "exact" and d_min_s > 0:
        raise PlanInputError("the exact method does not support d_min_s > 0; use lagrangian")
    budget = (1.0 + epsilon) * float(t[:, default].sum())
    return Problem(t, e, budget, float(tau_sw_s), float(eps_sw_j), float(d_min_s), allowed, int(default),
                   method, int(max_exact_points))  # type: ignore[arg-type]


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


def _lagrangian(pb: Problem, incumbent: np.ndarray) -> tuple[np.ndarray, float, int]:
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


class _TooBig(Exception):
    pass


def _exact(pb: Problem, upper_e: float) -> np.ndarray:
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
            raise _TooBig
        fronts = new_fronts
        history.append(step_back)
    best = (_INF, -1, -1)
    for j, (ft, fe) in enumerate(fronts):
        if fe.size:
            k = int(np.argmin(fe))
            if fe[k] < best[0]:
                best = (float(fe[k]), j, k)
    if best[1] < 0:
        raise _TooBig  # nothing beat the incumbent: keep it
    a = np.empty(n, dtype=np.int64)
    j, k = best[1], best[2]
    for i in range(n - 1, -1, -1):
        a[i] = j
        fj, fk = history[i][j]
        j, k = int(fj[k]), int(fk[k])
    return a


# ------------------------------------------------------------------------------------------------
def solve_arrays(t: np.ndarray, e: np.ndarray, default: int, *, epsilon: float, tau_sw_s: float = 5e-3,
                 eps_sw_j: float = 0.0, d_min_s: float = 0.0, boundaries: np.ndarray | None = None,
                 method: Method = "auto", max_exact_points: int = 200_000) -> tuple[np.ndarray, int, float, int, str]:
    """Solve on raw arrays. Returns (assignment, status, lower_bound_j, n_evals, method_used)."""
    pb = _plan_iv(t, e, default, epsilon=epsilon, tau_sw_s=tau_sw_s, eps_sw_j=eps_sw_j, d_min_s=d_min_s,
                  boundaries=boundaries, method=method, max_exact_points=max_exact_points)
    # the incumbent: the best single clock within budget (always includes the reference)
    tot_t, tot_e = pb.t.sum(axis=0), pb.e.sum(axis=0)
    ok = tot_t <= pb.budget_s * (1 + 1e-12)
    ok[pb.default] = True
    static = int(np.argmin(np.where(ok, tot_e, _INF)))
    incumbent = np.full(pb.n, static, dtype=np.int64)
    if not pb.allowed[1:].any():
        lower = float(tot_e[static])
        return incumbent, (0 if static != pb.default else 2), lower, pb.m, "static"
    a, lower, evals = _lagrangian(pb, incumbent)
    used = "lagrangian"
    status = 1
    small = pb.dmin_s == 0 and pb.n * pb.m <= 50_000
    if pb.method == "exact" or (pb.method == "auto" and small):
        E_ub = evaluate_assignment(pb.t, pb.e, a, tau_sw_s=pb.tau_s, eps_sw_j=pb.esw_j)[0]
        try:
            exact = _exact(pb, E_ub)
            E_ex = evaluate_assignment(pb.t, pb.e, exact, tau_sw_s=pb.tau_s, eps_sw_j=pb.esw_j)[0]
            if E_ex <= E_ub:
                a = exact
            lower, used, status = min(E_ex, E_ub), "exact", 0
        except _TooBig:
            if pb.method == "exact":
                raise PlanInputError(f"instance too large for the exact method (> {pb.max_exact_points} front points)") from None
    if np.all(a == pb.default):
        status = 2
    return a, status, lower, evals, used


def _segments(tables: KernelTables, a: np.ndarray) -> tuple[PlannedSegment, ...]:
    bounds = np.flatnonzero(np.diff(a)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(a)]))
    segs = []
    for s0, e0 in zip(starts, ends):
        j = int(a[s0])
        segs.append(PlannedSegment(
            start_item=int(s0), end_item=int(e0), start_kernel=int(tables.first_kernel[s0]),
            sm_clock_mhz=int(tables.sm_clocks_mhz[j]), mem_clock_mhz=int(tables.mem_clocks_mhz[j]),
            duration_s=float(tables.time_s[s0:e0, j].sum()), first_phase=tables.phases[s0],
        ))
    return tuple(segs)


def plan_dvfs(
    tables: KernelTables,
    *,
    epsilon: float,
    tau_sw_s: float = 5e-3,
    eps_sw_j: float | None = None,
    d_min_s: float | None = None,
    clock_floor_mhz: float | None = None,
    boundaries: Literal["kernel", "phase", "pass"] | np.ndarray = "kernel",
    method: Method = "auto",
    max_exact_points: int = 200_000,
) -> PlanResult:
    """Least-energy clock plan for one iteration within ``(1 + epsilon)`` x the default-clock time.

    Parameters
    ----------
    tables:
        Per-item time/energy tables (:func:`plans.dvfs.model.build_tables`).
    epsilon:
        Allowed slowdown, e.g. 0.02 for 2 %.
    tau_sw_s, eps_sw_j:
        Time and energy lost per clock switch. ``eps_sw_j`` defaults to ``tau_sw_s`` x idle power
        (the GPU waits at static power). ``inf`` forbids switching (one static clock).
    d_min_s:
        Minimum segment duration; default ``10 * tau_sw_s`` (gpu-facts 4.6). Pass 0 to disable.
    clock_floor_mhz:
        Lowest clock considered; default 0.6 x the highest option (below it energy rises again).
    boundaries:
        Where switches may happen: ``kernel`` (anywhere), ``phase`` (where the record_function label
        changes: what the runtime executor can act on), ``pass`` (layer forward/backward), or a mask.
    method:
        ``auto``, ``lagrangian`` or ``exact`` (see the module docstring).

    Returns
    -------
    PlanResult
        Assignment, segments, modelled energy/time (with switch costs), the reference, a lower
        bound and status (0 optimal, 1 feasible with certified gap, 2 the reference clocks).
    """
    if not isinstance(tables, KernelTables):
        raise PlanInputError("tables must be KernelTables (see plans.dvfs.model.build_tables)")
    f_max = float(tables.sm_clocks_mhz.max())
    floor = 0.6 * f_max if clock_floor_mhz is None else float(clock_floor_mhz)
    keep = np.flatnonzero((tables.sm_clocks_mhz >= floor) | (np.arange(tables.n_options) == tables.default_option))
    sub = tables.select(keep)
    if isinstance(boundaries, str):
        if boundaries == "kernel":
            mask = None
        elif boundaries == "phase":
            mask = phase_boundaries(sub.phases)
        elif boundaries == "pass":
            mask = phase_boundaries(sub.phases, level=2)
        else:
            raise PlanInputError(f"boundaries must be kernel, phase, pass or a mask, got {boundaries!r}")
    else:
        mask = boundaries
    esw = tau_sw_s * tables.idle_power_w if eps_sw_j is None and np.isfinite(tau_sw_s) else (eps_sw_j if eps_sw_j is not None else _INF)
    dmin = 10.0 * tau_sw_s if d_min_s is None and np.isfinite(tau_sw_s) else (d_min_s or 0.0)
    a, status, lower, evals, used = solve_arrays(sub.time_s, sub.energy_j, sub.default_option, epsilon=epsilon,
                                                 tau_sw_s=tau_sw_s, eps_sw_j=esw, d_min_s=dmin, boundaries=mask,
                                                 method=method, max_exact_points=max_exact_points)
    tau_eval = tau_sw_s if np.isfinite(tau_sw_s) else 0.0
    esw_eval = esw if np.isfinite(esw) else 0.0
    E, T, S = evaluate_assignment(sub.time_s, sub.energy_j, a, tau_sw_s=tau_eval, eps_sw_j=esw_eval)
    ref = np.full(sub.n_items, sub.default_option)
    E0, T0, _ = evaluate_assignment(sub.time_s, sub.energy_j, ref)
    return PlanResult(
        assignment=keep[a], segments=_segments(sub, a), energy_j=E, time_s=T, switches=S,
        reference_energy_j=E0, reference_time_s=T0, budget_s=(1 + epsilon) * T0, lower_bound_j=min(lower, E),
        success=T <= (1 + epsilon) * T0 * (1 + 1e-12), status=status, method=used, n_evals=evals,
        provenance=tables.provenance(), message=STATUS_MESSAGES[status],
    )
