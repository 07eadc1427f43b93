"""Load the Zeus NSDI'23 traces (``summary_train.csv`` + ``summary_power_<gpu>.csv``) into one job table.

Follows ``shared/docs/zeus-trace-simulator.md`` sections 1-3 and 12 exactly: inner join on
(dataset, network, batch_size, optimizer), MaxPower is the largest limit anywhere in the joined table
of that GPU, feasible batch sizes B are the distinct sizes of the joined table for the workload
(whatever their target), job rows match the target metric by exact equality, and runs keep file order
(which matters for a bit-exact replay of the random draws).

Only the CSV module is used: no pandas.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from plans.errors import BadTraceFile

__all__ = ["JobDef", "JOBS", "TraceJob", "load_trace_job", "default_batch_size"]


@dataclass(frozen=True)
class JobDef:
    """One recurring job of the paper (section 3)."""

    dataset: str
    network: str
    optimizer: str
    target_metric: float
    max_epochs: int
    paper_b0: int


#: section 3; librispeech uses b0 = 192 as in ``run_single.py`` and Zeus's simulator test
JOBS: dict[str, JobDef] = {
    "cifar100": JobDef("cifar100", "shufflenetv2", "adadelta", 0.6, 100, 1024),
    "imagenet": JobDef("imagenet", "resnet50", "adadelta", 0.65, 100, 256),
    "squad": JobDef("squad", "bert_base_uncased", "adamw", 84.0, 6, 32),
    "librispeech": JobDef("librispeech", "deepspeech2", "adamw", 40.0, 16, 192),
    "movielens-1m": JobDef("movielens-1m", "ncf", "adam", 0.41, 100, 1024),
    "sentiment140": JobDef("sentiment140", "bert_base_uncased", "adamw", 0.84, 10, 128),
}


@dataclass(frozen=True)
class TraceJob:
    """Everything the simulator needs for one (workload, GPU) pair.

    ``time_per_epoch_s[b][p]`` and ``avg_power_w[b][p]`` hold the power trace; ``target_epochs[b]``
    holds each run's ``target_epoch`` in join order (None = never met the threshold). Policies must
    not read ``target_epochs``: it is the simulator's private truth.
    """

    job: JobDef
    gpu: str
    max_power_w: float
    batch_sizes: tuple[int, ...]
    power_limits_w: dict[int, tuple[int, ...]]
    time_per_epoch_s: dict[int, dict[int, float]]
    avg_power_w: dict[int, dict[int, float]]
    target_epochs: dict[int, tuple[float | None, ...]]
    default_b: int

    def energy_per_epoch_j(self, b: int, p: int) -> float:
        return self.time_per_epoch_s[b][p] * self.avg_power_w[b][p]

    def max_limit_w(self, b: int) -> int:
        """maxPL(b): the largest limit present for this batch size (section 2.3)."""
        return max(self.power_limits_w[b])


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except OSError as exc:
        raise BadTraceFile(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _need(rows: list[dict[str, str]], cols: tuple[str, ...], path: Path) -> None:
    if not rows:
        raise BadTraceFile(f"{path}: no rows")
    missing = [c for c in cols if c not in rows[0]]
    if missing:
        raise BadTraceFile(f"{path}: missing column(s) {', '.join(missing)}")


def default_batch_size(job: JobDef, power_batch_sizes: set[int]) -> int:
    """``min(paper b0, largest batch size of the dataset in this GPU's power trace)`` (section 3)."""
    return min(job.paper_b0, max(power_batch_sizes))


def load_trace_job(train_csv: Path, power_csv: Path, dataset: str, *, gpu: str | None = None) -> TraceJob:
    """Join the two traces for ``dataset`` and return the job table (sections 1-3)."""
    if dataset not in JOBS:
        raise BadTraceFile(f"unknown workload {dataset!r} (known: {', '.join(JOBS)})")
    job = JOBS[dataset]
    train = _read(Path(train_csv))
    power = _read(Path(power_csv))
    key_cols = ("dataset", "network", "batch_size", "optimizer")
    _need(train, key_cols + ("run", "target_metric", "target_epoch"), Path(train_csv))
    _need(power, key_cols + ("power_limit", "time_per_epoch", "average_power"), Path(power_csv))
    if gpu is None:
        stem = Path(power_csv).stem
        gpu = stem.removeprefix("summary_power_") if stem.startswith("summary_power_") else stem

    try:
        power_by_key: dict[tuple[str, str, int, str], list[tuple[int, float, float]]] = {}
        for r in power:
            k = (r["dataset"], r["network"], int(r["batch_size"]), r["optimizer"])
            power_by_key.setdefault(k, []).append(
                (int(float(r["power_limit"])), float(r["time_per_epoch"]), float(r["average_power"]))
            )
        # join (section 2.1): MaxPower over the whole joined table of this GPU, all workloads
        joined_keys = {
            (r["dataset"], r["network"], int(r["batch_size"]), r["optimizer"]) for r in train
        } & set(power_by_key)
        if not joined_keys:
            raise BadTraceFile("the train and power traces share no (dataset, network, batch_size, optimizer)")
        max_power_w = float(max(p for k in joined_keys for p, _, _ in power_by_key[k]))

        sel = (job.dataset, job.network, job.optimizer)
        batch_sizes = tuple(sorted(k[2] for k in joined_keys if (k[0], k[1], k[3]) == sel))
        if not batch_sizes:
            raise BadTraceFile(f"no joined rows for {dataset} ({job.network}, {job.optimizer})")
        target_epochs: dict[int, list[float | None]] = {}
        for r in train:
            k = (r["dataset"], r["network"], int(r["batch_size"]), r["optimizer"])
            if k not in joined_keys or (k[0], k[1], k[3]) != sel:
                continue
            if float(r["target_metric"]) != job.target_metric:
                continue
            raw = r["target_epoch"].strip()
            tau = float(raw) if raw and not math.isnan(float(raw)) else None
            target_epochs.setdefault(k[2], []).append(tau)
    except (ValueError, KeyError) as exc:
        raise BadTraceFile(f"malformed trace row: {exc}") from exc

    limits: dict[int, tuple[int, ...]] = {}
    t_ep: dict[int, dict[int, float]] = {}
    p_avg: dict[int, dict[int, float]] = {}
    for b in batch_sizes:
        rows = power_by_key[(job.dataset, job.network, b, job.optimizer)]
        limits[b] = tuple(sorted({p for p, _, _ in rows}))
        t_ep[b] = {p: t for p, t, _ in rows}
        p_avg[b] = {p: w for p, _, w in rows}
    power_sizes = {k[2] for k in power_by_key if (k[0], k[1], k[3]) == sel}
    b0 = default_batch_size(job, power_sizes)
    if b0 not in batch_sizes or b0 not in target_epochs:
        raise BadTraceFile(f"default batch size {b0} of {dataset} has no joined job rows")
    return TraceJob(
        job=job,
        gpu=gpu,
        max_power_w=max_power_w,
        batch_sizes=batch_sizes,
        power_limits_w=limits,
        time_per_epoch_s=t_ep,
        avg_power_w=p_avg,
        target_epochs={b: tuple(v) for b, v in target_epochs.items()},
        default_b=b0,
    )
