"""A slot schedule (:class:`SlotPlan`) and what it does on the true speeds.

The solver (:mod:`scheduler.planner.solve`) counts work in whole quanta; the functions here run a
schedule's modes at their real speeds: its true figures (:func:`account`), its true cost, the
merge repair that undoes the count's rounding (:func:`merge_runs`), and the fastest schedule
(:func:`fastest_slots`), the fallback when no plan meets the deadline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["WAIT", "SlotPlan", "account", "earliest_start", "fastest_allowed", "fastest_slots", "fits", "merge_runs",
           "true_cost"]

_J_PER_KWH = 3.6e6
#: a slot in which the job does not run
WAIT = -1


@dataclass(frozen=True)
class SlotPlan:
    """Mode index per slot (-1 = not running) up to the finishing slot, and the cost the solver saw."""

    modes: np.ndarray          # int, length = slots used (last one possibly partial)
    feasible: bool
    objective: float           # carbon g + time value, as optimised (inf when infeasible)
    resumes: int
    rounding: float = 0.0      # |true work of the chosen slots - the solver's count of it| / work: its quantum's error


def _charged(modes: np.ndarray, energy_g: np.ndarray, speed: np.ndarray, *, slot_s: float,
             need_s: float) -> tuple[np.ndarray, float] | None:
    """Per slot, the energy (g per g/kWh) a schedule uses on the true speeds up to ``need_s`` of work
    (0 where it waits or is done), and where that work ends in slots; None when it does not do the work."""
    k = np.flatnonzero(modes >= 0)
    if len(k) == 0:
        return None
    work = speed[modes[k]] * slot_s
    before = np.concatenate(([0.0], np.cumsum(work)[:-1]))
    if before[-1] + work[-1] < need_s - 1e-6:
        return None
    frac = np.clip((need_s - before) / work, 0.0, 1.0)
    charged = np.zeros(len(modes))
    charged[k] = energy_g[modes[k]] * frac
    return charged, float(k[frac > 0][-1] + frac[frac > 0][-1])


def true_cost(modes: np.ndarray, c: np.ndarray, energy_g: np.ndarray, speed: np.ndarray, *, slot_s: float,
               need_s: float, tv: float) -> float:
    """Carbon plus time value of a slot schedule on the true speeds (inf when it does not do the work)."""
    got = _charged(modes, energy_g, speed, slot_s=slot_s, need_s=need_s)
    if got is None:
        return math.inf
    charged, end = got
    return float(charged @ c[: len(modes)]) + tv * end


def fits(modes: np.ndarray, allowed: np.ndarray | None) -> bool:
    """Every running slot of ``modes`` runs a mode ``allowed`` there (a (slots, modes) mask; past its end all are)."""
    if allowed is None:
        return True
    k = np.flatnonzero(modes >= 0)
    k = k[k < len(allowed)]
    return bool(np.all(allowed[k, modes[k]]))


def merge_runs(sp: SlotPlan, c: np.ndarray, energy_g: np.ndarray, speed: np.ndarray, *, slot_s: float, T: int,
                tv: float, need_s: float, frozen: int = 0, allowed: np.ndarray | None = None) -> SlotPlan:
    """The plan with any mode run merged into the run next to it (without a gap) where that is cheaper
    on the true speeds: the count's rounding can make a short run of a mode look better than the
    mode beside it when it is not (the entry's one-quantum tax, a few quanta at the finish). Runs only
    grow, so the dwell holds; the end is trimmed or extended in the last mode as the true work needs.
    The first ``frozen`` slots keep their mode (a running job's dwell); a merge into a slot whose
    ``allowed`` mask refuses the mode is not made."""
    kw = dict(slot_s=slot_s, need_s=need_s, tv=tv)
    modes = sp.modes
    best = true_cost(modes, c, energy_g, speed, **kw)
    improved = True
    while improved:
        improved = False
        k = np.arange(len(modes))
        edges = np.flatnonzero(np.diff(modes) != 0) + 1
        bounds = np.concatenate(([0], edges, [len(modes)]))
        for i in range(len(bounds) - 1):
            a, b = int(bounds[i]), int(bounds[i + 1])
            if modes[a] < 0 or a < frozen:
                continue
            for j in (a - 1, b):
                if not 0 <= j < len(modes) or modes[j] < 0:
                    continue
                other = np.where((k >= a) & (k < b), modes[j], modes)
                other = fit_work(other, speed, slot_s=slot_s, T=T, need_s=need_s)
                if other is None or not fits(other, allowed):
                    continue
                cost = true_cost(other, c, energy_g, speed, **kw)
                if cost < best - 1e-12:
                    modes, best, improved = other, cost, True
                    break
            if improved:
                break
    return sp if modes is sp.modes else SlotPlan(modes, sp.feasible, sp.objective, sp.resumes, sp.rounding)


def earliest_start(sp: SlotPlan, c: np.ndarray, energy_g: np.ndarray, speed: np.ndarray, *, slot_s: float,
                   first_start: int, tv: float, need_s: float, allowed: np.ndarray | None = None) -> SlotPlan:
    """The plan moved, as it is, to the earliest start at or after ``first_start`` that costs no more
    on the true speeds. The count's rounding depends on where a run lies on the quantum grid, so on a
    flat forecast the solver could start a slot or two late for a gain that is only the count's: a
    plan that says "start at 02:33:10 rather than 02:33:00: 500 g/kWh against 500 g/kWh". A start
    whose slots the ``allowed`` mask refuses is not taken."""
    active = np.flatnonzero(sp.modes >= 0)
    if len(active) == 0 or active[0] <= first_start:
        return sp
    k0 = int(active[0])
    tail = sp.modes[k0:]
    got = _charged(tail, energy_g, speed, slot_s=slot_s, need_s=need_s)
    if got is None:
        return sp
    # the cost of the tail started at each slot from first_start to k0 (the time value shifts with it)
    cost = np.convolve(c[first_start:k0 + len(tail)], got[0][::-1], "valid") + tv * np.arange(first_start, k0 + 1)
    if allowed is not None:
        cost = np.array([v if fits(np.concatenate((np.full(i, WAIT), tail)).astype(int), allowed) else math.inf
                         for i, v in enumerate(cost, start=first_start)])
    s = int(np.flatnonzero(cost <= cost.min() + 1e-9 * max(1.0, abs(float(cost.min()))))[0]) + first_start
    if s == k0:
        return sp
    modes = np.concatenate((np.full(s, WAIT), tail)).astype(int)
    return SlotPlan(modes, sp.feasible, sp.objective, sp.resumes, sp.rounding)


def fit_work(modes: np.ndarray, speed: np.ndarray, *, slot_s: float, T: int, need_s: float) -> np.ndarray | None:
    """The schedule cut after the slot its true work ends in, or run on in its last mode until it does
    (None when that passes the last slot ``T``)."""
    done = np.cumsum(np.where(modes >= 0, speed[np.maximum(modes, 0)], 0.0)) * slot_s
    if done[-1] >= need_s - 1e-6:
        return modes[: int(np.searchsorted(done, need_s - 1e-6)) + 1]
    n = int(math.ceil((need_s - done[-1]) / (speed[modes[-1]] * slot_s) - 1e-9))
    if len(modes) + n > T:
        return None
    return np.concatenate((modes, np.full(n, modes[-1]))).astype(int)


def fastest_slots(first_start: int, work_s: float, speed: np.ndarray, slot_s: float, *,
                  resume_overhead_s: float = 0.0) -> SlotPlan:
    """The fastest finish: wait until ``first_start``, then the fastest mode without a break.

    ``resume_overhead_s``: a paused job starting again does this much more work (one resume).
    """
    m = int(np.argmax(speed))
    n = int(math.ceil((work_s + resume_overhead_s) / (speed[m] * slot_s) - 1e-9))
    return SlotPlan(np.concatenate((np.full(first_start, WAIT), np.full(n, m))).astype(int), False, math.inf,
                    1 if resume_overhead_s > 0 else 0)


def fastest_allowed(first_start: int, work_s: float, speed: np.ndarray, power_w: np.ndarray, slot_s: float,
                    allowed: np.ndarray, *, pausable: bool, running: bool, resuming: bool = False,
                    resume_overhead_s: float = 0.0) -> SlotPlan:
    """The fastest finish under a mask: from ``first_start``, each slot in the fastest mode it allows.

    A slot that allows no mode is waited through when the job may wait there (``pausable``, or not
    started yet: a job that cannot pause starts where its whole run finds a mode in every slot, else
    where it finishes first); a started job that cannot pause runs it in its least-power mode, over
    the cap (the caller says so). Past the mask's end its last slot's holds (a cap known to last past
    the horizon). Each wait after running is a resume, and so is the first start of a paused job
    (``resuming``): each adds ``resume_overhead_s``.
    """
    order = [int(m) for m in np.argsort(-speed, kind="stable")]
    least = int(np.argmin(power_w))

    def run_from(t: int, started: bool) -> tuple[list[int], int, int]:
        """(modes from slot t on, slots over the cap, resumes)."""
        resumes = 1 if resuming and resume_overhead_s > 0 else 0
        need, done, out, over = work_s + resumes * resume_overhead_s, 0.0, [], 0
        while done < need - 1e-9:
            row = allowed[min(t, len(allowed) - 1)] if len(allowed) else None
            ok = [m for m in order if row[m]] if row is not None else order
            if not ok and (pausable or not started):
                out.append(WAIT)
                t += 1
                continue
            if started and out and out[-1] == WAIT:
                resumes += 1
                need += resume_overhead_s
            m = ok[0] if ok else least
            over += 0 if ok else 1
            started = True
            out.append(m)
            done += speed[m] * slot_s
            t += 1
        return out, over, resumes

    if pausable or running:
        modes, _, resumes = run_from(first_start, running)
        return SlotPlan(np.array([WAIT] * first_start + modes, dtype=int), False, math.inf, resumes)
    best: tuple[int, int, list[int], int] | None = None  # (over the cap, finish, modes, resumes)
    for s in range(first_start, max(len(allowed), first_start) + 1):
        modes, over, resumes = run_from(s, True)
        key = (over > 0, s + len(modes), [WAIT] * s + modes, resumes)
        if best is None or key[:2] < best[:2]:
            best = key
        if over == 0:
            break
    assert best is not None
    return SlotPlan(np.array(best[2], dtype=int), False, math.inf, best[3])


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
