"""Batch-size sweep on a real GPU: energy per sample and time per sample of real training steps.

    OUT=/tmp/out PYTHONPATH=. python3 benchmarks/device/batch_size_sweep.py

Models (bf16 autocast, AdamW, forward + backward + optimiser step):
  - ``transformer``: a GPT-style stack of 4 pre-norm layers (d=2048, 16 heads, FFN 8192, seq 1024)
  - ``cnn``: a ResNet-ish CNN on 3x224x224 images (channels_last)
Each batch size is warmed up, then timed over a window of at least ``--window-s`` seconds (>= 2 s
beats the NVML energy counter's ~100 ms update period), bracketed by ``torch.cuda.synchronize``.
Energy comes from ``nvmlDeviceGetTotalEnergyConsumption`` (mJ) deltas; power and SM clock are
sampled once per step for context. An idle window with the CUDA context alive is measured first.

Safety: read-only NVML calls only (no clocks, power limits, persistence or compute mode, MIG or
resets are touched). A global time budget (default 130 s) skips the remaining sizes when reached.
Writes ``$OUT/batch_size_sweep.json`` and ``$OUT/batch_size_sweep.log``. Without a GPU (or without
pynvml) it says so; ``--cpu-smoke`` then runs a tiny model on the CPU to check the script itself
(times only, no energy, nothing to report).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

LOG: list[str] = []


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    LOG.append(line)


class Nvml:
    """Read-only NVML: energy counter (mJ), power (mW), SM clock (MHz), power limit (mW), names."""

    def __init__(self, index: int) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.h = pynvml.nvmlDeviceGetHandleByIndex(index)

    def energy_mj(self) -> int:
        return int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h))

    def power_w(self) -> float:
        return self.nv.nvmlDeviceGetPowerUsage(self.h) / 1000.0

    def sm_clock_mhz(self) -> int:
        return int(self.nv.nvmlDeviceGetClockInfo(self.h, self.nv.NVML_CLOCK_SM))

    def info(self) -> dict[str, object]:
        nv, h = self.nv, self.h
        name = nv.nvmlDeviceGetName(h)
        return {
            "name": name.decode() if isinstance(name, bytes) else name,
            "driver": (lambda d: d.decode() if isinstance(d, bytes) else d)(nv.nvmlSystemGetDriverVersion()),
            "power_limit_w": nv.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
            "power_limit_range_w": [x / 1000.0 for x in nv.nvmlDeviceGetPowerManagementLimitConstraints(h)],
        }

    def close(self) -> None:
        self.nv.nvmlShutdown()


def build(kind: str, torch, device: str, tiny: bool):
    nn = torch.nn
    if kind == "transformer":
        d, heads, ffn, layers, seq = (2048, 16, 8192, 4, 1024) if not tiny else (64, 4, 128, 1, 16)

        class GPTBlockStack(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.blocks = nn.ModuleList(
                    nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
                    for _ in range(layers)
                )
                self.head = nn.Linear(d, d)

            def forward(self, x):
                mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
                for blk in self.blocks:
                    x = blk(x, src_mask=mask, is_causal=True)
                return self.head(x)

        model = GPTBlockStack().to(device)

        def batch(b: int):
            return torch.randn(b, seq, d, device=device), None

        def loss_fn(out, _):
            return out.float().pow(2).mean()

        return model, batch, loss_fn, {"d_model": d, "heads": heads, "ffn": ffn, "layers": layers, "seq_len": seq}
    # ResNet-ish CNN
    width, res = (64, 224) if not tiny else (8, 32)

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )

    model = nn.Sequential(
        nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
        block(width, width, 1), block(width, 2 * width, 2), block(2 * width, 4 * width, 2), block(4 * width, 8 * width, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * width, 1000),
    ).to(device)
    if device == "cuda":
        model = model.to(memory_format=torch.channels_last)

    def batch(b: int):
        x = torch.randn(b, 3, res, res, device=device)
        if device == "cuda":
            x = x.to(memory_format=torch.channels_last)
        return x, torch.randint(0, 1000, (b,), device=device)

    def loss_fn(out, y):
        return nn.functional.cross_entropy(out.float(), y)

    return model, batch, loss_fn, {"width": width, "resolution": res}


def sweep(kind: str, sizes: list[int], *, torch, device: str, nvml: Nvml | None, window_s: float, deadline: float, tiny: bool) -> dict:
    model, make_batch, loss_fn, shape = build(kind, torch, device, tiny)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = torch.bfloat16
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    results = []

    def step(x, y) -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype):
            out = model(x)
        loss_fn(out, y).backward()
        opt.step()

    for b in sizes:
        if time.monotonic() > deadline:
            log(f"{kind}: time budget reached; skipping batch size {b} and larger")
            break
        try:
            x, y = make_batch(b)
            for _ in range(3):  # warm-up: kernels selected, allocator settled
                step(x, y)
            sync()
            steps, powers, clocks = 0, [], []
            e0 = nvml.energy_mj() if nvml else None
            t0 = time.perf_counter()
            while True:
                step(x, y)
                steps += 1
                if nvml and steps % 2 == 0:
                    powers.append(nvml.power_w())
                    clocks.append(nvml.sm_clock_mhz())
                if time.perf_counter() - t0 >= window_s and steps >= 3:
                    sync()
                    if time.perf_counter() - t0 >= window_s:
                        break
            t1 = time.perf_counter()
            e1 = nvml.energy_mj() if nvml else None
        except RuntimeError as exc:  # out of memory and friends: record and stop growing
            log(f"{kind}: batch size {b} failed: {str(exc).splitlines()[0]}")
            if device == "cuda":
                torch.cuda.empty_cache()
            results.append({"batch_size": b, "error": str(exc).splitlines()[0]})
            break
        dt = t1 - t0
        energy_j = (e1 - e0) / 1000.0 if e0 is not None else None
        samples = steps * b
        row = {
            "batch_size": b,
            "steps": steps,
            "window_s": dt,
            "time_per_step_s": dt / steps,
            "time_per_sample_s": dt / samples,
            "samples_per_s": samples / dt,
            "energy_j": energy_j,
            "energy_per_sample_j": energy_j / samples if energy_j is not None else None,
            "avg_power_w": energy_j / dt if energy_j is not None else None,
            "median_sampled_power_w": statistics.median(powers) if powers else None,
            "median_sm_clock_mhz": statistics.median(clocks) if clocks else None,
            "measured": energy_j is not None,
        }
        results.append(row)
        log(
            f"{kind}: B={b:4d} steps={steps:4d} {dt:5.2f}s  {row['time_per_sample_s'] * 1e3:8.3f} ms/sample  "
            + (f"{row['energy_per_sample_j']:8.3f} J/sample  {row['avg_power_w']:6.1f} W" if energy_j is not None else "(no energy: no NVML)")
        )
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"model": kind, "shape": shape, "dtype": "bfloat16 autocast", "optimizer": "AdamW", "results": results}


def main() -> int:
    ap = argparse.ArgumentParser(description="Batch-size sweep of energy and time per sample (read-only NVML).")
    ap.add_argument("--models", default="transformer,cnn")
    ap.add_argument("--transformer-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--cnn-sizes", default="8,16,32,64,128,256,512")
    ap.add_argument("--window-s", type=float, default=2.5)
    ap.add_argument("--budget-s", type=float, default=130.0)
    ap.add_argument("--gpu-index", type=int, default=0)
    ap.add_argument("--cpu-smoke", action="store_true", help="no GPU: run a tiny model on the CPU to test the script")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    deadline = start + args.budget_s
    try:
        import torch
    except ImportError:
        log("torch is not installed: nothing to measure")
        return 2
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        log("no CUDA GPU found: this script measures a real GPU (use --cpu-smoke to test it on a CPU)")
        return 2
    nvml = None
    gpu: dict[str, object] = {}
    if cuda:
        try:
            nvml = Nvml(args.gpu_index)
            gpu = nvml.info()
        except Exception as exc:  # no pynvml or NVML failure: times only
            log(f"NVML unavailable ({exc}): energy will not be measured")
        torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda" if cuda else "cpu"
    tiny = not cuda
    log(f"device: {gpu.get('name', device)}; torch {torch.__version__}; window {args.window_s} s; budget {args.budget_s} s")

    idle = None
    if nvml:
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        e0, t0 = nvml.energy_mj(), time.perf_counter()
        time.sleep(2.0)
        e1, t1 = nvml.energy_mj(), time.perf_counter()
        idle = {"window_s": t1 - t0, "energy_j": (e1 - e0) / 1000.0, "avg_power_w": (e1 - e0) / 1000.0 / (t1 - t0)}
        log(f"idle with a CUDA context: {idle['avg_power_w']:.1f} W")

    runs = []
    for kind in [m.strip() for m in args.models.split(",") if m.strip()]:
        sizes = [int(s) for s in (args.transformer_sizes if kind == "transformer" else args.cnn_sizes).split(",")]
        if tiny:
            sizes = sizes[:2]
        runs.append(sweep(kind, sizes, torch=torch, device=device, nvml=nvml, window_s=args.window_s if not tiny else 0.2, deadline=deadline, tiny=tiny))
    report = {
        "script": "benchmarks/device/batch_size_sweep.py",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "gpu": gpu,
        "torch": torch.__version__,
        "measured": nvml is not None,
        "smoke_test_only": tiny,
        "idle": idle,
        "window_s": args.window_s,
        "sweeps": runs,
        "total_s": time.monotonic() - start,
        "note": "energy from the NVML total-energy counter (mJ) over windows >= window_s; read-only NVML only",
    }
    (out_dir / "batch_size_sweep.json").write_text(json.dumps(report, indent=1))
    (out_dir / "batch_size_sweep.log").write_text("\n".join(LOG) + "\n")
    log(f"wrote {out_dir / 'batch_size_sweep.json'} in {report['total_s']:.1f} s")
    if nvml:
        nvml.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
