"""The slot DP's backward pass (:mod:`scheduler.planner.solve`): its values, in few numpy calls per slot.

The values are those of the module docstring of :mod:`scheduler.planner.solve`: ``V[t, m, r]``, the
least cost from slot ``t`` for a job running mode ``m`` with ``r`` quanta left; ``SW[t, r]``, the
least cost of entering some mode at ``t`` (a dwell block); ``P[t, r]`` (a pausable job), of being
paused at ``t``. A simulated year asks for tens of thousands of plans, each ~100 slots of ~5 modes x
~100 work levels: numpy's cost per call, not the arithmetic, is what a plan takes. Two facts cut the
calls per slot from about ten to about three, with every value computed by the same floating-point
operations in the same order as a slot-by-slot pass (so every plan is the same to the bit):

- **Along a run of one mode the quanta left plus the mode's credits since slot 0 stay the same**
  (``r + F[t, m]``). ``V`` is kept in those coordinates, so continuing a mode for a slot is one add
  and one minimum over all modes at once, with no gather.
- **A mode entered at ``t`` is held for the dwell's ``D`` slots**, so the entries of ``D`` slots in a
  row read only values at least ``D`` slots later, already final: the entries, their minimum over
  modes and their move into the trajectory coordinates are done for ``D`` slots in one call each.

Only a band of work levels is computed per slot (see :func:`solve_slots`); the values of cells
outside it are those a slot-by-slot pass leaves there (infinite, or the paused value), read through
:meth:`SlotValues.v`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SlotValues", "backward"]

_INF = math.inf


@dataclass
class SlotValues:
    """The backward pass's values and what reading them needs."""

    Vw: np.ndarray          # (T + D + 1, M, width): V in trajectory coordinates (column r + col0[t][m])
    SW: np.ndarray          # (T, W): best entry at t per work left
    P: np.ndarray | None    # (T + 1, W): best paused value (pausable jobs)
    col0: list[list[int]]   # the column of 0 quanta left, per slot and mode
    lo: list[int]           # the band of work levels computed at each slot (empty where lo > hi)
    hi: list[int]
    T: int

    def v(self, t: int, m: int, r: int) -> float:
        """``V[t, m, r]`` as a slot-by-slot pass leaves it: 0 when done, the paused value or inf off the band."""
        if r == 0:
            return 0.0
        if t >= self.T or self.hi[t] < self.lo[t]:
            return _INF
        if not self.lo[t] <= r <= self.hi[t]:
            return float(self.P[t, r]) if self.P is not None else _INF
        return float(self.Vw[t, m, r + self.col0[t][m]])


def finishing(CF: np.ndarray, cum: np.ndarray, c: np.ndarray, energy_g: np.ndarray, *, tv: float, T: int,
              ts: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Cost of finishing, with ``r`` quanta left, inside a dwell block entered at each slot of ``ts``: (len(ts), M, len(r)).

    The block runs to the slot its credits (``CF``, entry tax taken) reach ``r`` and uses that slot in
    part; inf where that ends after slot ``T``.
    """
    D, M = CF.shape[1] - 1, CF.shape[2]
    n, R = len(ts), len(r)
    # the slot each r finishes in: how many of the block's running credits fall short of it (they only
    # grow), one sorted search for every (slot, mode) row at once, each row lifted above the one before
    cf = CF[ts][:, 1:, :].transpose(0, 2, 1).reshape(n * M, D)                       # (n x M, D)
    lift = (int(cf.max(initial=0)) + int(r.max(initial=0)) + 2) * np.arange(n * M)[:, None]
    jj = np.searchsorted((cf + lift).ravel(), (r[None, :] + lift).ravel()).reshape(n * M, R) - D * np.arange(n * M)[:, None]
    jj = np.minimum(jj, D - 1).reshape(n, M, R)
    tix, mix = ts[:, None, None], np.arange(M)[None, :, None]
    lo, hi = CF[tix, jj, mix], CF[tix, jj + 1, mix]
    fb = (r[None, None, :] - lo) / np.maximum(hi - lo, 1)
    tj = tix + jj
    ends = tj + fb
    fin = energy_g[None, :, None] * (cum[tj] - cum[tix] + fb * c[tj]) + tv * ends
    fin[ends > T + 1e-9] = _INF
    return fin


def backward(c: np.ndarray, cum: np.ndarray, energy_g: np.ndarray, F: np.ndarray, CF: np.ndarray, *, T: int, D: int,
             W: int, o: int, pausable: bool, tv: float, lo: np.ndarray, hi: np.ndarray) -> SlotValues:
    """The values of every slot from the last to the first (see the module docstring).

    ``c`` and ``cum``: intensity per slot and its running sum; ``energy_g``: g per slot per g/kWh of each
    mode; ``F``: quanta credited to each mode from slot 0 to each slot; ``CF``: quanta credited from each
    slot over the next ``D`` slots (a run's entry tax taken); ``o``: quanta a resume adds; ``lo``/``hi``:
    the band of work levels that matters at each slot (``lo`` never grows with t).
    """
    M = len(energy_g)
    # the reference track: each slot's least credits over the modes (the slowest mode's, unless rounding the
    # credits to quanta puts two near-equal speeds the other way round at some slot), so no mode's credits
    # over any stretch of slots fall below it and every shift below is >= 0
    step_ref = (F[1:] - F[:-1]).min(axis=1)
    ref = np.concatenate([F[:1].min(axis=1), F[:1].min() + np.cumsum(step_ref)])
    delta = F - ref[:, None]
    G1 = F[1:T + 1] - F[:T]                          # credits of one slot
    G = CF[:, D, :]                                  # credits of a dwell block
    # slots are taken D at a time from the last, [t0, t1); a slot's cells are laid out from its chunk's
    # first slot and lowest band level A, so a chunk's columns span its band and a few cells more
    t1s = list(range(T, 0, -D))
    A_of = {t1: int(lo[t1 - 1]) for t1 in t1s}
    B_of = {t1: int(hi[max(t1 - D, 0):t1].max()) + 1 for t1 in t1s}
    t1_of = T - D * ((T - 1 - np.arange(T)) // D)
    t0_of = np.maximum(t1_of - D, 0)
    shift = delta[:T] - delta[t0_of]                 # a mode's credits since its chunk's start beyond the reference's
    pad = int(max(G.max(), (D + 1) * G1.max())) + 1  # room for the cells a block or a slot reads below 0 left
    A_row = np.array([A_of[t1] for t1 in t1_of.tolist()] + [A_of[T]] * (D + 1))
    col0 = np.zeros((T + D + 1, M), dtype=np.int64)
    col0[:T] = shift + pad - A_row[:T, None]
    col0[T:] = pad - A_of[T]
    later = {t1: A_of.get(t1 + D, A_of[T]) for t1 in t1s}
    smax = int(shift.max(initial=0))
    width = pad + max([B_of[t1] - later[t1] for t1 in t1s] + [0]) + smax + 2  # no live slot: nothing is read
    Vw = np.full((T + D + 1, M, width), _INF)
    flat = Vw.reshape(-1)
    SW = np.full((T, W), _INF)
    P = np.full((T + 1, W), _INF) if pausable else None
    if P is not None:
        P[:, 0] = 0.0
    rows = np.arange(T)
    modes = np.arange(M)
    # a block entered at t reads V[t + D, m, r - G[t, m]]: in the flat table, this offset plus r (mode first)
    boff = np.ascontiguousarray((((rows + D)[:, None] * M + modes[None, :]) * width + col0[D:T + D] - G).T)
    rW = np.arange(W)
    bc = np.ascontiguousarray(((cum[D:T + D] - cum[:T])[:, None] * energy_g[None, :]).T)[:, :, None]  # a block's cost
    ce = (c[:T, None] * energy_g[None, :])[:, :, None]                                               # a slot's cost
    lo_l, hi_l, gs_l = lo.tolist(), hi.tolist(), step_ref[:T].tolist()
    live_l = (hi >= lo).tolist()
    Rf = int(G.max()) + 1
    gmax = int(G1.max())
    cw_max = max(B_of[t1] - A_of[t1] for t1 in t1s) + smax
    kk_all = np.arange(max(cw_max, 1))
    for t1 in t1s:
        t0 = max(t1 - D, 0)
        if not any(live_l[t0:t1]):
            continue
        n = t1 - t0
        A, B = A_of[t1], B_of[t1]
        nb = B - A
        rr = rW[A:B]
        # the dwell-block entries of the n slots at once
        block = flat.take(boff[:, t0:t1, None] + rr)                                     # (M, n, nb)
        block += bc[:, t0:t1]
        if A < Rf:  # finishing inside the block: its own cost, not a read of the cells below 0 left
            k = min(B, Rf) - A
            fin = finishing(CF, cum, c, energy_g, tv=tv, T=T, ts=np.arange(t0, t1), r=rr[:k])
            np.copyto(block[:, :, :k], fin.transpose(1, 0, 2),
                      where=(rr[:k] <= G[t0:t1].T[:, :, None]) & (rr[:k] > 0))
        sw = np.minimum.reduce(block, axis=0)                                             # (n, nb)
        np.copyto(sw, _INF, where=(rr < lo[t0:t1, None]) | (rr > hi[t0:t1, None]))
        SW[t0:t1, A:B] = sw
        S = sw
        if P is not None:
            for t in range(t1 - 1, t0 - 1, -1):
                if not live_l[t]:
                    continue
                sw_t, pt = SW[t], P[t]
                pt[: W - o] = np.minimum(P[t + 1][: W - o], sw_t[o:])
                pt[W - o:] = P[t + 1][W - o:]
                pt[0] = 0.0
            S = np.minimum(sw, P[t0:t1, A:B])
        # the entries (and pauses) in trajectory coordinates: column k of mode m at slot t is r = A + k - shift[t, m]
        sp = int(shift[t0:t1].max())
        cw = nb + sp
        kk = kk_all[:cw]
        Spad = np.full((n, nb + 2 * sp), _INF)
        Spad[:, sp:sp + nb] = S
        if A == 0:
            Spad[:, sp] = _INF  # done is not a cell here: finishing is costed where it happens
        soff = (np.arange(n) * (nb + 2 * sp) + sp)[:, None] - shift[t0:t1]
        Sw = Spad.reshape(-1).take(soff[:, :, None] + kk)                               # (n, M, cw)
        term = None
        if A <= gmax:  # finishing inside a slot of a run: its part of the slot's cost, and the time value
            r = A + kk - shift[t0:t1, :, None]
            g = G1[t0:t1, :, None]
            frac = r / g
            cost = c[t0:t1, None, None] * (energy_g[None, :, None] * frac)
            if tv:
                cost = cost + tv * (frac + np.arange(t0, t1)[:, None, None])
            term = np.where((r > 0) & (r <= g), cost, _INF)
        c0, c1 = pad, pad + cw
        # the slot after the chunk is laid out from its own chunk: each mode's cells move by its credits
        # over this chunk beyond the reference's, and by the two chunks' lowest levels
        off = c0 - gs_l[t1 - 1] - (delta[t1] - delta[t0]) + (A - later[t1])
        src = flat.take(((t1 * M + modes) * width + off)[:, None] + kk)
        for t in range(t1 - 1, t0 - 1, -1):
            j = t - t0
            dst = Vw[t, :, c0:c1]
            if t == t1 - 1:
                np.add(src, ce[t], out=dst)
            else:
                gs = gs_l[t]
                np.add(Vw[t + 1, :, c0 - gs:c1 - gs], ce[t], out=dst)
            if term is not None:
                np.minimum(dst, term[j], out=dst)
            np.minimum(dst, Sw[j], out=dst)
    return SlotValues(Vw, SW, P, col0.tolist(), lo_l, hi_l, T)
