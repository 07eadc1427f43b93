"""gridshift's energy meter on a real PyTorch training loop, checked against direct NVML reads.

    PYTHONPATH=. OUT=/tmp/out python3 benchmarks/device/metering_check.py

What it does (read-only NVML: no limit, clock, mode or MIG is changed; the backend's apply is
never called and its journal replay is off):

1. Agreement. An MLP (bf16 autocast, AdamW, random data) trains for ``--agreement-s`` seconds
   inside one gridshift meter window (NvidiaBackend.meter, with the background power sampler
   running). Immediately outside that window, an independent reader calls
   ``pynvml.nvmlDeviceGetTotalEnergyConsumption`` directly. Reported: gridshift J, direct J,
   relative difference (target |diff| < 1 %), the sampler's power x time integral, and five
   nested 1/5 windows to show counter-quantisation spread.
2. Overhead. Median step time over ``--reps`` interleaved repetitions of ``--steps`` steps for:
   baseline (no metering), sampler at 100 ms, sampler at 10 ms, one meter window per 50 steps,
   and one window per step (worst case). Ratios are against the baseline measured in the same run.

Writes ``$OUT/metering_check.json`` and ``$OUT/metering_check.log``. Without a CUDA GPU it writes a
"skipped" record and exits 0; with ``GRIDSHIFT_NVML_MODULE=tests.fakes.fake_nvml`` it runs the
whole path on CPU against the fake NVML (a smoke test; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

OUT = Path(os.environ.get("OUT", "."))
_log_lines: list[str] = []


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    _log_lines.append(line)


def finish(result: dict[str, Any]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "metering_check.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    (OUT / "metering_check.log").write_text("\n".join(_log_lines) + "\n")
    log(f"wrote {OUT / 'metering_check.json'}")
    return 0


def build(torch: Any, device: str, width: int, depth: int, batch: int) -> tuple[Callable[[], None], Callable[[], None]]:
    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 16)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 16, (batch,), device=device)
    dtype = torch.bfloat16

    def step() -> None:
        with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return step, sync


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agreement-s", type=float, default=25.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8192)
    args = ap.parse_args()
    result: dict[str, Any] = {"script": "benchmarks/device/metering_check.py", "args": vars(args),
                              "read_only": True, "python": sys.version.split()[0]}
    try:
        import torch
    except ImportError:
        log("torch is not installed: skipped")
        return finish({**result, "skipped": "torch not installed"})
    fake = os.environ.get("GRIDSHIFT_NVML_MODULE")
    cuda = torch.cuda.is_available()
    if not cuda and not fake:
        log("no CUDA GPU visible: nothing to measure (set GRIDSHIFT_NVML_MODULE=tests.fakes.fake_nvml for a CPU smoke test)")
        return finish({**result, "skipped": "no CUDA GPU"})
    device = "cuda:0" if cuda else "cpu"
    result.update(torch=torch.__version__, device=device, fake_nvml=bool(fake))

    from backends.errors import BackendError
    from backends.nvidia import NvidiaBackend
    from backends.nvidia._nvml import load_nvml_module

    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    backend = NvidiaBackend(env={"CUDA_VISIBLE_DEVICES": first}, recover=False, per_rank=False)
    try:
        caps = backend.capabilities()
        dev = backend.devices[0]
    except BackendError as exc:
        log(f"NVML unavailable: {exc}")
        return finish({**result, "skipped": f"NVML unavailable: {exc}"})
    status = backend.status()["devices"][0]
    result["gpu"] = {"name": dev.name, "uuid": dev.uuid, "nvml_index": dev.index,
                     "power_limit_w": status["power_limit_w"], "energy_counter": caps.energy_counter,
                     "torch_name": torch.cuda.get_device_name(0) if cuda else "cpu"}
    log(f"GPU {dev.index} {dev.name} {dev.uuid}, power limit {status['power_limit_w']} W (read only)")

    nv = load_nvml_module()  # the independent reader: direct binding calls, no gridshift code
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByUUID(dev.uuid)

    def direct_mj() -> int:
        return nv.nvmlDeviceGetTotalEnergyConsumption(handle)

    t_read = time.perf_counter()
    for _ in range(50):
        direct_mj()
    result["nvml_energy_read_ms"] = (time.perf_counter() - t_read) / 50 * 1000

    smoke = not cuda
    width, batch = (256, 512) if smoke else (args.width, args.batch)
    agreement_s = min(args.agreement_s, 3.0) if smoke else args.agreement_s
    steps = min(args.steps, 10) if smoke else args.steps
    reps = min(args.reps, 2) if smoke else args.reps
    step, sync = build(torch, device, width, args.depth, batch)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < (0.5 if smoke else 3.0):  # warm-up: kernels, allocator, clocks
        step()
    sync()

    # -- 1. agreement --------------------------------------------------------------------------
    sampler = backend.sampler(interval_s=0.1)
    meter = backend.meter(sampler=sampler)
    sampler.start()
    sync()
    d0 = direct_mj()
    meter.begin("train")
    n = 0
    part = 0
    part_len = agreement_s / 5
    start = time.perf_counter()
    meter.begin("part-0")
    while True:
        step()
        n += 1
        if n % 10 == 0:
            elapsed = time.perf_counter() - start
            if elapsed >= (part + 1) * part_len:
                sync()
                meter.end(f"part-{part}")
                part += 1
                if part == 5:
                    break
                meter.begin(f"part-{part}")
    window = meter.end("train")
    d1 = direct_mj()
    sampler.stop()
    direct_j = (d1 - d0) / 1000.0
    sampled_j = sampler.energy_j(window.start_s, window.end_s)
    parts = [w for w in meter.windows if w.name.startswith("part-")]
    rel = window.energy_j / direct_j - 1.0 if direct_j > 0 else None
    result["agreement"] = {
        "window_s": window.duration_s, "steps": n,
        "gridshift_j": window.energy_j, "direct_nvml_j": direct_j, "relative_diff": rel,
        "within_1pct": rel is not None and abs(rel) < 0.01,
        "mean_power_w": window.mean_power_w,
        "sampler_power_x_time_j": sampled_j,
        "sampler_vs_counter": (sampled_j / window.energy_j - 1.0) if sampled_j and window.energy_j else None,
        "sampler_samples": len(sampler.timeline), "sampler_errors": sampler.errors,
        "parts_j": [w.energy_j for w in parts], "parts_sum_vs_window": sum(w.energy_j for w in parts) / window.energy_j - 1.0
        if window.energy_j else None,
        "approximate": window.approximate, "note": window.note,
    }
    log(f"agreement: gridshift {window.energy_j:.1f} J vs direct NVML {direct_j:.1f} J over {window.duration_s:.1f} s "
        f"({n} steps, {window.mean_power_w:.0f} W): diff {100 * (rel or 0):+.3f} %; sampler P x t {sampled_j or 0:.1f} J")

    # -- 2. overhead ---------------------------------------------------------------------------
    def run_steps(per_step: Callable[[int], None] | None) -> float:
        sync()
        t = time.perf_counter()
        for i in range(steps):
            step()
            if per_step is not None:
                per_step(i)
        sync()
        return (time.perf_counter() - t) / steps

    def with_sampler(interval_s: float) -> Callable[[], float]:
        def go() -> float:
            s = backend.sampler(interval_s=interval_s).start()
            try:
                return run_steps(None)
            finally:
                s.stop()
        return go

    def windows_every(k: int) -> Callable[[], float]:
        def go() -> float:
            m = backend.meter()
            m.begin("w-0")

            def per_step(i: int) -> None:
                if (i + 1) % k == 0:
                    m.end(f"w-{i // k}")
                    m.begin(f"w-{i // k + 1}")
            try:
                return run_steps(per_step)
            finally:
                m.end(next(iter(m._begun)))
        return go

    configs: dict[str, Callable[[], float]] = {
        "baseline": lambda: run_steps(None),
        "sampler_100ms": with_sampler(0.1),
        "sampler_10ms": with_sampler(0.01),
        "window_per_50_steps": windows_every(50),
        "window_per_step": windows_every(1),
    }
    times: dict[str, list[float]] = {k: [] for k in configs}
    names = list(configs)
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]  # rotate to spread drift
        for name in order:
            times[name].append(configs[name]())
    base = statistics.median(times["baseline"])
    result["overhead"] = {
        name: {"median_step_s": statistics.median(v), "ratio_vs_baseline": statistics.median(v) / base,
               "step_s": v}
        for name, v in times.items()
    }
    for name, v in result["overhead"].items():
        log(f"overhead {name:<20} median step {v['median_step_s'] * 1000:8.3f} ms  ratio {v['ratio_vs_baseline']:.4f}")
    nv.nvmlShutdown()
    backend.close()
    return finish(result)


if __name__ == "__main__":
    raise SystemExit(main())
