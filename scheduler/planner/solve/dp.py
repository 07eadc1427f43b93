"""One solve of the exact slot planner: the dynamic programme, the replay of its values, the repair on true speeds.

:func:`scheduler.planner.solve.solve_slots` calls it (twice where a weight goes below zero).
"""

from __future__ import annotations

import math

import numpy as np

from scheduler.planner.slot_plan import WAIT, SlotPlan, earliest_start, merge_runs
from scheduler.planner.solve.quanta import choose_quantum, credit_rows, credits

__all__ = ["solve_once"]

_J_PER_KWH = 3.6e6
#: quanta above the job's work the values cover, so that a repair can ask for more without solving again
_HEADROOM = 16
#: repairs of one plan on the true speeds (each replays the values for another count of quanta)
_REPAIRS = 6


def solve_once(
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
    charge_entries: bool = True,
) -> SlotPlan:
    """:func:`scheduler.planner.solve.solve_slots`, one solve; ``charge_entries``: charge the entries that below-zero
    weights could pay for (see the comment at ``entry_charge``)."""
    M = len(power_w)
    T = int(deadline_slots)
    D = max(int(dwell_slots), 1)
    if work_s <= 0:
        return SlotPlan(np.zeros(0, dtype=int), True, 0.0, 0)
    if T <= (0 if running_mode is not None else first_start):
        return SlotPlan(np.zeros(0, dtype=int), False, math.inf, 0)
    speed = np.asarray(speed, dtype=float)
    q = quantum_s or choose_quantum(speed, slot_s, work_s)
    F = credits(speed, slot_s, q, T + D + 1)                                         # (T + D + 2, M)
    L = int(math.ceil(work_s / q - 1e-9))
    o = int(math.ceil(resume_overhead_s / q - 1e-9)) if pausable else 0
    W = L + o + _HEADROOM + 1
    resuming = resuming and pausable and running_mode is None
    inf = math.inf
    energy_g = power_w * slot_s / _J_PER_KWH                                           # g per slot per g/kWh
    tv = time_value_g_per_h * slot_s / 3600.0                                         # g per slot of delay
    c = np.zeros(T + D + 1)
    c[:T] = intensity[:T]
    cum = np.concatenate(([0.0], np.cumsum(c)))
    # refused[t, m]: mode m may not run in slot t; bad[t, m]: how many slots before t refuse it
    refused = np.zeros((T + D + 1, M), dtype=bool)
    if allowed is not None:
        n_ok = min(len(allowed), T + D + 1)
        refused[:n_ok] = ~np.asarray(allowed, dtype=bool)[:n_ok]
    masked = bool(refused.any())
    bad = np.concatenate((np.zeros((1, M), dtype=np.int64), np.cumsum(refused, axis=0)))
    if masked and running_mode is not None and bad[min(int(running_forced_slots), T + D + 1), running_mode] > 0:
        running_forced_slots = 0

    # Values are flat arrays over (mode, work left in quanta); the cell (m, 0) is "done" and stays 0,
    # so every transition that finishes reads it and adds its own finishing cost.
    r = np.arange(W)[None, :]
    base = np.arange(M) * W                                                            # cell (m, 0)
    # a dwell block entered at t: its credits by each of its slots, and (finishing()) what finishing in it costs
    ts = np.arange(T)
    CF = F[ts[:, None] + np.arange(D + 1)[None, :]] - F[ts][:, None, :]              # (T, D + 1, M) credited since t
    # a run entered at t is credited one quantum less (a mode whose slot work is not whole quanta): its
    # count, floor(end) - floor(start) - 1, is then never more than its true work, so a plan is never
    # later than it says and the solver gains nothing by switching modes to catch a rounding
    tax = (np.abs(speed * slot_s / q - np.round(speed * slot_s / q)) > 1e-9).astype(np.int64)
    CF[:, 1:, :] -= tax[None, None, :]
    # Below zero a weight pays for energy, and a count short of the true work then flatters a plan: it
    # "earns" the shortfall by running on at its finish. Each entry leaves its run short by under two
    # quanta (its tax and the rounding; a resume's overhead, rounded up, by under one more), so the
    # solver split runs to collect it: a 3 h job at negative prices valued its plan 23 % above what it
    # earned, and earned 8 % less than running at once. So an entry at t is charged the most its
    # shortfall can earn at the finish, which comes after t: at the lowest weight from t on. The
    # values then never promise more than a plan's true cost, and stay within that charge per run of
    # the optimum. Where no weight from t on is negative (carbon; prices above zero) nothing is charged.
    paid = np.maximum(-np.minimum.accumulate(c[:T][::-1])[::-1], 0.0)                  # (T,)
    per_q = paid * q * float(np.max(energy_g / (speed * slot_s)))
    # a run entered at t and left at u is short by tax + frac(u) - frac(t) quanta, frac the part of a
    # quantum the mode's exact count since slot 0 passes its credit by: under 2 - frac(t)
    frac = np.clip(ts[:, None] * (speed * slot_s / q)[None, :] - F[:T], 0.0, 1.0)
    entry_charge = per_q[:, None] * tax[None, :] * (2.0 - frac)                        # (T, M)
    resume_charge = per_q * (1.0 if o * q > resume_overhead_s + 1e-9 else 0.0)         # (T,)
    if not charge_entries:
        entry_charge, resume_charge = np.zeros_like(entry_charge), np.zeros_like(resume_charge)
    charged = bool(entry_charge.any())
    Rf = min(int(CF[:, D, :].max()) + 1, W)
    rf = np.arange(Rf)
    mix = np.arange(M)[None, :, None]

    def finishing(tt: np.ndarray) -> np.ndarray:
        """Finishing in a dwell block entered at each slot of ``tt``, per mode and work left r < Rf: (len(tt), M,
        Rf), element by element (slots apart get the same bits); finishing slots counted a dwell slot at a time."""
        cf = CF[tt]
        jj = (cf[:, 1, :, None] < rf).astype(np.int64)
        for k in range(2, D + 1):
            jj += cf[:, k, :, None] < rf
        np.minimum(jj, D - 1, out=jj)
        at = np.arange(len(tt))[:, None, None] * ((D + 1) * M) + mix + jj * M
        lo, hi = cf.take(at), cf.take(at + M)
        fb = (rf[None, None, :] - lo) / np.maximum(hi - lo, 1)
        tix = tt[:, None, None]
        tj = tix + jj
        ends = tj + fb
        fin = energy_g[None, :, None] * (cum[tj] - cum[tt][:, None, None] + fb * c[tj]) + tv * ends
        if charged:
            fin += entry_charge[tt][:, :, None]
        fin[ends > T + 1e-9] = inf
        if masked:  # a finishing block needs its mode allowed from its entry to its finishing slot
            fin[(bad[tj + 1, mix] - bad[tix, mix]) > 0] = inf
        return fin

    block_refused = (bad[ts + D] - bad[ts]) > 0                                          # (T, M): a whole dwell block

    V = np.full((T + D + 1, M * W), inf)
    V[:, base] = 0.0
    P = np.full((T + 1, W), inf) if pausable else None
    if P is not None:
        P[:, 0] = 0.0
    SW = np.full((T, W), inf)                                                          # best entry at t per work left
    # Only a band of work left matters at slot t: no more than the fastest mode can still do by the
    # deadline, no less than the most any plan can have done since slot 0 (from the lowest target a
    # repair asks for), and for a running job that cannot pause, no more than the slowest leaves.
    fast = F.max(axis=1)
    lo = np.maximum(L - _HEADROOM - fast[:T] - 2, 0)
    hi = np.minimum(W - 1, fast[T] - fast[:T] + 2)
    if running_mode is not None and not pausable:
        hi = np.minimum(hi, W - 1 - F[:T].min(axis=1) + 2 * (ts // D + 2))
    # The loop reads the finishing costs in the slots whose band reaches below Rf (the last ones, a
    # quarter of a plan's): only those are computed ahead; the replay computes the others it reads.
    lo_l, hi_l = lo.tolist(), hi.tolist()
    t0 = next((t for t, a in enumerate(lo_l) if a < Rf), T)
    fin_late = finishing(np.arange(t0, T))
    fin_mask = (rf[None, None, :] <= CF[t0:, D, :, None]) & (rf[None, None, :] > 0)
    fin_early: dict[int, np.ndarray] = {}                                              # the replay's, as it reads them

    def fin_at(t: int) -> np.ndarray:
        if t < t0 and t not in fin_early:
            fin_early[t] = finishing(np.array([t]))[0]
        return fin_late[t - t0] if t >= t0 else fin_early[t]

    # The slot loop runs ~90 times a plan on ~90 work levels, 23 000 plans a 12 h year: numpy's per-call
    # overhead is its cost. A slot's 2 M candidates, rows :M continue (mode m held, read at row t + 1) and
    # M: a block (entered at t, read at row t + D; candidate i reads off[i] + max(r - shift[t, i], 0) from
    # row t + 1's start), are gathered in one call and costed in one, each element as if apart (same bits).
    G1 = F[1:T + 1] - F[:T]                                                            # credits of slot t
    shift = np.concatenate((G1, CF[:, D]), axis=1)                                    # (T, 2 M)
    off = np.concatenate((base, (D - 1) * M * W + base))[:, None]
    start = (ts[:, None] + 1) * (M * W) + off[:, 0] - shift                            # reads start + r, r >= shift
    coef = np.repeat(np.stack((c[:T], cum[ts + D] - cum[ts]), axis=1), M, axis=1)    # c[t] x M, the block's sum x M
    # Where r > every shift of the slot (most slots), a continue's cost factor min(r / g, 1) and a
    # block's (r > G) are exactly 1.0, so coef x (e x 1.0) is coef x e, one number per candidate.
    flat_cost, coef = (coef * np.concatenate((energy_g, energy_g)))[:, :, None], coef[:, :, None]
    plain = max(Rf, int(G1.max(initial=0)) + 1)
    # below that (a plan's last slots), the factors of each (mode, credit) that occurs, a slot picking its rows
    mc, gc, sel_c = credit_rows(G1)
    mb, gb, sel_b = credit_rows(CF[:, D])
    frac = np.minimum(r / gc, 1.0)
    row_e = np.concatenate((energy_g[mc] * frac, energy_g[mb] * (r > gb)))
    row_f = np.where((r <= gc) & (r > 0), frac, 0.0)                                  # time value of a finish
    sel = np.concatenate((sel_c, sel_b + len(mc)), axis=1)
    refused2 = np.concatenate((refused[:T], block_refused), axis=1) if masked else None
    Vf, V3 = V.reshape(-1), V.reshape(T + D + 1, M, W)                                # views of V
    # above it each candidate reads a run of the flat values: a row of a sliding window of them (only read;
    # np.ndarray on Vf's buffer: as_strided costs 30 times more)
    nmax = max(int((hi - lo).max()) + 1, 1)
    win = np.ndarray((len(Vf) - nmax + 1, nmax), Vf.dtype, Vf, 0, (Vf.itemsize,) * 2)
    at_lo = list(start + lo[:, None])                                                 # flat index at r = a
    for t in range(T - 1, -1, -1):
        a, b = lo_l[t], hi_l[t] + 1
        if b <= a:
            continue
        if a >= plain:
            x = win[at_lo[t], :b - a]
            x += flat_cost[t]
        else:
            x = Vf.take(np.maximum(start[t][:, None] + r[:, a:b], (t + 1) * M * W + off))
            x += coef[t] * row_e[sel[t], a:b]
        if charged:
            x[M:] += entry_charge[t][:, None]
        if tv:
            f_c = row_f[sel_c[t], a:b]
            x[:M] += tv * (f_c + t * (f_c > 0))
        if refused2 is not None:
            x[refused2[t]] = inf
        if a < Rf:
            n = min(b, Rf) - a
            np.copyto(x[M:, :n], fin_late[t - t0][:, a:a + n], where=fin_mask[t - t0][:, a:a + n])
        # np.minimum.reduce, not ndarray.min: its Python wrapper was 5 % of a plan
        sw = np.minimum.reduce(x[M:], axis=0, out=SW[t, a:b])
        np.minimum(x[:M], sw, out=V3[t, :, a:b])
        if P is not None:
            vt, pt, pn = V3[t], P[t], P[t + 1]
            np.minimum(pn[:W - o], SW[t, o:] + resume_charge[t], out=pt[:W - o])
            pt[W - o:] = pn[W - o:]
            pt[0] = 0.0
            np.minimum(vt, pt, out=vt)

    # the replay walks slot by slot in Python: it reads these, and values (Vf.item), as Python numbers
    Fl, cl, el, taxl = F.tolist(), c.tolist(), energy_g.tolist(), tax.tolist()
    refused_l = refused.tolist() if masked else []
    MW = M * W

    def cont_value(t: int, m: int, left: int) -> float:
        if masked and refused_l[t][m]:
            return inf
        gm = Fl[t + 1][m] - Fl[t][m]
        if left <= gm:
            f = left / gm
            return el[m] * cl[t] * f + tv * (t + f)
        return el[m] * cl[t] + Vf.item((t + 1) * MW + m * W + left - gm)

    def block_values(t: int, left: int) -> np.ndarray:
        out = np.empty(M)
        for m in range(M):
            if left <= CF[t, D, m]:
                out[m] = fin_at(t)[m, left]
            elif block_refused[t, m]:
                out[m] = inf
            else:
                out[m] = (energy_g[m] * (cum[t + D] - cum[t]) + V[t + D][m * W + left - int(CF[t, D, m])]
                          + entry_charge[t, m])
        return out

    def close(a: float, b: float) -> bool:
        return a <= b + 1e-9 * max(1.0, abs(b))

    def replay(target: int) -> SlotPlan:
        """The plan the values imply for ``target`` quanta (continue, then switch, then pause on ties)."""
        modes: list[int] = []
        t, left, resumes = 0, target, 0

        def run(m: int, slots: int, entered: bool = False) -> bool:
            nonlocal t, left
            for k in range(slots):
                modes.append(m)
                left -= Fl[t + 1][m] - Fl[t][m] - (taxl[m] if entered and k == 0 else 0)
                t += 1
                if left <= 0:
                    return True
            return False

        if running_mode is not None:
            forced = min(max(int(running_forced_slots), 0), T)
            gf = int(F[forced, running_mode] - F[0, running_mode])
            if forced and left <= gf:
                # the running mode is not entered: its block's value less the entry charge
                objective = float(block_values(0, left)[running_mode] - entry_charge[0, running_mode]) if D >= forced else 0.0
                run(running_mode, forced)
                return SlotPlan(np.array(modes, dtype=int), True, objective, 0)
            best = (energy_g[running_mode] * (cum[forced] - cum[0]) + V[forced][running_mode * W + left - gf]
                    if forced else V[0][running_mode * W + left])
            if not math.isfinite(best):
                return SlotPlan(np.zeros(0, dtype=int), False, inf, 0)
            objective = float(best)
            run(running_mode, forced)
            state, m = "run", running_mode
        else:
            entry = P[:T, target] if resuming and P is not None else SW[:, target]
            allowed = (ts >= first_start) & ((ts <= last_start) if last_start is not None else True)
            U = np.append(np.minimum.accumulate(np.where(allowed, entry, inf)[::-1])[::-1], inf)
            if not math.isfinite(U[0]):
                return SlotPlan(np.zeros(0, dtype=int), False, inf, 0)
            objective = float(U[0])
            while t < T and not (allowed[t] and close(float(entry[t]), U[t + 1])):
                modes.append(WAIT)
                t += 1
            state, m = ("pause" if resuming else "start"), -1
        while left > 0 and t < T:
            if state == "start":
                m = int(np.argmin(block_values(t, left)))
                if run(m, D, entered=True):
                    break
                state = "run"
            elif state == "pause":
                assert P is not None
                if left + o < W and close(float(block_values(t, left + o).min()) + resume_charge[t], P[t + 1][left]):
                    left += o
                    resumes += 1
                    state = "start"
                    continue
                modes.append(WAIT)
                t += 1
            else:
                here = Vf.item(t * MW + m * W + left)
                if cont_value(t, m, left) <= here + 1e-9 * max(1.0, abs(here)):  # close(), inlined: most slots
                    modes.append(m)  # run(m, 1), inlined: the loop's test is its stop
                    left -= Fl[t + 1][m] - Fl[t][m]
                    t += 1
                elif close(float(block_values(t, left).min()), here):
                    state = "start"
                else:
                    state = "pause"
        return SlotPlan(np.array(modes, dtype=int), True, objective, resumes)

    def counted(sp: SlotPlan) -> tuple[float, float]:
        """(work the plan's slots lack on true speeds, their true work minus the solver's count of it), reference s."""
        k = np.arange(len(sp.modes))[sp.modes >= 0]
        m = sp.modes[k]
        true_s = float(np.sum(speed[m])) * slot_s
        credit_s = float(np.sum(F[k + 1, m] - F[k, m])) * q
        return work_s + sp.resumes * resume_overhead_s * pausable - true_s, true_s - credit_s

    # repair on true speeds: the count of a plan may be off by a few quanta either way; ask the values
    # for more quanta when its slots fall short of the work, for fewer when they do whole quanta more
    # than counted (work bought and not needed), and keep the cheapest plan that does the work
    best: SlotPlan | None = None
    tried: set[int] = set()
    target = L
    for _ in range(_REPAIRS):
        if target in tried or not 0 < target < W:
            break
        tried.add(target)
        sp = replay(target)
        if not sp.feasible:
            break
        short, off = counted(sp)
        if short <= 1e-9:
            sp = SlotPlan(sp.modes, True, sp.objective, sp.resumes, abs(off) / work_s)
            if best is None or sp.objective < best.objective:
                best = sp
            if off < q:
                break
            target -= int(off // q)
        else:
            target += int(math.ceil(short / q - 1e-9))
    if best is None:
        return SlotPlan(np.zeros(0, dtype=int), False, inf, 0)
    need_s = work_s + best.resumes * resume_overhead_s * pausable
    ok = ~refused if masked else None
    merged = merge_runs(best, c, energy_g, speed, slot_s=slot_s, T=T, tv=tv, need_s=need_s,
                        frozen=running_forced_slots if running_mode is not None else 0, allowed=ok)
    if running_mode is not None:
        return merged
    return earliest_start(merged, c, energy_g, speed, slot_s=slot_s, first_start=first_start, tv=tv, need_s=need_s,
                          allowed=ok)
