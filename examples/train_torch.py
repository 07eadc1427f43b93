"""A small PyTorch loop that follows gridshift's plan with one object (CPU or GPU, seconds; torchrun too).

``plans.integrations.torch_loop.TrainingLoop`` does gridshift's whole job protocol: the mode's clock
plan (phases hooked on the model and optimizer, swapped at a mode change), the batch size (taken at
every epoch boundary and acknowledged), progress, the outcome, and, for a pausable job, a checkpoint
on SIGTERM and the resume from it (``GRIDSHIFT_RESUME=1``). Under ``torchrun`` the ranks train a
DistributedDataParallel model (gloo on CPU, NCCL on GPUs), every rank follows the mode and rank 0
alone writes gridshift's files. Under ``GRIDSHIFT_NVML_READ_ONLY=1`` clock calls are a dry run.

    python examples/train_torch.py --epochs 5
    torchrun --standalone --nproc-per-node 2 examples/train_torch.py --epochs 5

``--step-overhead-s`` stands in for an accelerator's step time on a CPU run.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

from plans.integrations.torch_loop import TrainingLoop

FEATURES = 32


def batch(step: int, size: int, true_w: torch.Tensor, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of ``step`` (the same after a resume); each rank draws its own part."""
    g = torch.Generator().manual_seed(step * 1_000 + int(os.environ.get("RANK", "0")))
    x = torch.randn(size, FEATURES, generator=g).to(device)
    return x, x @ true_w


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--steps-per-epoch", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=64, help="unless gridshift names one")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--mode-poll-s", type=float, default=1.0, help="how often to look for a mode change")
    p.add_argument("--step-overhead-s", type=float, default=0.0, help="idle time per step (accelerator stand-in)")
    args = p.parse_args(argv)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
    if distributed:
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(FEATURES, args.width), torch.nn.ReLU(),
                                                 torch.nn.Linear(args.width, 1)).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    true_w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(1)).to(device)
    total = args.epochs * args.steps_per_epoch
    loss = torch.tensor(float("nan"))
    rank = int(os.environ.get("RANK", "0"))
    try:
        with TrainingLoop(model, optimizer, total_steps=total, batch_size=args.batch_size,
                          poll_interval_s=args.mode_poll_s) as loop:
            if loop.resumed_from is not None:
                print(f"rank {rank}: resumed from {loop.resumed_from.name} at step {loop.step}", flush=True)
            while loop.step < total:
                epoch = loop.step // args.steps_per_epoch
                batch_size = loop.epoch_boundary(epoch)
                for _ in range(loop.step % args.steps_per_epoch, args.steps_per_epoch):
                    x, y = batch(loop.step, batch_size, true_w, device)
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if args.step_overhead_s:
                        time.sleep(args.step_overhead_s)
                    loop.step_done()
                writes = "yes" if loop.session.job.result_file is not None else "no"  # rank 0 alone
                print(f"rank {rank}: epoch {epoch + 1}/{args.epochs} step {loop.step} loss={loss.item():.4f} "
                      f"batch_size={batch_size} clock_plan={loop.session.runner.plan_path or '-'} "
                      f"writes_result={writes}", flush=True)
            loop.finish(metric=loss.item(), metric_name="train_loss")
    finally:
        if distributed:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
