"""A DDP training job for the multi-GPU check: a stack of transformer blocks in bf16, one rank per GPU.

    torchrun --standalone --nproc-per-node 2 benchmarks/device/ddp_job.py --seconds 20

Each rank trains on its own GPU (``LOCAL_RANK``; gloo on CPU when there is no GPU, so the rank
logic runs anywhere). Rank 0 prints one ``STEPSTATS {json}`` line at the end: the median step time
over the timed steps (after warm-up) of the slowest rank, which is what the overhead comparison
reads. ``--profile-dir`` runs the power-limit profiling pass of :class:`plans.integrations.power_limit.PowerLimitCallback`
on every rank, its measurements combined across ranks with ``torch.distributed``; on a read-only
GPU (``GRIDSHIFT_NVML_READ_ONLY=1``) the limits are not applied, the windows are still measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0, help="train this long (after warm-up)")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--profile-dir", default="", help="run the power-limit profiling pass, store the profile here")
    args = parser.parse_args()
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if "RANK" in os.environ:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    width, layers, batch, seq = (args.width, args.layers, args.batch, args.seq) if cuda else (64, 2, 2, 16)
    block = lambda: torch.nn.TransformerEncoderLayer(width, nhead=max(width // 128, 1), dim_feedforward=4 * width,
                                                     batch_first=True, norm_first=True)
    model = torch.nn.Sequential(*[block() for _ in range(layers)]).to(device)
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, width, device=device)

    callback = None
    if args.profile_dir:
        callback = _profiling_callback(args.profile_dir, world)

    def step() -> None:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(args.warmup_steps):
        step()
    times: list[float] = []
    start = time.monotonic()
    epoch_steps = 0
    while time.monotonic() - start < args.seconds:
        if callback is not None:
            callback.on_step_begin()
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t)
        if callback is not None:
            callback.on_step_end()
            epoch_steps += 1
            if epoch_steps == 200:  # a short "epoch" so the profiler sees epoch boundaries
                callback.on_epoch_end()
                epoch_steps = 0
    median = statistics.median(times) if times else 0.0
    if dist.is_initialized():
        t = torch.tensor([median], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        median = float(t.item())
    if rank == 0:
        stats = {"world_size": world, "steps": len(times), "median_step_s": median, "device": device.type}
        if callback is not None:
            stats["profile"] = [m.__dict__ if hasattr(m, "__dict__") else str(m) for m in callback.profile]
            stats["profile_done"] = callback.done
        print("STEPSTATS " + json.dumps(stats, default=str), flush=True)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


def _profiling_callback(profile_dir: str, world: int):  # noqa: ANN202 - a PowerLimitCallback
    """The callback as a job builds it, with rank combination over torch.distributed."""
    from backends.registry import create_backend
    from plans.integrations.power_limit import PowerLimitCallback
    from plans.power_limit import PowerLimitProfiler
    from plans.profile_store import ProfileStore
    from plans.selectors import ZeusCost

    backend = create_backend(os.environ.get("GRIDSHIFT_BACKEND", "auto"))
    caps = backend.capabilities()
    lo, hi = caps.power_limit_range_w or (100.0, 300.0)
    limits = sorted({hi, hi - (hi - lo) / 4, hi - (hi - lo) / 2})
    cb = PowerLimitCallback(backend, PowerLimitProfiler(limits, ZeusCost(0.5)), meter=backend.meter(),
                            store=ProfileStore(profile_dir), gpu_model=caps.devices[0].name if caps.devices else "",
                            fingerprint="ddp-check")
    combined = cb.use_torch_distributed()  # windows all-reduced across ranks; rank 0 stores the profile
    assert combined or world == 1, "ranks were not combined"
    return cb


if __name__ == "__main__":
    raise SystemExit(main())
