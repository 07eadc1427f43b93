"""The exact planner on a slot grid: dynamic programming over slots x work left x mode. Pure numpy.

Time is cut into slots of ``slot_s`` with one (forecast) intensity each. In every slot the job
either waits (before its start, or paused when it may pause) or runs in one mode for the whole slot;
the slot in which the work runs out is used only in part. The solver minimises

    carbon (g) + time_value_g_per_h x hours from slot 0 to the finish

subject to: no start before slot ``first_start``; finish by the end of slot ``deadline_slots - 1``;
every mode entered (at the start, on a switch, on resume) is held at least ``dwell_slots`` slots
unless the work runs out first; a non-pausable job runs without a gap from its start; each resume
adds ``resume_overhead_s`` of work.

Work is counted in whole quanta of ``quantum_s`` reference seconds, and a mode is credited with the
quanta it completes in a slot rounded *down*: every plan the solver returns does at least the work
it counts, so it is never later than it says. The quantum is chosen so that this rounding is at
most ``max_rounding`` of any mode's work per slot (see :func:`choose_quantum`); within that, the
result is the exact optimum of the slotted problem (tests cross-check it against brute force and a
MILP). The real finish and carbon of the chosen slots are then recomputed with the true speeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SlotPlan", "choose_quantum", "solve_slots", "fastest_slots", "account"]

_J_PER_KWH = 3.6e6
_WAIT = -1


@dataclass(frozen=True)
class SlotPlan:
    """Mode index per slot (-1 = not running) up to the finishing slot, and the cost the solver saw."""

    modes: np.ndarray          # int, length = slots used (last one possibly partial)
    feasible: bool
    objective: float           # carbon g + time value, as optimised (inf when infeasible)
    resumes: int


def choose_quantum(speeds: np.ndarray, slot_s: float, work_s: float, *, max_levels: int = 1500,
                   max_rounding: float = 0.01) -> float:
    """Work quantum (reference seconds): the coarsest whose round-down loses at most ``max_rounding``
    of any mode's work per slot, searched among slot_s / k for k up to what ``max_levels`` allows."""
    k_max = max(int(max_levels * slot_s / max(work_s, 1e-9)), 4)
    ks = np.arange(4, k_max + 1, dtype=float)
    per = np.asarray(speeds, dtype=float)[None, :] * ks[:, None]
    err = np.max((per - np.floor(per + 1e-9)) / per, axis=1)
    ok = np.flatnonzero(err <= max_rounding)
    return slot_s / ks[ok[0] if ok.size else int(np.argmin(err))]


def solve_slots(
    intensity: np.ndarray,
    power_w: np.ndarray,
    speed: np.ndarray,
    *,
    slot_s: float,
    work_s: float,
    first_start: int,
    deadline_slots: int,
    dwell_slots: int = 1,
    pausable: bool = False,
    resume_overhead_s: float = 0.0,
    resuming: bool = False,
    time_value_g_per_h: float = 0.0,
    running_mode: int | None = None,
    running_forced_slots: int = 0,
    quantum_s: float | None = None,
    last_start: int | None = None,
) -> SlotPlan:
    """Optimal slot schedule (see the module docstring). ``intensity`` covers at least ``deadline_slots``.

    ``running_mode``: the job is running in this mode now and must hold it ``running_forced_slots``
    more slots (its dwell). ``resuming``: the job is paused with work done, so starting again is a resume.
    ``last_start``: no start after this slot (``first_start == last_start`` fixes the start).
    """
    M = len(power_w)
    T = int(deadline_slots)
    D = max(int(dwell_slots), 1)
    if work_s <= 0:
        return SlotPlan(np.zeros(0, dtype=int), True, 0.0, 0)
    if T <= (0 if running_mode is not None else first_start):
        return SlotPlan(np.zeros(0, dtype=int), False, math.inf, 0)
    q = quantum_s or choose_quantum(speed, slot_s, work_s)
    gain = np.maximum(np.floor(speed * slot_s / q + 1e-9).astype(np.int64), 1)        # quanta per slot, per mode
    L = int(math.ceil(work_s / q - 1e-9))
    o = int(math.ceil(resume_overhead_s / q - 1e-9)) if pausable else 0
    R = L + o
    W = R + 1
    resuming = resuming and pausable and running_mode is None
    inf = math.inf
    energy_g = power_w * slot_s / _J_PER_KWH                                           # g per slot per g/kWh
    tv = time_value_g_per_h * slot_s / 3600.0                                         # g per slot of delay
    c = np.zeros(T + D + 1)
    c[:T] = intensity[:T]
    cum = np.concatenate(([0.0], np.cumsum(c)))

    # Values are flat arrays over (mode, work left in quanta); the cell (m, 0) is "done" and stays 0,
    # so every transition that finishes reads it and adds its own finishing cost.
    r = np.arange(W)[None, :]
    base = np.arange(M)[:, None] * W
    g = gain[:, None]
    fin_c = (r <= g) & (r > 0)
    take_c = (base + np.where(r > g, r - g, 0)).ravel()
    e_cont = (energy_g[:, None] * np.where(r > g, 1.0, r / g)).ravel()              # x c[t]
    tv_fin = np.where(fin_c, r / g, 0.0).ravel()                                      # finish offset in the slot
    tv_mask = fin_c.ravel().astype(float)
    take_b = (base + np.where(r > g * D, r - g * D, 0)).ravel()
    e_full = (energy_g[:, None] * (r > g * D)).ravel()                                # x (cum[t+D] - cum[t])
    fin_pos = np.flatnonzero(((r <= g * D) & (r > 0)).ravel())
    rr = np.broadcast_to(r, (M, W)).ravel()[fin_pos]
    gg = np.broadcast_to(g, (M, W)).ravel()[fin_pos]
    nb = np.maximum(np.ceil(rr / gg - 1e-12).astype(np.int64) - 1, 0)
    fb = rr / gg - nb
    eb = np.broadcast_to(energy_g[:, None], (M, W)).ravel()[fin_pos]
    ts = np.arange(T)[:, None]
    ends = ts + nb[None, :] + fb[None, :]
    fin_block = eb * (cum[ts + nb] - cum[ts] + fb * c[ts + nb]) + tv * ends          # (T, |fin_pos|)
    fin_block[ends > T + 1e-9] = inf

    V = np.empty((T + D + 1, M * W))
    V[T:] = inf
    V[T:, base[:, 0]] = 0.0
    P = np.full((T + 1, W), inf) if pausable else None
    if P is not None:
        P[:, 0] = 0.0
    U = np.full(T + 1, inf)
    cont = np.empty(M * W)
    block = np.empty(M * W)
    # every slot's running costs at once: one outer product instead of two array operations per slot
    cont_cost = c[:T, None] * e_cont[None, :]
    block_cost = (cum[D:T + D] - cum[:T])[:, None] * e_full[None, :] if D > 1 else None
    for t in range(T - 1, -1, -1):
        np.take(V[t + 1], take_c, out=cont)
        cont += cont_cost[t]
        if tv:
            cont += tv * (t * tv_mask + tv_fin)
        if D == 1:
            sw = cont.reshape(M, W).min(axis=0)
        else:
            np.take(V[t + D], take_b, out=block)
            block += block_cost[t]
            block[fin_pos] = fin_block[t]
            sw = block.reshape(M, W).min(axis=0)
        vt = V[t].reshape(M, W)
        np.minimum(cont.reshape(M, W), sw[None, :], out=vt)
        if P is not None:
            pt = P[t]
            pt[: W - o] = np.minimum(P[t + 1][: W - o], sw[o:])
            pt[W - o:] = P[t + 1][W - o:]
            pt[0] = 0.0
            np.minimum(vt, pt[None, :], out=vt)
        if running_mode is None:
            s = P[t][L] if (resuming and P is not None) else sw[L]
            allowed = t >= first_start and (last_start is None or t <= last_start)
            U[t] = min(U[t + 1], s) if allowed else U[t + 1]

    # forward: replay the choices the values imply (continue, then switch, then pause on ties)
    def cont_value(t: int, m: int, left: int) -> float:
        gm = int(gain[m])
        if left <= gm:
            f = left / gm
            return float(energy_g[m] * c[t] * f + tv * (t + f))
        return float(energy_g[m] * c[t] + V[t + 1][m * W + left - gm])

    def block_values(t: int, left: int) -> np.ndarray:
        out = np.empty(M)
        for m in range(M):
            gm = int(gain[m])
            if left <= gm * D:
                n = max(int(math.ceil(left / gm - 1e-12)) - 1, 0)
                f = left / gm - n
                end = t + n + f
                out[m] = energy_g[m] * (cum[t + n] - cum[t] + f * c[t + n]) + tv * end if end <= T + 1e-9 else inf
            else:
                out[m] = energy_g[m] * (cum[t + D] - cum[t]) + V[t + D][m * W + left - gm * D]
        return out

    modes: list[int] = []
    t, left, resumes = 0, L, 0

    def run(m: int, slots: int) -> bool:
        nonlocal t, left
        for _ in range(slots):
            modes.append(m)
            left -= int(gain[m])
            t += 1
            if left <= 0:
                return True
        return False

    def close(a: float, b: float) -> bool:
        return a <= b + 1e-9 * max(1.0, abs(b))

    if running_mode is not None:
        forced = min(max(int(running_forced_slots), 0), T)
        gm = int(gain[running_mode])
        if forced and left <= forced * gm:
            objective = float(block_values(0, left)[running_mode]) if D >= forced else 0.0
            run(running_mode, forced)
            return SlotPlan(np.array(modes, dtype=int), True, objective, 0)
        best = (energy_g[running_mode] * (cum[forced] - cum[0]) + V[forced][running_mode * W + left - forced * gm]
                if forced else V[0][running_mode * W + left])
        if not math.isfinite(best):
            return SlotPlan(np.zeros(0, dtype=int), False, inf, 0)
        objective = float(best)
        run(running_mode, forced)
        state, m = "run", running_mode
    else:
        if not math.isfinite(U[0]):
            return SlotPlan(np.zeros(0, dtype=int), False, inf, 0)
        objective = float(U[0])
        while t < T and not (t >= first_start and (last_start is None or t <= last_start) and close(P[t][L] if (resuming and P is not None) else
                                                       block_values(t, L).min(), U[t + 1])):
            modes.append(_WAIT)
            t += 1
        state, m = ("pause" if resuming else "start"), -1
    while left > 0 and t < T:
        if state == "start":
            m = int(np.argmin(block_values(t, left)))
            if run(m, D):
                break
            state = "run"
        elif state == "pause":
            assert P is not None
            if left + o <= R and close(float(block_values(t, left + o).min()), P[t + 1][left]):
                left += o
                resumes += 1
                state = "start"
                continue
            modes.append(_WAIT)
            t += 1
        else:
            here = float(V[t][m * W + left])
            if close(cont_value(t, m, left), here):
                if run(m, 1):
                    break
            elif close(float(block_values(t, left).min()), here):
                state = "start"
            else:
                state = "pause"
    return SlotPlan(np.array(modes, dtype=int), True, objective, resumes)


def fastest_slots(first_start: int, work_s: float, speed: np.ndarray, slot_s: float) -> SlotPlan:
    """The fastest finish: wait until ``first_start``, then the fastest mode without a break."""
    m = int(np.argmax(speed))
    n = int(math.ceil(work_s / (speed[m] * slot_s) - 1e-9))
    return SlotPlan(np.concatenate((np.full(first_start, _WAIT), np.full(n, m))).astype(int), False, math.inf, 0)


def account(modes: np.ndarray, intensity: np.ndarray, power_w: np.ndarray, speed: np.ndarray, *, slot_s: float,
            work_s: float, resume_overhead_s: float = 0.0, resumes: int = 0) -> tuple[np.ndarray, float, float, float]:
    """True figures of a slot schedule: (seconds run in each slot, energy J, carbon g, finish in seconds from slot 0).

    Runs the modes with their real speeds until ``work_s`` plus the resume overheads is done.
    """
    need = work_s + resumes * resume_overhead_s
    ran = np.zeros(len(modes))
    run = modes >= 0
    work = np.where(run, speed[np.maximum(modes, 0)] * slot_s, 0.0)
    cum = np.cumsum(work)
    k = int(np.searchsorted(cum, need - 1e-9)) if len(cum) else 0
    k = min(k, len(modes) - 1)
    ran[:k] = np.where(run[:k], slot_s, 0.0)
    if k >= 0 and len(modes):
        before = cum[k - 1] if k > 0 else 0.0
        ran[k] = min(max(need - before, 0.0) / (speed[modes[k]]), slot_s) if run[k] else 0.0
    p = np.where(run, power_w[np.maximum(modes, 0)], 0.0)
    energy = float(np.sum(p * ran))
    carbon = float(np.sum(p * ran * intensity[: len(modes)]) / _J_PER_KWH)
    finish = float(k * slot_s + ran[k]) if len(modes) else 0.0
    return ran, energy, carbon, finish
