"""Hand-made clock plans for tests: one phase-aligned segment per phase, with a modelled prediction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from plans.dvfs.plan_file import ClockPlan

PHASES = ("layer0.forward", "layer0.backward", "optimizer")


def make_plan(clocks_mhz: Sequence[int], *, phases: Sequence[str] = PHASES, gpu_model: str = "NVIDIA H200",
              energy_change_pct: float = -5.0, time_change_pct: float = 1.0) -> ClockPlan:
    segs = [{"start_kernel": 10 * i, "start_phase": p, "phase_aligned": True, "sm_clock_mhz": int(f), "duration_s": 1e-3}
            for i, (p, f) in enumerate(zip(phases, clocks_mhz))]
    return ClockPlan.model_validate({
        "gpu_model": gpu_model, "workload_fingerprint": "test", "profile_source": "synthetic",
        "provenance": "modelled", "n_kernels": 10 * len(segs),
        "parameters": {"epsilon": 0.05, "tau_sw_s": 0.0, "eps_sw_j": 0.0, "d_min_s": 0.0, "clock_floor_mhz": 0.0,
                       "boundaries": "phase", "method": "exact"},
        "segments": segs,
        "prediction": {"energy_change_pct": energy_change_pct, "time_change_pct": time_change_pct,
                       "switches_per_iteration": len(segs) - 1, "energy_j": 3.8, "reference_energy_j": 4.0,
                       "time_s": 6.5e-3, "reference_time_s": 6.4e-3, "gap": 0.0},
    })


def write_plan(path: Path, plan: ClockPlan) -> Path:
    path.write_text(json.dumps(plan.model_dump(mode="json"), indent=1))
    return path
