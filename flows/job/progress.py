"""The job's own progress reports: the file ``GRIDSHIFT_PROGRESS_FILE`` names (fraction done, 0-1).

The run loop (:mod:`flows.supervise`) hands each report to its decider, whose work count
(:class:`scheduler.planner.deciders.WorkTracker` for the planner) turns it into the work left and the speed
each mode really had, so a job slower than its mode figures say is re-planned at its real pace.
The reader keeps what it handed on (:meth:`ProgressFile.summary`), so the report can say whether
the job's progress reached the decisions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["ProgressFile", "progress_file_reader"]


class ProgressFile:
    """A ``progress()`` for the supervisor: the last number the job wrote to ``path``, or None."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reads = 0  # reads that found a fraction
        self.last: float | None = None

    def __call__(self) -> float | None:
        try:
            text = self.path.read_text(encoding="utf-8").strip().splitlines()
        except OSError:
            return None
        try:
            value = float(text[-1]) if text else None
        except ValueError:
            return None
        if value is None or not 0.0 <= value <= 1.0:
            return None
        self.reads += 1
        self.last = value
        return value

    def summary(self) -> dict[str, Any] | None:
        """``{"reads": n, "last": fraction}`` once the job has reported progress (None before)."""
        return {"reads": self.reads, "last": self.last} if self.reads else None


def progress_file_reader(path: Path) -> ProgressFile:
    """The reader of the job's progress file ``path``."""
    return ProgressFile(path)
