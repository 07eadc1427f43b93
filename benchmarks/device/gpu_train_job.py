"""A real GPU training job for measured runs: an MLP in bf16 with AdamW for ``--seconds`` seconds.

Prints progress once per second and writes its fraction done to ``GRIDSHIFT_PROGRESS_FILE`` when
gridshift sets it. Run it under ``gridshift run POLICY -- python3 benchmarks/device/gpu_train_job.py``;
any real training script works the same way.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--width", type=int, default=4096)
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch = int(os.environ.get("GRIDSHIFT_BATCH_SIZE", "8192" if device == "cuda" else "64"))
    width = args.width if device == "cuda" else 256
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU()) for _ in range(4)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    progress_file = os.environ.get("GRIDSHIFT_PROGRESS_FILE")
    start = time.monotonic()
    last = start
    steps = 0
    while (elapsed := time.monotonic() - start) < args.seconds:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        if time.monotonic() - last >= 1.0:
            if device == "cuda":
                torch.cuda.synchronize()
            last = time.monotonic()
            print(f"step {steps} loss={loss.item():.4f} elapsed={elapsed:.1f}s mode={os.environ.get('GRIDSHIFT_MODE', '-')}", flush=True)
            if progress_file:
                with open(progress_file, "a") as f:
                    f.write(f"{min(elapsed / args.seconds, 1.0):.4f}\n")
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"done: {steps} steps in {time.monotonic() - start:.1f} s on {device}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
