"""Progress of long commands on a terminal: one line on stderr, rewritten in place, cleared at the end.

Shown only when stderr is a terminal, so a pipe, a file, a CI log and ``--json`` readers of stdout see
nothing of it (``--json`` prints its one object on stdout either way). ``GRIDSHIFT_PROGRESS=0`` turns it off.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Callable

__all__ = ["Progress"]

_CLEAR = "\r\033[K"


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


class Progress:
    """``with Progress("simulating") as p: work(progress=p)``; ``p(done, total)`` or ``p(done, total, "stage")``.

    Redraws at most every ``every_s`` seconds (and at the first and the last step), with the share done,
    the time taken and an estimate of the time left.
    """

    def __init__(self, label: str, *, unit: str = "jobs", stream: IO[str] | None = None, every_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.unit = label, unit
        self.stream = stream if stream is not None else sys.stderr
        self.every_s, self.clock = every_s, clock
        self.shown = os.environ.get("GRIDSHIFT_PROGRESS", "1") != "0" and _is_terminal(self.stream)
        self.began = clock()
        self._last = float("-inf")
        self._drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, done: int, total: int, stage: str = "") -> None:
        if not self.shown:
            return
        now = self.clock()
        if now - self._last < self.every_s and 0 < done < total:
            return
        self._last = now
        took = now - self.began
        share = done / total if total else 0.0
        eta = took / share - took if 0 < share < 1 and took >= 1 else 0.0
        left = f", about {_clock(eta)} left" if eta >= 1 else ""
        what = f" {stage}:" if stage else ""
        self._write(f"{_CLEAR}gridshift: {self.label}{what} {done}/{total} {self.unit} ({share:.0%}), "
                    f"{_clock(took)}{left}")
        self._drawn = True

    def close(self) -> None:
        """Clear the line, so what the command prints next starts on a clean one."""
        if self._drawn:
            self._write(_CLEAR)
            self._drawn = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError:  # the terminal went away: progress is not worth failing the command for
            self.shown = False


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
