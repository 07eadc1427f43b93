"""Work quanta: how finely the exact planner counts work, and the credits a mode earns slot by slot.

See :mod:`scheduler.planner.solve` for why work is counted in quanta and how a plan's count is kept
within one of its true work per mode run.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["choose_quantum", "credit_rows", "credits"]

#: mode runs a plan's work count is budgeted for (the count is off by under one quantum per run)
_RUNS = 4
#: quanta every mode gains in a slot at least: a slot's share of work is resolved to a third, and a
#: run's first slot keeps two after its one-quantum entry tax (see scheduler.planner.solve.dp)
_MIN_QUANTA_PER_SLOT = 3
#: work levels at most, whatever max_rounding asks: memory and time stay bounded, and a plan that
#: this leaves counted worse than its bound says so (RunPlan.rounding_exceeded)
_MAX_LEVELS = 20000


def choose_quantum(speeds: np.ndarray, slot_s: float, work_s: float, *, max_rounding: float = 0.01) -> float:
    """Work quantum (reference seconds): ``_RUNS`` quanta are at most ``max_rounding`` of the work.

    A plan's count is off by under one quantum per mode run (see the module docstring), so a plan
    of up to ``_RUNS`` runs is counted within ``max_rounding``; the repair on true speeds catches
    the rest. The number of work levels is then ``_RUNS / max_rounding`` whatever the job's length.
    No quantum is longer than a third of the slowest mode's work in one slot, so every mode gains in
    every slot, the first of a run too (which is credited one quantum less, see :func:`scheduler.planner.solve.dp.solve_once`).
    """
    speeds = np.asarray(speeds, dtype=float)
    work_s = max(work_s, 1e-9)
    q = max(min(float(np.min(speeds)) * slot_s / _MIN_QUANTA_PER_SLOT, max_rounding * work_s / _RUNS),
            work_s / _MAX_LEVELS)
    # whole quanta per slot for the fastest mode: its runs are counted exactly, so a deadline that the
    # fastest run meets is never refused for a rounding
    fastest = float(np.max(speeds)) * slot_s
    return fastest / math.ceil(fastest / q - 1e-9)


def credits(speed: np.ndarray, slot_s: float, q: float, n: int) -> np.ndarray:
    """Quanta credited to each mode by the end of each slot counted from slot 0: shape (n + 1, modes)."""
    return np.floor(np.arange(n + 1)[:, None] * (speed * slot_s / q)[None, :] + 1e-9).astype(np.int64)


def credit_rows(G: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (mode, credit) pairs in ``G`` (slots, modes): their modes and credits as columns, and each slot's
    pair per mode. Credits are few small integers: a table over their range (np.unique sorts, 10x slower)."""
    low = int(G.min())
    n = int(G.max()) - low + 1
    key = G - low + np.arange(G.shape[1]) * n
    seen = np.zeros(G.shape[1] * n, dtype=bool)
    seen[key] = True
    u = np.flatnonzero(seen)
    return (u // n)[:, None], (u % n + low)[:, None], (np.cumsum(seen) - 1)[key]
