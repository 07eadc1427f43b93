"""A tiny, real training job: logistic regression on synthetic data with NumPy (CPU, seconds).

gridshift hands the mode's settings to the job through the environment (see plans.job_protocol):
``GRIDSHIFT_MODE``, ``GRIDSHIFT_BATCH_SIZE`` (the batch size to start with), ``GRIDSHIFT_MODE_FILE``
(read at every epoch boundary: a new mode's batch size is taken from the next epoch on, and
acknowledged) and ``GRIDSHIFT_RESULT_FILE`` (where the job says whether it reached its target).
Progress goes to stdout, one line per epoch.

    python examples/train_tiny.py --epochs 20
    python examples/train_tiny.py --epochs 40 --target-loss 0.15     # stop once the loss is reached

``--epoch-overhead-s`` and ``--step-overhead-s`` stand in for data loading and an accelerator's
per-step time, so that the cost of reaching the target depends on the batch size as it does on a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from plans.job_protocol import GridshiftJob


def train(epochs: int, batch_size: int, seed: int = 0, samples: int = 20000, features: int = 64, *,
          target_loss: float | None = None, epoch_overhead_s: float = 0.05, step_overhead_s: float = 0.0,
          job: GridshiftJob | None = None) -> tuple[float, float, int, int]:
    """Train; returns (loss, accuracy, epochs run, steps run). Stops early once ``target_loss`` is reached."""
    job = job or GridshiftJob(batch_size=None, mode_file=None, result_file=None)
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=features)
    x = rng.normal(size=(samples, features))
    y = (x @ true_w + rng.normal(scale=0.5, size=samples) > 0).astype(np.float64)
    w = np.zeros(features)
    lr = 0.5
    loss, accuracy, steps, epoch = float("inf"), 0.0, 0, 0
    for epoch in range(1, epochs + 1):
        change = job.poll_mode()  # an epoch boundary: the only safe point to change the batch size
        if change is not None:
            batch_size = change.batch_size or batch_size
            job.acknowledge(change, batch_size, epoch=epoch - 1)
        order = rng.permutation(samples)
        for start in range(0, samples, batch_size):
            idx = order[start:start + batch_size]
            p = 1.0 / (1.0 + np.exp(-(x[idx] @ w)))
            w -= lr * x[idx].T @ (p - y[idx]) / len(idx)
            steps += 1
            if step_overhead_s:
                time.sleep(step_overhead_s)
        p_all = 1.0 / (1.0 + np.exp(-(x @ w)))
        loss = float(-np.mean(y * np.log(p_all + 1e-12) + (1 - y) * np.log(1 - p_all + 1e-12)))
        accuracy = float(np.mean((p_all > 0.5) == y))
        print(f"epoch {epoch}/{epochs} loss={loss:.4f} accuracy={accuracy:.3f} batch_size={batch_size} "
              f"mode={os.environ.get('GRIDSHIFT_MODE', '-')}", flush=True)
        time.sleep(epoch_overhead_s)
        if target_loss is not None and loss <= target_loss:
            break
    return loss, accuracy, epoch, steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    job = GridshiftJob.from_env()
    parser.add_argument("--epochs", type=int, default=20, help="epochs to run (the budget, with --target-loss)")
    parser.add_argument("--batch-size", type=int, default=job.start_batch_size(256))
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-loss", type=float, default=None, help="stop once the training loss is at or below this")
    parser.add_argument("--target-accuracy", type=float, default=0.0, help="exit 1 if the final accuracy is below this")
    parser.add_argument("--epoch-overhead-s", type=float, default=0.05, help="sleep per epoch (data loading stand-in)")
    parser.add_argument("--step-overhead-s", type=float, default=0.0, help="sleep per step (accelerator step stand-in)")
    args = parser.parse_args(argv)
    loss, accuracy, epochs, steps = train(args.epochs, args.batch_size, args.seed, args.samples,
                                          target_loss=args.target_loss, epoch_overhead_s=args.epoch_overhead_s,
                                          step_overhead_s=args.step_overhead_s, job=job)
    reached = (loss <= args.target_loss if args.target_loss is not None else True) and accuracy >= args.target_accuracy
    job.finish(reached=reached, epochs=epochs, steps=steps, metric=loss, metric_name="train_loss")
    if accuracy < args.target_accuracy:
        print(f"accuracy {accuracy:.3f} is below the target {args.target_accuracy:.3f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
