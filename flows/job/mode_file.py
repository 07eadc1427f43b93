"""gridshift's side of the job files (:mod:`plans.integrations.protocol`) for one run, and truthful job settings.

The run's :class:`ModeFileChannel` hands the job its start batch size and the two file paths, writes
the mode file at every mode change (:func:`flows.supervise.supervise` calls :meth:`announce`; the
announcement carries the mode's batch size and clock plan), and after the job ends reads its result
file. Only that file confirms a batch size or a clock plan: :func:`flows.job.span_settings.job_settings`
labels each span with what the job confirmed, else "handed to the job, not confirmed".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from flows.job.span_settings import job_settings
from plans.errors import BadJobFile
from plans.integrations.protocol import (
    BATCH_SIZE_ENV,
    MODE_FILE_ENV,
    RESULT_FILE_ENV,
    WINDOW_ENV,
    JobResult,
    ModeAnnouncement,
    read_result_file,
    write_mode_file,
)
from scheduler.report import ModeSpan, RunWindow, settings_phrase

__all__ = ["ModeFileChannel"]


class ModeFileChannel:
    """The mode file, the result file, the batch sizes and clock plans of one run. ``folder`` None:
    no files (the job gets only ``GRIDSHIFT_BATCH_SIZE`` and ``GRIDSHIFT_CLOCK_PLAN``).
    ``clock_plans``: each mode's plan file (modes without one are absent)."""

    def __init__(self, folder: Path | None, batch_sizes: Mapping[str, int | None],
                 clock_plans: Mapping[str, Path] | None = None) -> None:
        self.mode_file = folder / "mode.json" if folder is not None else None
        self.result_file = folder / "result.json" if folder is not None else None
        self.batch_sizes = dict(batch_sizes)
        self.clock_plans = dict(clock_plans or {})
        self.announced: list[ModeAnnouncement] = []
        self.windows_started = 0

    def job_env(self, first_mode: str) -> dict[str, str]:
        """The job's variables for a window (a start of the job) that starts in ``first_mode``."""
        env: dict[str, str] = {WINDOW_ENV: str(self.windows_started)}
        self.windows_started += 1
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
        plan = self.clock_plans.get(mode)
        ann = ModeAnnouncement(seq=len(self.announced), mode=mode, batch_size=self.batch_sizes.get(mode),
                               since=at.isoformat(), reason=reason, clock_plan=str(plan) if plan else None)
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
        """``spans`` with the job's settings (batch size, clock plan) appended, as far as it confirmed them."""
        out = list(spans)
        for i, (span, extra) in enumerate(zip(spans, job_settings(self.announced, self.start_batch_size, result))):
            if extra:
                words = settings_phrase(extra)
                out[i] = replace(span, settings=f"{span.settings}; {words}" if span.settings else words,
                                 settings_detail=span.settings_detail + extra)
        return out

    def label_windows(self, windows: Sequence[RunWindow], result: JobResult | None) -> list[RunWindow]:
        """``windows`` (this channel's, in start order) with the steps the job said each started and
        ended at; a window the job said nothing of is left as it is."""
        said = {w.window: w for w in (result.windows if result else ()) if w.window is not None}
        return [replace(w, start_step=said[i].start_step, end_step=said[i].end_step) if i in said else w
                for i, w in enumerate(windows)]

    def batch_sizes_used(self, result: JobResult | None) -> set[int]:
        """Every batch size the job ran with, as far as gridshift can tell."""
        used = {self.start_batch_size} if self.start_batch_size is not None else set()
        last_ack = {a.mode_seq: a for a in (result.batch_sizes if result else ())}
        used.update(a.batch_size for a in last_ack.values())
        return used
