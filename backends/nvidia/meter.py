"""Energy windows over NVML's energy counter, a power-timeline sampler, and CPU RAPL energy.

Accuracy model (H200/A100 facts in docs/nvidia.md): the NVML total-energy counter (mJ) moves
only every ~100 ms. A window read at its two ends can therefore be off by up to one update period
of energy at each end, |error| <= 2 x 0.1 s x P. Windows of at least ``min_window_s`` (default
1 s) use counter differencing; shorter windows use mean power x duration (power from the sampler
when one runs over the window, else the average of the power reads at both ends) and are flagged
``approximate``. A counter that goes backwards (driver reload) also falls back to power x time.

Windows are named and nestable (any number open at once), and cover all the backend's devices.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backends.meter import EnergyMeter
from backends.types import EnergyWindow

__all__ = ["NvidiaMeter", "PowerSampler", "RaplReader"]


class PowerSampler:
    """Samples total and per-device power on a background thread: a timeline of (t_s, {dev: W}).

    ``sample()`` takes one sample now (also what the thread calls every ``interval_s``), so tests
    drive it with a fake clock and no thread. ``start()``/``stop()`` or ``with sampler:``.
    """

    def __init__(self, read_power_w: Callable[[], dict[int, float]], *, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = 0.1, max_samples: int = 1_000_000) -> None:
        self._read_power_w = read_power_w
        self._clock = clock
        self.interval_s = interval_s
        self._max_samples = max_samples
        self.timeline: list[tuple[float, dict[int, float]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0

    def sample(self) -> None:
        try:
            power = self._read_power_w()
        except Exception:  # a failed read must not kill the sampler thread; counted instead
            self.errors += 1
            return
        now = self._clock()
        with self._lock:
            self.timeline.append((now, power))
            if len(self.timeline) > self._max_samples:
                del self.timeline[: len(self.timeline) - self._max_samples]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> "PowerSampler":
        if self._thread is None:
            self._stop.clear()
            self.sample()
            self._thread = threading.Thread(target=self._run, name="gridshift-power-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "PowerSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def between(self, start_s: float, end_s: float) -> list[tuple[float, float]]:
        """(t_s, total W) samples with start_s <= t_s <= end_s."""
        with self._lock:
            return [(t, sum(p.values())) for t, p in self.timeline if start_s <= t <= end_s]

    def mean_power_w(self, start_s: float, end_s: float) -> float | None:
        samples = self.between(start_s, end_s)
        return sum(p for _, p in samples) / len(samples) if samples else None

    def energy_j(self, start_s: float, end_s: float) -> float | None:
        """Trapezoidal integral of the sampled total power over [start_s, end_s] (None: < 2 samples)."""
        s = self.between(start_s, end_s)
        if len(s) < 2:
            return None
        return sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in zip(s, s[1:]))


class RaplReader:
    """CPU package energy from ``/sys/class/powercap/intel-rapl:N/energy_uj`` (AMD exposes the same).

    Since CVE-2020-8694 ``energy_uj`` is root-only on most distributions; ``readable()`` says so.
    The counter wraps at ``max_energy_range_uj``; ``delta_j`` handles one wrap per window.
    """

    def __init__(self, root: str | Path = "/sys/class/powercap") -> None:
        self.root = Path(root)

    def packages(self) -> list[Path]:
        found = []
        for zone in sorted(self.root.glob("*-rapl:*")):
            if zone.name.count(":") != 1:  # sub-zones (core, uncore, dram) are inside packages
                continue
            try:
                if (zone / "name").read_text().strip().startswith("package"):
                    found.append(zone)
            except OSError:
                continue
        return found

    def readable(self) -> bool:
        try:
            return bool(self.read_uj())
        except OSError:
            return False

    def read_uj(self) -> dict[str, int]:
        return {z.name: int((z / "energy_uj").read_text()) for z in self.packages()}

    def delta_j(self, start_uj: dict[str, int], end_uj: dict[str, int]) -> float:
        total_uj = 0
        for name, end in end_uj.items():
            start = start_uj.get(name, end)
            if end < start:
                wrap = int((self.root / name / "max_energy_range_uj").read_text())
                end += wrap
            total_uj += end - start
        return total_uj / 1e6


@dataclass
class _Begin:
    start_s: float
    start_mj: dict[int, float]
    start_cpu_uj: dict[str, int] | None


class NvidiaMeter(EnergyMeter):
    """Named, nestable windows; counter differencing, power x time for short windows (approximate)."""

    def __init__(
        self,
        read_mj: Callable[[], dict[int, float]],
        read_power_w: Callable[[], dict[int, float]],
        *,
        clock: Callable[[], float] = time.monotonic,
        min_window_s: float = 1.0,
        sampler: PowerSampler | None = None,
        rapl: RaplReader | None = None,
    ) -> None:
        super().__init__(read_mj, clock=clock, measured=True, min_window_s=min_window_s,
                         note="NVML energy counter")
        self._read_power_w = read_power_w
        self.sampler = sampler
        self.rapl = rapl
        self._begun: dict[str, _Begin] = {}
        #: CPU package energy per window name (J), when RAPL is readable
        self.cpu_j: dict[str, float] = {}

    def begin(self, name: str) -> None:
        if name in self._begun:
            raise ValueError(f"energy window {name!r} is already open")
        # No power read here: opening a window stays one NVML call (~4 ms on the H200). A window that
        # turns out short reads power once at its end; NVML's value is itself a ~1 s average on
        # Ampere and later, so it already spans the window.
        cpu = self.rapl.read_uj() if self.rapl is not None else None
        self._begun[name] = _Begin(self._clock(), self._read_mj(), cpu)

    def end(self, name: str) -> EnergyWindow:
        try:
            opened = self._begun.pop(name)
        except KeyError:
            raise ValueError(f"energy window {name!r} was never opened") from None
        end_mj = self._read_mj()
        end_s = self._clock()
        duration_s = max(end_s - opened.start_s, 0.0)
        per_device = {i: (end_mj[i] - opened.start_mj.get(i, end_mj[i])) / 1000.0 for i in end_mj}
        note = "NVML energy counter"
        approximate = False
        if duration_s < self._min_window_s or any(v < 0 for v in per_device.values()):
            approximate = True
            reason = "counter went backwards (driver reload?)" if any(v < 0 for v in per_device.values()) else \
                f"window {duration_s:.3f} s shorter than {self._min_window_s:g} s (counter updates every ~0.1 s)"
            per_device = {i: w * duration_s for i, w in self._mean_power_w(opened, end_s).items()}
            note = f"power x time: {reason}"
        if self.rapl is not None and opened.start_cpu_uj is not None:
            cpu_j = self.rapl.delta_j(opened.start_cpu_uj, self.rapl.read_uj())
            self.cpu_j[name] = cpu_j
            note += f"; CPU packages {cpu_j:.1f} J (RAPL, not included in energy_j)"
        window = EnergyWindow(name=name, start_s=opened.start_s, end_s=end_s, energy_j=sum(per_device.values()),
                              per_device_j=per_device, measured=True, approximate=approximate, note=note)
        self.windows.append(window)
        return window

    def _mean_power_w(self, opened: _Begin, end_s: float) -> dict[int, float]:
        if self.sampler is not None:
            with self.sampler._lock:
                samples = [p for t, p in self.sampler.timeline if opened.start_s <= t <= end_s]
            if not samples:
                samples = [self._read_power_w()]
            keys = samples[0].keys()
            return {i: sum(s.get(i, 0.0) for s in samples) / len(samples) for i in keys}
        return self._read_power_w()
