"""The job's own progress reports: the file ``GRIDSHIFT_PROGRESS_FILE`` names (fraction done, 0-1).

The run loop (:mod:`flows.supervise`) hands each report to its decider, whose work count
(:class:`scheduler.planner.deciders.WorkTracker` for the planner) turns it into the work left and the speed
each mode really had, so a job slower than its mode figures say is re-planned at its real pace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

__all__ = ["progress_file_reader"]


def progress_file_reader(path: Path) -> Callable[[], float | None]:
    """A ``progress()`` for the supervisor: the last number the job wrote to ``path``, or None."""

    def read() -> float | None:
        try:
            text = path.read_text(encoding="utf-8").strip().splitlines()
        except OSError:
            return None
        try:
            value = float(text[-1]) if text else None
        except ValueError:
            return None
        return None if value is None or not 0.0 <= value <= 1.0 else value

    return read
