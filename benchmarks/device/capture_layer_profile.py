"""Capture a real kernel profile of one GPT-3-XL-sized layer step on the GPU (READ-ONLY: changes no setting).

    OUT=/tmp/out PYTHONPATH=. python3 benchmarks/device/capture_layer_profile.py

What it does (< 2 minutes):
1. builds the layer (d_model 2048, 16 heads, seq 2048, batch 4, bf16 autocast, fwd+bwd+AdamW), warms up;
2. reads NVML read-only: GPU name, driver, supported memory clocks, supported SM clocks for the
   memory clock in use, power limit, idle power with a live context (energy counter, 2 s);
3. measures step power and time over a >= 4 s window with the NVML energy counter, sampling the
   SM clock every 50 ms (the power cap shows up as a clock below 1980 MHz);
4. captures 2 steps with torch.profiler (kernel names, durations, streams, order, record_function
   phases) and writes ``$OUT/h200_gpt3xl_layer_profile.json`` (gridshift profile format, source
   measured) plus ``$OUT/capture_layer_profile.json`` (summary + the modelled DVFS strategies of
   benchmarks/dvfs.py on the new profile) and ``$OUT/capture_layer_profile.log``.

Never calls an NVML setter, never resets the GPU. Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

OUT = Path(os.environ.get("OUT", "out"))
OUT.mkdir(parents=True, exist_ok=True)
_log_lines: list[str] = []


def log(msg: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} {msg}"
    print(line, flush=True)
    _log_lines.append(line)
    (OUT / "capture_layer_profile.log").write_text("\n".join(_log_lines) + "\n")


def write(name: str, payload: dict) -> None:
    (OUT / name).write_text(json.dumps(payload, indent=1) + "\n")


def nvml_reader():
    """Read-only NVML helpers; None when NVML is unavailable."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - report and carry on without NVML
        log(f"NVML unavailable ({exc}); power and clocks will be missing")
        return None
    return nv


def main() -> int:
    try:
        import torch
    except ImportError:
        log("torch is not installed: nothing to capture")
        write("capture_layer_profile.json", {"skipped": "torch not installed"})
        return 0
    if not torch.cuda.is_available():
        log("no CUDA GPU visible: the capture needs one (this is expected on CPU-only machines)")
        write("capture_layer_profile.json", {"skipped": "no CUDA GPU"})
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _layer import build_layer_step

    from plans.dvfs.profiles.capture import capture_steps
    from plans.dvfs.profiles.kernel_profile import ProfileMeta, save_profile, workload_fingerprint

    t_start = time.monotonic()
    step, shape, _ = build_layer_step(torch)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    log(f"layer built and warmed up on {torch.cuda.get_device_name(0)}")

    nv = nvml_reader()
    info: dict = {}
    if nv is not None:
        h = nv.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        name = nv.nvmlDeviceGetName(h)
        info["gpu_model"] = name.decode() if isinstance(name, bytes) else name
        drv = nv.nvmlSystemGetDriverVersion()
        info["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        info["mem_clocks_mhz"] = sorted(int(c) for c in nv.nvmlDeviceGetSupportedMemoryClocks(h))
        mem_now = int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
        mem_for_table = mem_now if mem_now in info["mem_clocks_mhz"] else max(info["mem_clocks_mhz"])
        info["mem_clock_now_mhz"] = mem_now
        info["sm_clocks_mhz"] = sorted(int(c) for c in nv.nvmlDeviceGetSupportedGraphicsClocks(h, mem_for_table))
        info["power_limit_w"] = nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        # idle power with this process's context alive
        torch.cuda.synchronize()
        e0, t0 = nv.nvmlDeviceGetTotalEnergyConsumption(h), time.monotonic()
        time.sleep(2.0)
        e1, t1 = nv.nvmlDeviceGetTotalEnergyConsumption(h), time.monotonic()
        info["idle_power_w"] = (e1 - e0) / 1000.0 / (t1 - t0)
        log(f"NVML: {info['gpu_model']} driver {info['driver']}, {len(info['sm_clocks_mhz'])} SM clocks "
            f"{info['sm_clocks_mhz'][0]}-{info['sm_clocks_mhz'][-1]} MHz, memory {info['mem_clocks_mhz']}, "
            f"limit {info['power_limit_w']:.0f} W, idle {info['idle_power_w']:.0f} W")

        # step power over a >= 4 s window, SM clock sampled every 50 ms
        clocks: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                clocks.append(int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))
                stop.wait(0.05)

        th = threading.Thread(target=sample, daemon=True)
        torch.cuda.synchronize()
        e0, t0 = nv.nvmlDeviceGetTotalEnergyConsumption(h), time.monotonic()
        th.start()
        steps = 0
        while time.monotonic() - t0 < 4.0:
            for _ in range(10):
                step()
            steps += 10
            torch.cuda.synchronize()
        t1 = time.monotonic()
        e1 = nv.nvmlDeviceGetTotalEnergyConsumption(h)
        stop.set()
        th.join()
        info["step_power_w"] = (e1 - e0) / 1000.0 / (t1 - t0)
        info["step_power_window_s"] = t1 - t0
        info["step_time_s"] = (t1 - t0) / steps
        info["sm_clock_under_load_mhz"] = {"median": statistics.median(clocks), "min": min(clocks), "max": max(clocks),
                                           "samples": len(clocks)}
        log(f"step power {info['step_power_w']:.0f} W over {t1 - t0:.1f} s ({steps} steps, "
            f"{1000 * info['step_time_s']:.2f} ms/step), SM clock median {info['sm_clock_under_load_mhz']['median']} MHz")
    sm = info.get("sm_clocks_mhz") or list(range(345, 1981, 15))
    meta = ProfileMeta(
        gpu_model=info.get("gpu_model", torch.cuda.get_device_name(0)), driver=info.get("driver", ""),
        workload="GPT-3-XL-sized layer step (d=2048, 16 heads, seq 2048, batch 4, bf16 autocast, fwd+bwd+AdamW)",
        workload_fingerprint=workload_fingerprint(**shape), source="measured", sm_clocks_mhz=tuple(sm),
        mem_clocks_mhz=tuple(info.get("mem_clocks_mhz", ())), default_sm_clock_mhz=max(sm),
        default_mem_clock_mhz=info.get("mem_clock_now_mhz"), power_limit_w=info.get("power_limit_w"),
        idle_power_w=info.get("idle_power_w"), step_power_w=info.get("step_power_w"),
        step_power_window_s=info.get("step_power_window_s"), step_time_s=info.get("step_time_s"),
        captured_at=datetime.now(timezone.utc).isoformat(), torch_version=torch.__version__,
        note="captured read-only by benchmarks/device/capture_layer_profile.py; durations at the default (uncapped-lock) clocks",
    )
    prof = capture_steps(step, meta=meta, warmup=2, iterations=2)
    path = save_profile(prof, OUT / "h200_gpt3xl_layer_profile.json")
    ks = prof.iteration_kernels()
    log(f"profile: {len(ks)} GPU activities per iteration, {sum(k.duration_us for k in ks) / 1000:.2f} ms kernel time, "
        f"phases {list(prof.phases())} -> {path}")

    summary = {"profile": str(path.name), "kernels_per_iteration": len(ks),
               "kernel_time_ms": sum(k.duration_us for k in ks) / 1000, "streams": sorted({k.stream for k in ks}),
               "phases": {p: sum(1 for k in ks if k.phase == p) for p in prof.phases()}, "nvml": info,
               "measured": True, "wall_s": None}
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from dvfs import run as dvfs_run

        summary["dvfs_modelled"] = dvfs_run(path, layers=24, epsilon=0.02, tau_ms=5.0)
    except Exception as exc:  # noqa: BLE001 - the capture is the deliverable; the model run is a bonus
        summary["dvfs_modelled"] = {"error": f"{type(exc).__name__}: {exc}"}
    summary["wall_s"] = time.monotonic() - t_start
    write("capture_layer_profile.json", summary)
    log(f"done in {summary['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
