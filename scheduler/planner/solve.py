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
_WAIT, _RUN = -1, 0


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
    best_k, best_err = k_max, math.inf
    for k in range(4, k_max + 1):
        per = speeds * k
        err = float(np.max((per - np.floor(per + 1e-9)) / per))
        if err <= max_rounding:
            return slot_s / k
        if err < best_err:
            best_k, best_err = k, err
    return slot_s / best_k


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
) -> SlotPlan:
    """Optimal slot schedule (see the module docstring). ``intensity`` covers at least ``deadline_slots``.

    ``running_mode``: the job is running in this mode now and must hold it ``running_forced_slots``
    more slots (its dwell). ``resuming``: the job is paused with work done, so starting again is a resume.
    """
    M = len(power_w)
    T = int(deadline_slots)
    D = max(int(dwell_slots), 1)
    if work_s <= 0:
        return SlotPlan(np.zeros(0, dtype=int), True, 0.0, 0)
    if T <= first_start and running_mode is None:
        return SlotPlan(np.zeros(0, dtype=int), False, math.inf, 0)
    q = quantum_s or choose_quantum(speed, slot_s, work_s)
    gain = np.maximum(np.floor(speed * slot_s / q + 1e-9).astype(np.int64), 1)        # quanta per slot, per mode
    L = int(math.ceil(work_s / q - 1e-9))
    o = int(math.ceil(resume_overhead_s / q - 1e-9)) if pausable else 0
    R = L + o
    resuming = resuming and pausable and running_mode is None
    # value arrays are (mode, work left in quanta); work left 0 = done
    r = np.arange(R + 1)[None, :]
    rows = np.arange(M)[:, None] * (R + 1)
    g = gain[:, None]
    energy_g = power_w * slot_s / _J_PER_KWH                                           # g per slot per g/kWh
    tv = time_value_g_per_h * slot_s / 3600.0                                         # g per slot of delay
    c = np.zeros(T + D + 1)
    c[:T] = intensity[:T]
    cum = np.concatenate(([0.0], np.cumsum(c)))
    # one more slot in the same mode: finishes inside it when r <= gain
    fin_c = r <= g
    scale_c = np.where(fin_c, r / g, 1.0)                                              # share of the slot used
    take_c = (rows + np.where(fin_c, 0, r - g)).ravel()
    time_c = np.where(fin_c, r / g, 0.0)
    # a held block of D slots (start, switch, resume): finishes inside it when r <= D gain
    take_b = (rows + np.maximum(r - g * D, 0)).ravel()
    fin_b = ((r <= g * D) & (r > 0)).ravel()
    fin_pos = np.flatnonzero(fin_b)
    rr = np.broadcast_to(r, (M, R + 1)).ravel()[fin_pos]
    gg = np.broadcast_to(g, (M, R + 1)).ravel()[fin_pos]
    nb = np.maximum(np.ceil(rr / gg - 1e-12).astype(np.int64) - 1, 0)
    fb = rr / gg - nb
    eb = np.broadcast_to(energy_g[:, None], (M, R + 1)).ravel()[fin_pos]
    inf = math.inf

    done = np.full((M, R + 1), inf)
    done[:, 0] = 0.0
    V: list[np.ndarray | None] = [None] * (T + D + 1)
    for t in range(T, T + D + 1):
        V[t] = done
    dec = np.zeros((T, M, R + 1), dtype=np.int8)
    sw_mode = np.zeros((T, R + 1), dtype=np.int8)
    resume = np.zeros((T, R + 1), dtype=bool)
    start = np.zeros(T, dtype=bool)
    paused = np.full(R + 1, inf)
    paused[0] = 0.0
    unstarted = inf
    for t in range(T - 1, -1, -1):
        vn = V[t + 1]
        cont = np.take(vn, take_c).reshape(M, R + 1) + (energy_g * c[t])[:, None] * scale_c
        if tv:
            cont += tv * np.where(fin_c, t + time_c, 0.0)
        if D == 1:
            block = cont
        else:
            block = np.take(V[t + D], take_b).reshape(M, R + 1) + (energy_g * (cum[t + D] - cum[t]))[:, None]
            ends = t + nb + fb
            fin_cost = eb * (cum[t + nb] - cum[t] + fb * c[t + nb]) + tv * ends
            block.ravel()[fin_pos] = np.where(ends <= T + 1e-9, fin_cost, inf)
        sw = block[0].copy()
        swm = np.zeros(R + 1, dtype=np.int8)
        for m in range(1, M):  # a loop over the few modes beats argmin across rows
            better = block[m] < sw
            np.copyto(sw, block[m], where=better)
            swm[better] = m
        sw[0] = 0.0
        v = np.minimum(cont, sw[None, :])
        d = (sw[None, :] < cont).astype(np.int8)
        if pausable:
            res = np.full(R + 1, inf)
            res[: R + 1 - o] = sw[o:]
            take = res < paused
            resume[t] = take
            paused = np.where(take, res, paused)
            paused[0] = 0.0
            pz = paused[None, :] < v
            d[pz] = 2
            v = np.minimum(v, paused[None, :])
        v[:, 0] = 0.0
        V[t] = v
        dec[t] = d
        sw_mode[t] = swm
        if t >= first_start and running_mode is None:
            s = paused[L] if resuming else sw[L]  # a paused job resumes through the paused state
            if s < unstarted:
                unstarted, start[t] = s, True
        if t + D + 1 <= T and t + D + 1 > running_forced_slots:
            V[t + D + 1] = None  # no longer needed: keeps memory at D + 1 value arrays

    # forward: replay the decisions
    modes: list[int] = []
    t, left, resumes = 0, L, 0

    def run_block(m: int, slots: int) -> bool:
        nonlocal t, left
        for _ in range(slots):
            modes.append(m)
            left -= int(gain[m])
            t += 1
            if left <= 0:
                return True
        return False

    if running_mode is not None:
        forced = max(int(running_forced_slots), 0)
        if forced:
            forced = min(forced, T)
            after = V[forced][running_mode, max(L - forced * int(gain[running_mode]), 0)]
            best = energy_g[running_mode] * (cum[forced] - cum[0]) + after
        else:
            best = V[0][running_mode, L]
        if not math.isfinite(best):
            return SlotPlan(np.zeros(0, dtype=int), False, inf, 0)
        objective = float(best)
        if forced and run_block(running_mode, forced):
            return SlotPlan(np.array(modes), True, objective, 0)
        state, m = "run", running_mode
    else:
        if not math.isfinite(unstarted):
            return SlotPlan(np.zeros(0, dtype=int), False, inf, 0)
        objective = float(unstarted)
        while not start[t]:
            modes.append(_WAIT)
            t += 1
        state, m = ("pause" if resuming else "start"), -1
    while left > 0 and t < T:
        if state == "start":
            m = int(sw_mode[t, left])
            if run_block(m, D):
                break
            state = "run"
        elif state == "pause":
            if resume[t, left]:
                left = left + o
                resumes += 1
                state = "start"
                continue
            modes.append(_WAIT)
            t += 1
        else:
            d = int(dec[t, m, left])
            if d == 0:
                if run_block(m, 1):
                    break
            elif d == 1:
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
