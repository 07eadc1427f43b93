"""Regenerate the synthetic Zeus-format traces in this folder (deterministic; run from the repo root).

    python tests/data/zeus/generate.py

The real NSDI'23 traces are not redistributed here. These files use the exact CSV format of
``summary_train.csv`` / ``summary_power_<gpu>.csv`` (shared/docs/zeus-trace-simulator.md section 1)
with made-up but plausibly shaped numbers: epochs to target grow with the batch size past a knee,
time per epoch falls with it, and a power limit below a size's natural draw slows it down. The
cifar100/V100 rows at b = 1024 and b = 64 carry the exact numbers of the spec's worked examples
(section 13). Everything else is synthetic.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
GPUS = {"v100": list(range(100, 251, 25)), "a40": list(range(100, 301, 25))}
#: dataset -> network, optimizer, targets (first is the job's), B, knee, min epochs, never-reach sizes,
#: natural power at the largest size (W), time per epoch at the largest size (s)
WORKLOADS = {
    "cifar100": ("shufflenetv2", "adadelta", (0.6, 0.5), [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], 300, 20, {2048: 160, 4096: 240}, 190, 3.67),
    "imagenet": ("resnet50", "adadelta", (0.65, 0.6), [64, 128, 192, 256, 360], 200, 30, {64: None}, 240, 2400.0),
    "squad": ("bert_base_uncased", "adamw", (84.0, 80.0), [8, 12, 16, 24, 32, 48, 56], 40, 2.2, {}, 230, 1500.0),
    "librispeech": ("deepspeech2", "adamw", (40.0, 50.0), [8, 16, 32, 64, 128, 192], 256, 5, {}, 235, 3000.0),
    "movielens-1m": ("ncf", "adam", (0.41, 0.3), [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384], 4096, 9, {4: None, 8: None, 16: None}, 150, 2.0),
    "sentiment140": ("bert_base_uncased", "adamw", (0.84, 0.8), [8, 16, 32, 64, 128], 200, 3.0, {}, 225, 900.0),
}
MAX_EPOCHS = {"cifar100": 100, "imagenet": 100, "squad": 6, "librispeech": 16, "movielens-1m": 100, "sentiment140": 10}
RUN_ORDER_10 = [1, 10, 2, 3, 4, 5, 6, 7, 8, 9]

# section 13 numbers (cifar100, V100)
EX_B1024_T = [11.276667, 9.216667, 8.493333, 8.213333, 7.843333, 7.670000, 7.613333]
EX_B1024_E = [979.535, 1007.345, 1112.38, 1132.9189, 1249.05, 1368.46, 1428.95]
EX_B1024_TAU = [74, 71, 80, 71, 70, 80, 77, 97, 77, 90]
EX_B64_T = [32.656667, 32.70, 32.74, 32.76, 32.78, 32.80]
EX_B64_E = [2618.876, 2860.0, 2940.0, 2980.0, 3010.0]
EX_B64_TAU = [19, 21, 20, 22, 21]


def _b64_rows() -> tuple[list[float], list[float]]:
    t = EX_B64_T + [7 * 32.746190 - sum(EX_B64_T)]
    e = EX_B64_E + [0.0, 0.0]
    rest = 7 * 2905.519 - sum(EX_B64_E)
    e[5], e[6] = rest / 2 - 15.0, rest / 2 + 15.0
    return t, e


def main() -> None:
    rng = np.random.default_rng(20261130)
    train_rows: list[list[object]] = []
    power_rows: dict[str, list[list[object]]] = {g: [] for g in GPUS}
    for ds, (net, opt, targets, sizes, knee, e_min, never, p_nat_max, t_max) in WORKLOADS.items():
        bmax = max(sizes)
        for b in sizes:
            nruns = 10 if (ds == "cifar100" and b == 1024) else 5
            runs = RUN_ORDER_10 if nruns == 10 else list(range(1, nruns + 1))
            base = e_min * (1.0 + (b / knee) ** 1.3) * (1.0 + 0.15 * (min(sizes) / b) ** 0.5)
            for tgt_i, tgt in enumerate(targets):
                for j, run in enumerate(runs):
                    scale = 1.0 if tgt_i == 0 else 0.7
                    if ds == "cifar100" and b == 1024:
                        tau: float | None = EX_B1024_TAU[j] * scale
                    elif ds == "cifar100" and b == 64:
                        tau = EX_B64_TAU[j] * scale
                    elif b in never:
                        tau = None if never[b] is None else float(never[b] + 10 * j)
                    else:
                        tau = base * scale * float(rng.lognormal(0.0, 0.09))
                    if tau is not None:
                        tau = float(max(1, round(tau)))
                        if tau > 3 * MAX_EPOCHS[ds]:
                            tau = None
                    train_rows.append([ds, net, b, opt, round(0.001 * b**0.5, 6), run, tgt, "" if tau is None else f"{tau:.1f}"])
            for gpu, limits in GPUS.items():
                if ds == "cifar100" and gpu == "v100" and b in (1024, 64):
                    if b == 1024:
                        t, e = EX_B1024_T, EX_B1024_E
                    else:
                        t, e = _b64_rows()
                    for p, ti, ei in zip(limits, t, e):
                        power_rows[gpu].append([ds, net, b, opt, p, f"{ti:.6f}", repr(ei / ti)])
                    continue
                gpu_speed = 1.0 if gpu == "v100" else 0.8
                t_full = t_max * gpu_speed * (bmax / b) ** 0.55
                p_nat = 90.0 + (p_nat_max - 90.0) * (b / bmax) ** 0.25 * (1.1 if gpu == "a40" else 1.0)
                for p in limits:
                    eff = min(p, p_nat)
                    t = t_full * (p_nat / eff) ** 0.55 * float(rng.normal(1.0, 0.004))
                    pw = eff * 0.93 * float(rng.normal(1.0, 0.004))
                    power_rows[gpu].append([ds, net, b, opt, p, f"{t:.6f}", f"{pw:.6f}"])
    with (HERE / "summary_train.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["dataset", "network", "batch_size", "optimizer", "learning_rate", "run", "target_metric", "target_epoch"])
        w.writerows(train_rows)
    for gpu, rows in power_rows.items():
        with (HERE / f"summary_power_{gpu}.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["dataset", "network", "batch_size", "optimizer", "power_limit", "time_per_epoch", "average_power"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
