"""The exact planner on a slot grid: dynamic programming over slots x work left x mode. Pure numpy.

Time is cut into slots of ``slot_s`` with one (forecast) intensity each. In every slot the job
either waits (before its start, or paused when it may pause) or runs in one mode for the whole slot;
the slot in which the work runs out is used only in part. The solver minimises

    carbon (g) + time_value_g_per_h x hours from slot 0 to the finish

subject to: no start before slot ``first_start``; finish by the end of slot ``deadline_slots - 1``;
every mode entered (at the start, on a switch, on resume) is held at least ``dwell_slots`` slots
unless the work runs out first; a non-pausable job runs without a gap from its start; each resume
adds ``resume_overhead_s`` of work.

Work is counted in whole quanta of ``quantum_s`` reference seconds. A mode is credited, by the end of
slot ``t``, the whole quanta of its exact work since slot 0 (``floor(speed x slot_s x t / quantum_s)``),
so a run of a mode from slot ``a`` to ``b`` is credited its exact work rounded once, not once per slot:
a plan's count is off by less than one quantum per mode run, however long the job (a per-slot round-down
lost up to 8 % on 12 h jobs). The plan the values imply is then checked on the true speeds and
repaired: when its slots do less work than the job needs it is solved again for more quanta, when
they do noticeably more, for fewer (:func:`solve_slots`); the work the count was off by is returned as
``SlotPlan.rounding``. ``tests/scheduler/test_planner_exact.py`` and ``benchmarks/simulate_exact.py``
compare the result with exact solvers that share no code with it (``benchmarks/exact_slots.py``). The
real finish and carbon of the chosen slots are recomputed with the true speeds.

Where a weight goes below zero (a price objective paid to use energy) a count short of the true work
would look like income; :func:`solve_slots` then also solves with each mode entry charged what its
rounding could earn, and keeps the plan that is cheaper on the true speeds.

``quanta.py`` chooses the quantum and counts the credits; ``dp.py`` is one solve: the values, their
replay into a plan and its repair on the true speeds.
"""

from __future__ import annotations

import math

import numpy as np

from scheduler.planner.slot_plan import SlotPlan, true_cost
from scheduler.planner.solve.dp import solve_once
from scheduler.planner.solve.quanta import choose_quantum

__all__ = ["choose_quantum", "solve_slots"]

_J_PER_KWH = 3.6e6


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
    allowed: np.ndarray | None = None,
) -> SlotPlan:
    """Optimal slot schedule (see the module docstring). ``intensity`` covers at least ``deadline_slots``.

    ``running_mode``: the job is running in this mode now and must hold it ``running_forced_slots``
    more slots (its dwell). ``resuming``: the job is paused with work done, so starting again is a resume.
    ``last_start``: no start after this slot (``first_start == last_start`` fixes the start).
    ``allowed``: a (slots, modes) mask, False where a mode may not run in a slot (a power cap's
    headroom there, :mod:`scheduler.planner.power_cap`); slots past its end allow every mode. A
    running mode the mask refuses within its dwell leaves at once (the cap outranks the dwell).

    Where a weight of the horizon is below zero (a price objective paid to use energy), each mode
    entry is charged what its count's rounding could earn (see :mod:`scheduler.planner.solve.dp`); that charge keeps
    the solver from splitting runs to collect the rounding, but can also keep it from a plan of
    several runs that truly is better. So both are solved, and the plan that is cheaper on the true
    speeds is taken, its objective its true cost.
    """
    args = dict(slot_s=slot_s, work_s=work_s, first_start=first_start, deadline_slots=deadline_slots,
                dwell_slots=dwell_slots, pausable=pausable, resume_overhead_s=resume_overhead_s, resuming=resuming,
                time_value_g_per_h=time_value_g_per_h, running_mode=running_mode,
                running_forced_slots=running_forced_slots, quantum_s=quantum_s, last_start=last_start, allowed=allowed)
    charged = solve_once(intensity, power_w, speed, charge_entries=True, **args)  # type: ignore[arg-type]
    T = int(deadline_slots)
    if T <= 0 or work_s <= 0 or float(np.min(intensity[:T])) >= 0:
        return charged
    free = solve_once(intensity, power_w, speed, charge_entries=False, **args)  # type: ignore[arg-type]
    if not (charged.feasible or free.feasible):
        return charged
    energy_g = np.asarray(power_w, dtype=float) * slot_s / _J_PER_KWH
    speed = np.asarray(speed, dtype=float)
    tv = time_value_g_per_h * slot_s / 3600.0
    c = np.asarray(intensity[:T], dtype=float)

    def true(sp: SlotPlan) -> float:
        if not sp.feasible:
            return math.inf
        need = work_s + sp.resumes * resume_overhead_s * pausable
        padded = np.concatenate((c, np.zeros(max(len(sp.modes) - T, 0))))
        return true_cost(sp.modes, padded, energy_g, speed, slot_s=slot_s, need_s=need, tv=tv)

    best = min((charged, free), key=true)
    return SlotPlan(best.modes, True, true(best), best.resumes, best.rounding)
