"""gridshift's side of the job files (:mod:`plans.job_protocol`) for one run, and truthful batch sizes.

The run's :class:`ModeFileChannel` hands the job its start batch size and the two file paths, writes
the mode file at every mode change (:func:`flows.supervise.supervise` calls :meth:`announce`), and
after the job ends reads its result file. A subprocess cannot see a new environment, so after a
mid-run switch the only batch size a report may claim is the one the job started with, unless the
job acknowledged the change in its result file: :func:`batch_size_labels` says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from plans.errors import BadJobFile
from plans.job_protocol import (
    BATCH_SIZE_ENV,
    MODE_FILE_ENV,
    RESULT_FILE_ENV,
    BatchSizeAck,
    JobResult,
    ModeAnnouncement,
    read_result_file,
    write_mode_file,
)
from scheduler.policy import Policy
from scheduler.report import ModeSpan

__all__ = ["ModeFileChannel", "batch_size_labels", "mode_batch_sizes"]


def mode_batch_sizes(policy: Policy, proposal: int | None) -> dict[str, int | None]:
    """Each mode's batch size: its own, the run's ``proposal`` for ``batch_size: auto``, or None."""
    out: dict[str, int | None] = {}
    for name, mode in policy.modes.items():
        out[name] = proposal if mode.batch_size == "auto" else mode.batch_size  # type: ignore[assignment]
    return out


def batch_size_labels(announced: Sequence[ModeAnnouncement], start_batch_size: int | None,
                      acks: Sequence[BatchSizeAck]) -> list[str]:
    """What each mode span may truthfully say about the job's batch size. Pure.

    Span ``i`` began with announcement ``i``. The job runs with ``start_batch_size`` (its
    environment) until it acknowledges an announcement; an unacknowledged change is reported as the
    batch size the job still has ("set at start"), never as the one the mode asked for.
    """
    last_ack = {a.mode_seq: a for a in acks}  # the job's last word on each announcement
    current, source = start_batch_size, "set at start"
    labels: list[str] = []
    for ann in announced:
        ack = last_ack.get(ann.seq)
        if ack is not None:
            before, current = current, ack.batch_size
            at = f" at epoch {ack.epoch:g}" if ack.epoch is not None else ""
            if ann.seq > 0 and before != current:
                text = f"batch size {before} -> {current} (the job switched{at})"
            else:
                text = f"batch size {current} (acknowledged by the job{at})"
            source = "acknowledged earlier"
        elif current is None:
            text = "" if ann.batch_size is None else f"no batch size from gridshift (the job did not acknowledge {ann.batch_size})"
        else:
            text = f"batch size {current} ({source})"
        wanted = ann.batch_size
        if current is not None and wanted is not None and wanted != current:
            text += f"; the mode asks {wanted}, " + ("the job chose otherwise" if ack is not None else
                                                      "which the job did not acknowledge")
        labels.append(text)
    return labels


class ModeFileChannel:
    """The mode file, the result file and the batch sizes of one run. ``folder`` None: no files
    (the job gets only ``GRIDSHIFT_BATCH_SIZE``)."""

    def __init__(self, folder: Path | None, batch_sizes: Mapping[str, int | None]) -> None:
        self.mode_file = folder / "mode.json" if folder is not None else None
        self.result_file = folder / "result.json" if folder is not None else None
        self.batch_sizes = dict(batch_sizes)
        self.announced: list[ModeAnnouncement] = []

    def job_env(self, first_mode: str) -> dict[str, str]:
        """The job's variables for a run that starts in ``first_mode``."""
        env: dict[str, str] = {}
        if (b := self.batch_sizes.get(first_mode)) is not None:
            env[BATCH_SIZE_ENV] = str(b)
        if self.mode_file is not None and self.result_file is not None:
            env[MODE_FILE_ENV] = str(self.mode_file)
            env[RESULT_FILE_ENV] = str(self.result_file)
        return env

    @property
    def start_batch_size(self) -> int | None:
        return self.announced[0].batch_size if self.announced else None

    def announce(self, mode: str, reason: str, at: datetime) -> ModeAnnouncement:
        """Record (and write, atomically) that the run is in ``mode`` from ``at`` on."""
        ann = ModeAnnouncement(seq=len(self.announced), mode=mode, batch_size=self.batch_sizes.get(mode),
                               since=at.isoformat(), reason=reason)
        self.announced.append(ann)
        if self.mode_file is not None:
            write_mode_file(self.mode_file, ann)
        return ann

    def result(self) -> tuple[JobResult | None, str]:
        """The job's result (None when it wrote none) and a warning when the file was unusable."""
        if self.result_file is None:
            return None, ""
        try:
            return read_result_file(self.result_file), ""
        except BadJobFile as exc:
            return None, f"job result ignored: {exc}"

    def label_spans(self, spans: Sequence[ModeSpan], result: JobResult | None) -> list[ModeSpan]:
        """``spans`` with the job's true batch size appended to each span's settings."""
        labels = batch_size_labels(self.announced, self.start_batch_size, result.batch_sizes if result else ())
        out = list(spans)
        for i, (span, label) in enumerate(zip(spans, labels)):
            if label:
                out[i] = replace(span, settings=f"{span.settings}; {label}" if span.settings else label)
        return out

    def batch_sizes_used(self, result: JobResult | None) -> set[int]:
        """Every batch size the job ran with, as far as gridshift can tell."""
        used = {self.start_batch_size} if self.start_batch_size is not None else set()
        last_ack = {a.mode_seq: a for a in (result.batch_sizes if result else ())}
        used.update(a.batch_size for a in last_ack.values())
        return used
