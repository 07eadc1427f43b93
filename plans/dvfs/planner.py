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

from typing import Literal, Sequence

import numpy as np

from plans.dvfs._search import Method, Problem, TooBig, evaluate_assignment, lagrangian_dp, pareto_exact
from plans.dvfs.errors import PlanInputError
from plans.dvfs.model import KernelTables
from plans.dvfs.result import STATUS_MESSAGES, PlannedSegment, PlanResult

__all__ = ["plan_dvfs", "solve_arrays", "phase_boundaries"]

_INF = np.inf


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
    a, lower, evals = lagrangian_dp(pb, incumbent)
    used = "lagrangian"
    status = 1
    small = pb.dmin_s == 0 and pb.n * pb.m <= 50_000
    if pb.method == "exact" or (pb.method == "auto" and small):
        E_ub = evaluate_assignment(pb.t, pb.e, a, tau_sw_s=pb.tau_s, eps_sw_j=pb.esw_j)[0]
        try:
            exact = pareto_exact(pb, E_ub)
            E_ex = evaluate_assignment(pb.t, pb.e, exact, tau_sw_s=pb.tau_s, eps_sw_j=pb.esw_j)[0]
            if E_ex <= E_ub:
                a = exact
            lower, used, status = min(E_ex, E_ub), "exact", 0
        except TooBig:
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
