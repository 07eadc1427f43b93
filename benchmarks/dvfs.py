"""DVFS strategies side by side on a kernel profile (every figure MODELLED), planner speed and gap to the oracle.

    python benchmarks/dvfs.py [--profile PROFILE.json] [--layers 24] [--epsilon 0.02] [--tau-sw-ms 5] [--json]

Strategies (energy and time of one iteration of ``--layers`` copies of the profiled layer,
including the profile's CPU gaps at idle power; switches counted cyclically, i.e. including the
switch back to the first clock at the next iteration):

1. default clocks (the reference);
2. best single static clock (what a one-off clock lock or Zeus-style search can reach);
3. pass-level clocks: one clock for forward, one for backward+optimizer (Perseus/Kareus granularity);
4. per-kernel clocks ignoring switch cost: the Spaan et al. upper bound, and the same plan charged
   the real switch cost;
5. gridshift's plan with switch cost (kernel boundaries), and the executable phase-boundary plan.

Also: planner wall time on the full instance (all clocks) against a 1 s target, the gap to the
HiGHS MILP oracle on a reduced instance, and a sweep of the switch latency over 0..10 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from plans.dvfs.model import KernelTables, build_tables  # noqa: E402
from plans.dvfs import evaluate_assignment, plan_dvfs  # noqa: E402
from plans.dvfs.profiles.kernel_profile import load_profile  # noqa: E402

REAL_PROFILE = ROOT / "tests" / "data" / "h200_gpt3xl_layer_profile.json"  # committed once captured on the H200
SYNTHETIC_PROFILE = ROOT / "tests" / "data" / "SYNTHETIC_gpt3xl_layer_h200_profile.json"
DEFAULT_PROFILE = REAL_PROFILE if REAL_PROFILE.exists() else SYNTHETIC_PROFILE


def _step(tables: KernelTables, a: np.ndarray, tau: float, esw: float) -> tuple[float, float, int]:
    """(energy_j, time_s, switches) of one iteration including CPU gaps at idle power, switches cyclic."""
    E, T, S = evaluate_assignment(tables.time_s, tables.energy_j, a, tau_sw_s=tau, eps_sw_j=esw, cyclic=True)
    return E + tables.gap_time_s * tables.idle_power_w, T + tables.gap_time_s, S


def _row(name: str, tables: KernelTables, a: np.ndarray, tau: float, esw: float, ref: tuple[float, float, int], **extra) -> dict:
    E, T, S = _step(tables, a, tau, esw)
    clocks = sorted({int(tables.sm_clocks_mhz[j]) for j in np.unique(a)})
    return {"name": name, "energy_saving_pct": round(100 * (1 - E / ref[0]), 3), "slowdown_pct": round(100 * (T / ref[1] - 1), 3),
            "modelled": True, "switches_per_iteration": S, "clocks_mhz": clocks if len(clocks) <= 4 else f"{len(clocks)} distinct", **extra}


def _pass_level(tables: KernelTables, budget_s: float, tau: float, esw: float, floor_mhz: float) -> np.ndarray:
    """Best (forward clock, backward clock) pair within the budget, counting the 2 switches per iteration."""
    fwd = np.array([".forward" in p for p in tables.phases])
    opts = np.flatnonzero(tables.sm_clocks_mhz >= floor_mhz)
    tf, tb = tables.time_s[fwd][:, opts].sum(0), tables.time_s[~fwd][:, opts].sum(0)
    ef, eb = tables.energy_j[fwd][:, opts].sum(0), tables.energy_j[~fwd][:, opts].sum(0)
    diff = ~np.eye(len(opts), dtype=bool)
    T = tf[:, None] + tb[None, :] + 2 * tau * diff
    E = ef[:, None] + eb[None, :] + 2 * esw * diff
    E = np.where(T <= budget_s, E, np.inf)
    i, j = np.unravel_index(int(np.argmin(E)), E.shape)
    a = np.where(fwd, opts[i], opts[j])
    return a


def run(profile_path: Path, *, layers: int, epsilon: float, tau_ms: float, with_oracle: bool = True) -> dict:
    prof = load_profile(profile_path)
    one = build_tables(prof)
    tables = one.stack_layers(layers) if layers > 1 else one
    tau = tau_ms / 1000
    esw = tau * tables.idle_power_w
    floor = 0.6 * float(tables.sm_clocks_mhz.max())
    d = tables.default_option
    ref_a = np.full(tables.n_items, d)
    ref = _step(tables, ref_a, 0.0, 0.0)
    budget = (1 + epsilon) * tables.time_s[:, d].sum()

    static = plan_dvfs(tables, epsilon=epsilon, tau_sw_s=float("inf"))
    spaan = plan_dvfs(tables, epsilon=epsilon, tau_sw_s=0.0, d_min_s=0.0)
    t0 = time.perf_counter()
    ours = plan_dvfs(tables, epsilon=epsilon, tau_sw_s=tau, clock_floor_mhz=0)  # all clocks: the 1 s target
    planner_s = time.perf_counter() - t0
    ours_floor = plan_dvfs(tables, epsilon=epsilon, tau_sw_s=tau)
    if ours_floor.energy_j < ours.energy_j:
        ours = ours_floor
    phase = plan_dvfs(tables, epsilon=epsilon, tau_sw_s=tau, boundaries="phase")
    strategies = [
        _row("default clocks", tables, ref_a, tau, esw, ref),
        _row("best single static clock", tables, static.assignment, tau, esw, ref),
        _row("pass-level clocks (forward / backward)", tables, _pass_level(tables, budget, tau, esw, floor), tau, esw, ref),
        _row("per-kernel, switch cost ignored (Spaan upper bound)", tables, spaan.assignment, 0.0, 0.0, ref),
        _row("per-kernel plan charged the real switch cost", tables, spaan.assignment, tau, esw, ref),
        _row("gridshift plan with switch cost", tables, ours.assignment, tau, esw, ref, method=ours.method, gap=round(ours.gap, 6)),
        _row("gridshift plan with switch cost, phase boundaries (executable)", tables, phase.assignment, tau, esw, ref),
    ]

    # gap to the exact oracle on a reduced instance (one layer, 8 clocks): HiGHS MILP
    oracle_info: dict = {"skipped": "with_oracle=False"}
    try:
        if not with_oracle:
            raise ImportError
        from plans.dvfs import oracle

        picks = np.unique(np.concatenate(([one.default_option], np.flatnonzero(one.sm_clocks_mhz >= floor)[::7])))
        small = one.select(picks)
        tau_small = min(tau, 20e-6)  # a switch cost that makes the small instance non-trivial
        t1 = time.perf_counter()
        res = plan_dvfs(small, epsilon=epsilon, tau_sw_s=tau_small, d_min_s=0.0, clock_floor_mhz=0, method="lagrangian")
        lag_s = time.perf_counter() - t1
        t1 = time.perf_counter()
        E_opt, _ = oracle.milp(small.time_s, small.energy_j, (1 + epsilon) * small.time_s[:, small.default_option].sum(),
                               tau_sw_s=tau_small, eps_sw_j=tau_small * small.idle_power_w, time_limit_s=60)
        milp_s = time.perf_counter() - t1
        auto = plan_dvfs(small, epsilon=epsilon, tau_sw_s=tau_small, d_min_s=0.0, clock_floor_mhz=0)
        oracle_info = {"instance": f"1 layer x {small.n_options} clocks, tau {tau_small * 1e6:.0f} us",
                       "lagrangian_gap_pct": round(100 * (res.energy_j / E_opt - 1), 4),
                       "auto_gap_pct": round(100 * (auto.energy_j / E_opt - 1), 4),
                       "lagrangian_s": round(lag_s, 4), "milp_s": round(milp_s, 4), "milp_over_lagrangian": round(milp_s / max(lag_s, 1e-9), 1)}
    except ImportError:
        if with_oracle:
            oracle_info = {"skipped": "highspy not installed (pip install gridshift[milp])"}

    sweep = []
    for tms in (0.0, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0):
        tt = tms / 1000
        r = plan_dvfs(tables, epsilon=epsilon, tau_sw_s=tt, d_min_s=None if tt > 0 else 0.0)
        E, T, S = _step(tables, r.assignment, tt, tt * tables.idle_power_w)
        Es, Ts, _ = _step(tables, spaan.assignment, tt, tt * tables.idle_power_w)
        sweep.append({"switch_latency_ms": tms, "energy_saving_pct": round(100 * (1 - E / ref[0]), 3),
                      "slowdown_pct": round(100 * (T / ref[1] - 1), 3), "switches_per_iteration": S,
                      "spaan_plan_energy_saving_pct": round(100 * (1 - Es / ref[0]), 3),
                      "spaan_plan_slowdown_pct": round(100 * (Ts / ref[1] - 1), 3), "modelled": True})
    return {
        "profile": str(profile_path), "profile_source": prof.meta.source, "gpu_model": prof.meta.gpu_model,
        "layers": layers, "items": tables.n_items, "clocks": tables.n_options, "epsilon": epsilon,
        "switch_latency_ms": tau_ms, "d_min_ms": 10 * tau_ms, "provenance": tables.provenance(),
        "planner_seconds": round(planner_s, 4), "planner_target_seconds": 1.0,
        "planner_seconds_over_target": round(planner_s / 1.0, 3), "oracle": oracle_info,
        "strategies": strategies, "switch_latency_sweep": sweep,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--epsilon", type=float, default=0.02)
    ap.add_argument("--tau-sw-ms", type=float, default=5.0, help="switch latency (default 5 ms: 'several ms' on A100/H100, gpu-facts 4.6)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = run(args.profile, layers=args.layers, epsilon=args.epsilon, tau_ms=args.tau_sw_ms)
    if args.json:
        print(json.dumps(out))
        return 0
    src = "SYNTHETIC profile" if out["profile_source"] == "synthetic" else "measured profile"
    print(f"{out['profile']} ({src}, {out['gpu_model']}), {out['layers']} layers = {out['items']} items x {out['clocks']} clocks, "
          f"epsilon {100 * out['epsilon']:.1f}%, switch latency {out['switch_latency_ms']} ms, d_min {out['d_min_ms']} ms")
    print("ALL FIGURES MODELLED (analytic per-kernel model, gpu-facts section 5)")
    print(f"{'strategy':66s} {'energy saved':>12s} {'slowdown':>9s} {'switches':>8s}")
    for s in out["strategies"]:
        print(f"{s['name']:66s} {s['energy_saving_pct']:11.2f}% {s['slowdown_pct']:8.2f}% {s['switches_per_iteration']:8d}")
    print(f"planner: {out['planner_seconds']:.3f} s on the full instance ({out['planner_seconds_over_target']:.2f} x the 1 s target)")
    print(f"oracle: {out['oracle']}")
    print("switch-latency sweep (gridshift plan | per-kernel Spaan plan charged the real latency):")
    for r in out["switch_latency_sweep"]:
        print(f"  {r['switch_latency_ms']:6.2f} ms: {r['energy_saving_pct']:6.2f}% saved, {r['slowdown_pct']:6.2f}% slower, "
              f"{r['switches_per_iteration']:5d} switches | {r['spaan_plan_energy_saving_pct']:8.2f}% saved, {r['spaan_plan_slowdown_pct']:8.2f}% slower")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
