"""How much of the job is done, in reference (clean-mode) seconds, and how fast each mode really works.

The re-planning loop (:mod:`flows.supervise`) asks two things between plans: the work left, and the
speed to plan the rest with. Both come from :class:`WorkTracker`: the job's own progress reports
(the file ``GRIDSHIFT_PROGRESS_FILE`` names: fraction done, 0-1) when it writes them, else the wall
time in each mode times that mode's speed. The speeds the planner gets are the ones seen, so a job
slower than its mode figures say is re-planned at its real pace and still meets its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from scheduler.planner import ModeFigures

__all__ = ["WorkTracker", "progress_file_reader"]


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


@dataclass
class WorkTracker:
    """Work done (reference seconds) and the pace seen per mode, for re-planning.

    ``total_s`` is the whole job in reference seconds (``job.expected_duration_s``); ``done_s`` starts
    at the work of earlier windows when a paused job resumes. A mode's pace is trusted once it has
    been watched for ``min_watch_s`` of wall time.
    """

    total_s: float
    figures: Mapping[str, ModeFigures]
    done_s: float = 0.0
    min_watch_s: float = 600.0
    _seen: dict[str, list[float]] = field(default_factory=dict)  # mode -> [wall s, work s gained]
    _reported_s: float | None = None  # the work the job's last report showed
    watched_s: float = 0.0  # wall time the job has run under this tracker

    @property
    def reported(self) -> bool:
        """True once the job has reported its progress (its pace is then measured, not assumed)."""
        return self._reported_s is not None

    @property
    def left_s(self) -> float:
        return max(self.total_s - self.done_s, 0.0)

    def advance(self, mode: str, wall_s: float, fraction: float | None = None) -> None:
        """``wall_s`` seconds ran in ``mode``; ``fraction`` is the job's own report of its progress, if any."""
        if wall_s <= 0:
            return
        self.watched_s += wall_s
        if fraction is None:
            self.done_s = min(self.done_s + wall_s * self.speed(mode), self.total_s)
            return
        reported = min(max(fraction * self.total_s, 0.0), self.total_s)
        # only reports measure the pace (the model would just confirm itself), and only against the
        # previous report, so a resume's overhead put back by the first report is not taken for speed
        previous = self._reported_s if self._reported_s is not None else self.done_s
        seen = self._seen.setdefault(mode, [0.0, 0.0])
        seen[0] += wall_s
        seen[1] += max(reported - previous, 0.0)
        self.done_s = self._reported_s = reported

    def resumed(self, overhead_s: float) -> None:
        """A resume costs ``overhead_s`` reference seconds of work (reloading, redone steps)."""
        self.done_s = max(self.done_s - overhead_s, 0.0)

    def observed_speed(self, mode: str) -> float | None:
        wall_s, work_s = self._seen.get(mode, (0.0, 0.0))
        return work_s / wall_s if wall_s >= self.min_watch_s and work_s > 0 else None

    def speed(self, mode: str) -> float:
        """The speed to plan ``mode`` with: as seen, else its figure scaled like the modes seen (the
        slowest such ratio, so an unwatched mode is never assumed faster than the evidence allows)."""
        seen = self.observed_speed(mode)
        if seen is not None:
            return seen
        ratios = [s / self.figures[m].speed for m in self._seen if m in self.figures
                  if (s := self.observed_speed(m)) is not None]
        return self.figures[mode].speed * min(ratios, default=1.0)

    def planning_figures(self, order: Sequence[str]) -> list[ModeFigures]:
        """The figures in ``order`` with the speeds seen so far (source notes the correction)."""
        out: list[ModeFigures] = []
        for name in order:
            f = self.figures[name]
            s = self.speed(name)
            if abs(s - f.speed) > 1e-9 * f.speed:
                f = replace(f, speed=s, source=f"{f.source}; speed {s:.3f} as seen in this run (modelled {f.speed:.3f})")
            out.append(f)
        return out
