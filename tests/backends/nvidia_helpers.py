"""Shared builders for the NVIDIA backend tests (a fake clock, a fake NVML, a backend on both)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from backends.journal import Journal
from backends.nvidia import NvidiaBackend
from backends.nvidia.privilege import Privilege
from tests.fakes.fake_nvml import FakeNvml


class FakeClock:
    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, dt_s: float) -> None:
        self.now_s += dt_s


def privileged() -> Privilege:
    return Privilege(True, "test: privileged")


def unprivileged() -> Privilege:
    return Privilege(False, "test: not root and no CAP_SYS_ADMIN")


def make_backend(tmp_path: Path, *, fake: FakeNvml | None = None, clock: FakeClock | None = None,
                 env: dict[str, str] | None = None, allowed: bool = True, **kw: Any) -> tuple[NvidiaBackend, FakeNvml, FakeClock]:
    clock = clock or FakeClock()
    fake = fake or FakeNvml(clock=clock)
    kw.setdefault("journal", Journal(tmp_path / "journal"))
    backend = NvidiaBackend(nvml=fake, clock=clock, env=env or {},
                            privilege=privileged if allowed else unprivileged, rapl_root=None, **kw)
    return backend, fake, clock


def dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
