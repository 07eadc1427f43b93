"""A tiny, real training job: logistic regression on synthetic data with NumPy (CPU, seconds).

gridshift hands the mode's settings to the job through the environment:
``GRIDSHIFT_MODE`` and ``GRIDSHIFT_BATCH_SIZE``. Progress goes to stdout, one line per epoch.

    python examples/train_tiny.py --epochs 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def train(epochs: int, batch_size: int, seed: int = 0, samples: int = 20000, features: int = 64) -> float:
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=features)
    x = rng.normal(size=(samples, features))
    y = (x @ true_w + rng.normal(scale=0.5, size=samples) > 0).astype(np.float64)
    w = np.zeros(features)
    lr = 0.5
    accuracy = 0.0
    for epoch in range(1, epochs + 1):
        order = rng.permutation(samples)
        for start in range(0, samples, batch_size):
            idx = order[start:start + batch_size]
            p = 1.0 / (1.0 + np.exp(-(x[idx] @ w)))
            w -= lr * x[idx].T @ (p - y[idx]) / len(idx)
        p_all = 1.0 / (1.0 + np.exp(-(x @ w)))
        loss = float(-np.mean(y * np.log(p_all + 1e-12) + (1 - y) * np.log(1 - p_all + 1e-12)))
        accuracy = float(np.mean((p_all > 0.5) == y))
        print(f"epoch {epoch}/{epochs} loss={loss:.4f} accuracy={accuracy:.3f} mode={os.environ.get('GRIDSHIFT_MODE', '-')}", flush=True)
        time.sleep(0.05)  # stand-in for data loading, so the run lasts long enough to meter
    return accuracy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=int(os.environ.get("GRIDSHIFT_BATCH_SIZE", "256")))
    parser.add_argument("--target-accuracy", type=float, default=0.0, help="exit 1 if the final accuracy is below this")
    args = parser.parse_args(argv)
    accuracy = train(args.epochs, args.batch_size)
    if accuracy < args.target_accuracy:
        print(f"accuracy {accuracy:.3f} is below the target {args.target_accuracy:.3f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
