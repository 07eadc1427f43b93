"""Step time of the GPT-3-XL-sized layer with vs without the DVFS executor in DRY-RUN mode (no clock changes).

    OUT=/tmp/out PYTHONPATH=. python3 benchmarks/device/executor_overhead.py [--cpu-smoke]

The executor runs a worst-case plan: four segments per step (attn/mlp forward/backward), so every
step asks for four switches, which the dry run counts as DryRunControl calls on the training
thread (never sent to the GPU; a dry run has no worker thread since issue 30's overhead work, so
this measures the training-thread side only: ``benchmarks/integration_overhead.py`` times the
worker's path against a stand-in control). Blocks of 40 steps alternate without/with the executor
(A B A B A B) to cancel drift; each step is timed with torch.cuda.synchronize. Writes
``$OUT/executor_overhead.json`` and a log. Read-only: no NVML setter is ever called.
``--cpu-smoke`` runs a tiny layer on the CPU to exercise the code path (numbers meaningless).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "out"))
OUT.mkdir(parents=True, exist_ok=True)
_lines: list[str] = []


def log(msg: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} {msg}"
    print(line, flush=True)
    _lines.append(line)
    (OUT / "executor_overhead.log").write_text("\n".join(_lines) + "\n")


def _plan():
    from plans.dvfs.plan_file import ClockPlan

    phases = ["attn.forward", "mlp.forward", "mlp.backward", "attn.backward"]
    clocks = [1980, 1410, 1980, 1410]
    segs = [{"start_kernel": i, "start_phase": p, "phase_aligned": True, "sm_clock_mhz": c, "duration_s": 1e-3}
            for i, (p, c) in enumerate(zip(phases, clocks))]
    return ClockPlan.model_validate({
        "gpu_model": "any", "workload_fingerprint": "executor-overhead", "profile_source": "synthetic",
        "provenance": "modelled", "n_kernels": 4,
        "parameters": {"epsilon": 0.0, "tau_sw_s": 0.0, "eps_sw_j": 0.0, "d_min_s": 0.0, "clock_floor_mhz": 0.0,
                       "boundaries": "phase", "method": "handmade"},
        "segments": segs,
        "prediction": {"energy_change_pct": 0.0, "time_change_pct": 0.0, "switches_per_iteration": 4, "energy_j": 1.0,
                       "reference_energy_j": 1.0, "time_s": 1.0, "reference_time_s": 1.0, "gap": 0.0},
    })


def main() -> int:
    cpu_smoke = "--cpu-smoke" in sys.argv
    try:
        import torch
    except ImportError:
        log("torch is not installed: nothing to measure")
        (OUT / "executor_overhead.json").write_text(json.dumps({"skipped": "torch not installed"}) + "\n")
        return 0
    if not torch.cuda.is_available() and not cpu_smoke:
        log("no CUDA GPU visible: nothing to measure (use --cpu-smoke to exercise the code path)")
        (OUT / "executor_overhead.json").write_text(json.dumps({"skipped": "no CUDA GPU"}) + "\n")
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _layer import build_layer_step

    from plans.dvfs.executor import PlanExecutor, attach_to_modules

    device = "cpu" if cpu_smoke else "cuda"
    dims = dict(d_model=64, heads=4, seq=32, batch=2) if cpu_smoke else {}
    step, shape, modules = build_layer_step(torch, device=device, label=False, **dims)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    steps_per_block, blocks = (5, 2) if cpu_smoke else (40, 3)
    for _ in range(5):
        step()
    sync()

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            sync()
            out.append(time.perf_counter() - t0)
        return out

    without: list[float] = []
    with_ex: list[float] = []
    calls = 0
    stats = None
    for _ in range(blocks):
        without += timed(steps_per_block)
        ex = PlanExecutor(_plan(), dry_run=True, min_interval_s=0.0)
        handles = attach_to_modules(ex, modules)
        with ex:
            with_ex += timed(steps_per_block)
            ex.flush()
        for hd in handles:
            hd.remove()
        calls += ex.control.n_calls  # type: ignore[attr-defined]
        stats = ex.stats
    a, b = statistics.median(without), statistics.median(with_ex)
    result = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke test, numbers meaningless)",
        "shape": shape, "steps_each": len(without), "median_step_s_without": a, "median_step_s_with_dry_run_executor": b,
        "overhead_pct": 100 * (b / a - 1), "mean_step_s_without": statistics.fmean(without),
        "mean_step_s_with": statistics.fmean(with_ex), "dry_run_calls_recorded": calls,
        "switch_requests_per_step": 4, "last_block_stats": stats.__dict__ if stats else None,
        "clock_changed": False, "measured": device == "cuda",
    }
    (OUT / "executor_overhead.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"median step {1000 * a:.3f} ms without, {1000 * b:.3f} ms with the dry-run executor: "
        f"{result['overhead_pct']:+.2f}% ({calls} dry-run calls recorded, no clock changed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
