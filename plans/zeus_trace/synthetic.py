"""Synthetic Zeus-style traces with cost-curve shapes the three public workloads lack.

The public traces all have a U-shaped cost curve with the optimum one to three sizes below the
default. A batch-size optimiser fitted to them may fail on other shapes, so the benchmark and the
tests also run these (every figure modelled; nothing here is measured):

- ``edge-small``: cheapest at the smallest size, 8x below the default, falling steadily towards it.
- ``edge-small-bump``: cheapest at the smallest size, 8x below the default, but the size just
  below the default is *worse* than the default: a search that stops at the first worse size
  never finds it.
- ``fine-tune``: a few whole epochs to target (3 at the default); the smallest size, 8x below
  the default, needs one.
- ``valley``: the held-back failure's shape: a fine-tuning job (whole epochs, noisy) whose
  smallest size, 8x below the default, is cheapest while the two sizes between are 13-19 %
  dearer than the default.
- ``valley-deep``: the same, but the sizes between are 40-60 % dearer than the default: reaching
  the valley costs about one recurrence more than the default.
- ``edge-large``: cheapest at the largest size, 16x above the default.
- ``flat``: every size within a few per cent of the others.
- ``noisy``: a U-shape with the optimum three sizes below the default and large run-to-run
  noise (epochs to target vary by a third).
- ``cliff``: the three smallest sizes never reach the target; the optimum sits three sizes
  above the cliff and three below the default.

A shape is a relative cost per size (``r``); each size's epochs to target are set so that its
expected cost at its best power limit is ``r`` times the default's, then spread over five runs
(rounded up to whole epochs where the shape says so, which moves the realised costs off ``r``).
Time and power per limit follow one simple GPU model (small batches draw less power and run more
steps per epoch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from plans.zeus_trace.job_table import JobDef, TraceJob

__all__ = ["SHAPES", "SyntheticShape", "synthetic_trace"]

_LIMITS_W = (100, 125, 150, 175, 200, 225, 250)
#: five runs per size: epochs to target at these multiples of the noise (one sd in log)
_RUN_Z = (-1.2, -0.5, 0.0, 0.5, 1.2)


@dataclass(frozen=True)
class SyntheticShape:
    """A cost curve: sizes, the default, relative cost per size (None: never reaches), and the job's scale."""

    sizes: tuple[int, ...]
    default: int
    relative_cost: tuple[float | None, ...]
    default_epochs: float
    max_epochs: int
    noise: float = 0.08
    whole_epochs: bool = False


SHAPES: dict[str, SyntheticShape] = {
    "edge-small": SyntheticShape((4, 8, 12, 16, 24, 32), 32, (0.72, 0.8, 0.86, 0.9, 0.96, 1.0), 12.0, 30),
    "edge-small-bump": SyntheticShape((8, 16, 32, 64), 64, (0.7, 1.12, 1.06, 1.0), 12.0, 40),
    "fine-tune": SyntheticShape((8, 16, 32, 64), 64, (0.75, 0.95, 1.0, 1.0), 3.0, 10, noise=0.15, whole_epochs=True),
    "valley": SyntheticShape((8, 16, 32, 64), 64, (0.75, 1.05, 1.1, 1.0), 3.0, 10, noise=0.2, whole_epochs=True),
    "valley-deep": SyntheticShape((8, 16, 32, 64), 64, (0.8, 1.6, 1.4, 1.0), 12.0, 40),
    "edge-large": SyntheticShape((32, 64, 128, 256, 512, 1024, 2048), 128,
                                 (1.5, 1.2, 1.0, 0.92, 0.85, 0.8, 0.76), 30.0, 100),
    "flat": SyntheticShape((8, 16, 32, 64, 128, 256, 512), 64, (1.03, 1.01, 0.99, 1.0, 1.02, 0.98, 1.04), 20.0, 100),
    "noisy": SyntheticShape((16, 32, 64, 128, 256, 512, 1024), 512,
                            (1.9, 1.25, 0.85, 0.95, 1.05, 1.0, 1.5), 20.0, 100, noise=0.3),
    "cliff": SyntheticShape((4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), 1024,
                            (None, None, None, 1.6, 1.0, 0.8, 0.7, 0.75, 1.0, 1.4, 2.0), 20.0, 100),
}


def _epoch_figures(b: int, p: int, b_half: float) -> tuple[float, float]:
    """(time per epoch s, average power W) of size ``b`` at limit ``p``: fuller batches draw more power."""
    util = b / (b + b_half)
    need_w = 120.0 + 110.0 * util
    drawn_w = min(p * 0.97, need_w)
    t_full = 60.0 * (1.0 + b_half / b)  # more, smaller steps per epoch
    return t_full * (need_w / drawn_w) ** 0.7, drawn_w


def synthetic_trace(name: str, *, eta: float = 0.5) -> TraceJob:
    """The synthetic job ``name`` (one of :data:`SHAPES`) as a :class:`TraceJob` on a V100-like grid."""
    shape = SHAPES[name]
    b_half = float(shape.sizes[len(shape.sizes) // 2])
    t_ep: dict[int, dict[int, float]] = {}
    p_avg: dict[int, dict[int, float]] = {}
    max_w = float(max(_LIMITS_W))
    best_epoch_cost: dict[int, float] = {}
    for b in shape.sizes:
        t_ep[b], p_avg[b] = {}, {}
        for p in _LIMITS_W:
            t_ep[b][p], p_avg[b][p] = _epoch_figures(b, p, b_half)
        best_epoch_cost[b] = min((eta * p_avg[b][p] + (1.0 - eta) * max_w) * t_ep[b][p] for p in _LIMITS_W)
    scale = shape.default_epochs * best_epoch_cost[shape.default]
    epochs: dict[int, tuple[float | None, ...]] = {}
    for b, r in zip(shape.sizes, shape.relative_cost):
        if r is None:
            epochs[b] = (None,) * len(_RUN_Z)
            continue
        mean = r * scale / best_epoch_cost[b]
        runs = [mean * math.exp(shape.noise * z - shape.noise**2 / 2) for z in _RUN_Z]
        runs = [float(math.ceil(e)) if shape.whole_epochs else round(e, 2) for e in runs]
        epochs[b] = tuple(e if e <= shape.max_epochs else None for e in runs)
    job = JobDef(f"synthetic-{name}", "synthetic", "sgd", 0.0, shape.max_epochs, shape.default)
    return TraceJob(
        job=job,
        gpu="synthetic",
        max_power_w=max_w,
        batch_sizes=shape.sizes,
        power_limits_w={b: _LIMITS_W for b in shape.sizes},
        time_per_epoch_s=t_ep,
        avg_power_w=p_avg,
        target_epochs=epochs,
        default_b=shape.default,
    )
