"""restoring_on_signals: restore on exit, exception, and at once on SIGINT/SIGTERM/SIGHUP (in-process)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from backends.safety import restoring_on_signals
from backends.types import Settings
from tests.backends.nvidia_helpers import make_backend


def test_restores_on_normal_exit_and_on_exception(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    with restoring_on_signals(backend):
        backend.apply(Settings(power_limit_w=300))
    assert fake.state()["gpus"][0]["power_limit_mw"] == 700_000
    with pytest.raises(RuntimeError):
        with restoring_on_signals(backend):
            backend.apply(Settings(power_limit_w=300))
            raise RuntimeError("training crashed")
    assert fake.state()["gpus"][0]["power_limit_mw"] == 700_000


@pytest.mark.parametrize(("sig", "exc"), [(signal.SIGTERM, SystemExit), (signal.SIGINT, KeyboardInterrupt),
                                          (signal.SIGHUP, SystemExit)])
def test_signal_restores_before_unwinding(tmp_path: Path, sig: int, exc: type) -> None:
    backend, fake, _ = make_backend(tmp_path)
    before = signal.getsignal(sig)
    seen: list[int] = []
    with pytest.raises(exc):
        with restoring_on_signals(backend):
            backend.apply(Settings(power_limit_w=300, sm_clock_mhz=(1005, 1005)))
            try:
                os.kill(os.getpid(), sig)
            finally:  # the handler already restored, before any outer cleanup ran
                seen.append(fake.state()["gpus"][0]["power_limit_mw"])
    assert seen == [700_000]
    assert fake.state()["gpus"][0]["locked_sm_mhz"] is None
    assert signal.getsignal(sig) == before


def test_an_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # `nohup`: keep running when the terminal goes
    try:
        with restoring_on_signals(backend):
            backend.apply(Settings(power_limit_w=300))
            os.kill(os.getpid(), signal.SIGHUP)
            assert fake.state()["gpus"][0]["power_limit_mw"] == 300_000  # still applied: the run goes on
        assert fake.state()["gpus"][0]["power_limit_mw"] == 700_000
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_an_ignored_sigint_still_restores(tmp_path: Path) -> None:
    # `cmd &` in a non-interactive shell starts with SIGINT ignored: `kill -INT` must still restore
    backend, fake, _ = make_backend(tmp_path)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt):
            with restoring_on_signals(backend):
                backend.apply(Settings(power_limit_w=300))
                os.kill(os.getpid(), signal.SIGINT)
        assert fake.state()["gpus"][0]["power_limit_mw"] == 700_000
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
