"""A tiny, real training job: logistic regression on synthetic data with NumPy (CPU, seconds).

gridshift hands the mode's settings to the job through the environment (see plans.integrations.protocol):
``GRIDSHIFT_MODE``, ``GRIDSHIFT_BATCH_SIZE`` (the batch size to start with), ``GRIDSHIFT_MODE_FILE``
(read at every epoch boundary: a new mode's batch size is taken from the next epoch on, and
acknowledged) and ``GRIDSHIFT_RESULT_FILE`` (where the job says whether it reached its target).
Progress goes to stdout, one line per epoch, and (as the fraction done, 0-1) to the file
``GRIDSHIFT_PROGRESS_FILE`` names, which gridshift's re-planning reads.

Checkpoint and resume, for policies with ``job.checkpointable: true``: on SIGTERM the job writes the
state of its last finished epoch (weights, epoch, random generator) to ``--checkpoint`` (default
``$GRIDSHIFT_CHECKPOINT_DIR/train_tiny.npz``) and exits 143; started again with
``GRIDSHIFT_RESUME=1`` it reads that checkpoint and goes on from the next epoch, so a paused and
resumed run ends with exactly the weights of an uninterrupted one.

    python examples/train_tiny.py --epochs 20
    python examples/train_tiny.py --epochs 40 --target-loss 0.15     # stop once the loss is reached

``--epoch-overhead-s`` and ``--step-overhead-s`` stand in for data loading and an accelerator's
per-step time, so that the cost of reaching the target depends on the batch size as it does on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import NoReturn

import numpy as np

from plans.integrations.protocol import GridshiftJob

#: exit status after a checkpoint written on SIGTERM (128 + 15, the shell's convention)
EXIT_CHECKPOINTED = 143


_stop_requested: list[bool] = []


def _request_stop(_signum: int, _frame: FrameType | None) -> None:
    # only a flag: the loop stops between batches, so the saved state is never half updated
    _stop_requested.append(True)


def _save(path: Path, w: np.ndarray, epoch: int, rng: np.random.Generator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")  # np.savez adds .npz to names without it
    # the generator's whole state (128-bit integers and a buffered half word) as JSON text, which
    # np.load reads back without pickle
    np.savez(tmp, w=w, epoch=epoch, rng=json.dumps(rng.bit_generator.state))
    os.replace(tmp, path)  # a SIGKILL halfway leaves the previous checkpoint intact


def _load(path: Path, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    with np.load(path) as data:
        rng.bit_generator.state = json.loads(str(data["rng"]))
        return data["w"].copy(), int(data["epoch"])


def _report_progress(fraction: float) -> None:
    target = os.environ.get("GRIDSHIFT_PROGRESS_FILE")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(f"{fraction:.6f}\n")


def _checkpoint_and_exit(path: Path | None, w: np.ndarray, epoch: int, rng: np.random.Generator, epochs: int) -> NoReturn:
    if path is not None:
        _save(path, w, epoch, rng)
        print(f"checkpoint written after epoch {epoch}/{epochs}: {path}", flush=True)
    else:
        print(f"stopped after epoch {epoch}/{epochs} without a checkpoint (no --checkpoint)", flush=True)
    raise SystemExit(EXIT_CHECKPOINTED)


def train(epochs: int, batch_size: int, seed: int = 0, samples: int = 20000, features: int = 64, *,
          checkpoint: Path | None = None, resume: bool = False, epoch_overhead_s: float = 0.05,
          step_overhead_s: float = 0.0, target_loss: float | None = None,
          job: GridshiftJob | None = None) -> tuple[float, float, int, int]:
    """Train; returns (loss, accuracy, last epoch, steps run). Stops early once ``target_loss`` is reached."""
    job = job or GridshiftJob(batch_size=None, mode_file=None, result_file=None)
    data_rng = np.random.default_rng(seed)
    true_w = data_rng.normal(size=features)
    x = data_rng.normal(size=(samples, features))
    y = (x @ true_w + data_rng.normal(scale=0.5, size=samples) > 0).astype(np.float64)
    rng = np.random.default_rng(seed + 1)  # the shuffling stream, the only state besides w
    w = np.zeros(features)
    first = 1
    if resume and checkpoint is not None and checkpoint.exists():
        w, done = _load(checkpoint, rng)
        first = done + 1
        print(f"resumed from {checkpoint.name} after epoch {done}/{epochs}", flush=True)
    elif resume:
        print("GRIDSHIFT_RESUME=1 but no checkpoint found: starting from epoch 1", flush=True)
    # the state at the end of the last finished epoch: what a stop saves
    saved_w, saved_epoch, saved_rng = w.copy(), first - 1, np.random.default_rng(0)
    saved_rng.bit_generator.state = rng.bit_generator.state
    lr = 0.5
    loss, accuracy, steps, epoch = float("inf"), 0.0, 0, first - 1
    for epoch in range(first, epochs + 1):
        change = job.poll_mode()  # an epoch boundary: the only safe point to change the batch size
        if change is not None:
            batch_size = change.batch_size or batch_size
            job.acknowledge(change, batch_size, epoch=epoch - 1)
        order = rng.permutation(samples)
        for start in range(0, samples, batch_size):
            if _stop_requested:
                _checkpoint_and_exit(checkpoint, saved_w, saved_epoch, saved_rng, epochs)
            idx = order[start:start + batch_size]
            p = 1.0 / (1.0 + np.exp(-(x[idx] @ w)))
            w -= lr * x[idx].T @ (p - y[idx]) / len(idx)
            steps += 1
            if step_overhead_s:
                time.sleep(step_overhead_s)
        saved_w, saved_epoch = w.copy(), epoch
        saved_rng.bit_generator.state = rng.bit_generator.state
        p_all = 1.0 / (1.0 + np.exp(-(x @ w)))
        loss = float(-np.mean(y * np.log(p_all + 1e-12) + (1 - y) * np.log(1 - p_all + 1e-12)))
        accuracy = float(np.mean((p_all > 0.5) == y))
        print(f"epoch {epoch}/{epochs} loss={loss:.4f} accuracy={accuracy:.3f} batch_size={batch_size} "
              f"mode={os.environ.get('GRIDSHIFT_MODE', '-')} w_sum={float(w.sum()):.6f}", flush=True)
        _report_progress(epoch / epochs)
        time.sleep(epoch_overhead_s)  # stand-in for data loading, so the run lasts long enough to meter
        if target_loss is not None and loss <= target_loss:
            break
        if _stop_requested and epoch < epochs:
            _checkpoint_and_exit(checkpoint, saved_w, saved_epoch, saved_rng, epochs)
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
    default_dir = os.environ.get("GRIDSHIFT_CHECKPOINT_DIR")
    parser.add_argument("--checkpoint", type=Path, default=Path(default_dir) / "train_tiny.npz" if default_dir else None,
                        help="checkpoint file written on SIGTERM and read when GRIDSHIFT_RESUME=1")
    parser.add_argument("--epoch-overhead-s", "--epoch-pause-s", type=float, default=0.05,
                        help="idle time per epoch (a data-loading stand-in)")
    parser.add_argument("--step-overhead-s", type=float, default=0.0, help="sleep per step (accelerator step stand-in)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _request_stop)
    loss, accuracy, epochs, steps = train(args.epochs, args.batch_size, args.seed, args.samples,
                                          checkpoint=args.checkpoint, resume=os.environ.get("GRIDSHIFT_RESUME") == "1",
                                          epoch_overhead_s=args.epoch_overhead_s, step_overhead_s=args.step_overhead_s,
                                          target_loss=args.target_loss, job=job)
    reached = (loss <= args.target_loss if args.target_loss is not None else True) and accuracy >= args.target_accuracy
    job.finish(reached=reached, epochs=epochs, steps=steps, metric=loss, metric_name="train_loss")
    if accuracy < args.target_accuracy:
        print(f"accuracy {accuracy:.3f} is below the target {args.target_accuracy:.3f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
