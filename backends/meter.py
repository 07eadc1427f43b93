"""Named, nestable energy windows over a cumulative energy counter.

Any backend that can answer "cumulative energy per device in mJ" gets windows for free. Counters
that update slowly (NVML: every ~100 ms) make short windows unreliable; a window shorter than
``min_window_s`` is flagged ``approximate`` so reports can say so.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from backends.types import EnergyWindow

__all__ = ["EnergyMeter"]


@dataclass
class _Open:
    name: str
    start_s: float
    start_mj: dict[int, float]


class EnergyMeter:
    """Windows over ``read_mj()`` (device index -> cumulative mJ) timed by ``clock`` (seconds)."""

    def __init__(
        self,
        read_mj: Callable[[], dict[int, float]],
        *,
        clock: Callable[[], float] = time.monotonic,
        measured: bool = True,
        min_window_s: float = 0.5,
        note: str = "",
    ) -> None:
        self._read_mj = read_mj
        self._clock = clock
        self._measured = measured
        self._min_window_s = min_window_s
        self._note = note
        self._open: dict[str, _Open] = {}
        self.windows: list[EnergyWindow] = []

    def begin(self, name: str) -> None:
        if name in self._open:
            raise ValueError(f"energy window {name!r} is already open")
        self._open[name] = _Open(name, self._clock(), self._read_mj())

    def end(self, name: str) -> EnergyWindow:
        try:
            opened = self._open.pop(name)
        except KeyError:
            raise ValueError(f"energy window {name!r} was never opened") from None
        end_mj = self._read_mj()
        end_s = self._clock()
        per_device = {i: (end_mj.get(i, 0.0) - opened.start_mj.get(i, 0.0)) / 1000.0 for i in end_mj}
        duration = end_s - opened.start_s
        window = EnergyWindow(
            name=name,
            start_s=opened.start_s,
            end_s=end_s,
            energy_j=sum(per_device.values()),
            per_device_j=per_device,
            measured=self._measured,
            approximate=duration < self._min_window_s,
            note=self._note,
        )
        self.windows.append(window)
        return window

    @contextmanager
    def window(self, name: str) -> Iterator[list[EnergyWindow]]:
        """``with meter.window("epoch-1") as out: ...``; ``out[0]`` holds the window afterwards."""
        out: list[EnergyWindow] = []
        self.begin(name)
        try:
            yield out
        finally:
            out.append(self.end(name))
