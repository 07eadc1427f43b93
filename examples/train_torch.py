"""A small PyTorch training job that runs gridshift's clock plans with one line (CPU or GPU, seconds).

gridshift hands the job its settings (see plans.integrations.protocol): the batch size (``GRIDSHIFT_BATCH_SIZE``,
acknowledged at every epoch boundary through the mode file) and the mode's clock plan
(``GRIDSHIFT_CLOCK_PLAN``). The plan is run by ``run_clock_plan``: it locks the SM clock at the
phases the plan names (``forward``, ``backward``, ``optimizer``, or ``<module>.forward`` ...), swaps
to the new mode's plan when the mode file announces one, and writes what it ran to the result file,
which is what lets gridshift's report call the plan confirmed. Under ``GRIDSHIFT_NVML_READ_ONLY=1``
the clock calls are a dry run (logged, never sent to the GPU).

    python examples/train_torch.py --epochs 5
"""

from __future__ import annotations

import argparse
import os

import torch

from plans.integrations.clock_runner import run_clock_plan
from plans.integrations.protocol import GridshiftJob


def main(argv: list[str] | None = None) -> int:
    job = GridshiftJob.from_env()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=job.start_batch_size(64))
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--mode-poll-s", type=float, default=1.0, help="how often to look for a mode change")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    true_w = torch.randn(32, 1, device=device)
    batch_size, loss = args.batch_size, torch.tensor(float("inf"))
    with run_clock_plan(model, optimizer, job=job, poll_interval_s=args.mode_poll_s) as clocks:
        for epoch in range(args.epochs):
            change = job.poll_mode()  # an epoch boundary: where the batch size may change
            if change is not None:
                batch_size = change.batch_size or batch_size
                job.acknowledge(change, batch_size, epoch=epoch)
            for _ in range(args.steps_per_epoch):
                x = torch.randn(batch_size, 32, device=device)
                loss = torch.nn.functional.mse_loss(model(x), x @ true_w)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch + 1}/{args.epochs} loss={loss.item():.4f} batch_size={batch_size} "
                  f"mode={os.environ.get('GRIDSHIFT_MODE', '-')} clock_plan={clocks.plan_path or '-'}", flush=True)
    job.finish(reached=None, epochs=args.epochs, steps=args.epochs * args.steps_per_epoch, metric=loss.item(),
               metric_name="train_loss")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
