"""One contract suite, run against every backend: simulated and nvidia (on the fake NVML)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from backends.base import Backend
from backends.registry import load_backend_class, resolve_auto
from backends.simulated import SimulatedBackend
from backends.types import Settings
from tests.backends.nvidia_helpers import FakeClock, make_backend


def _simulated(tmp_path: Path, clock: FakeClock) -> tuple[Backend, Callable[[], Settings]]:
    backend = SimulatedBackend(clock=clock)
    return backend, lambda: Settings(power_limit_w=backend._settings.power_limit_w,
                                     sm_clock_mhz=backend._settings.sm_clock_mhz)


def _nvidia(tmp_path: Path, clock: FakeClock) -> tuple[Backend, Callable[[], Settings]]:
    backend, fake, _ = make_backend(tmp_path, clock=clock)

    def hardware() -> Settings:
        g = fake.state()["gpus"][0]
        return Settings(power_limit_w=g["power_limit_mw"] / 1000.0,
                        sm_clock_mhz=tuple(g["locked_sm_mhz"]) if g["locked_sm_mhz"] else None)

    return backend, hardware


@pytest.fixture(params=[_simulated, _nvidia], ids=["simulated", "nvidia-fake"])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Backend, Callable[[], Settings], FakeClock]:
    clock = FakeClock()
    backend, hardware = request.param(tmp_path, clock)
    return backend, hardware, clock


def test_capabilities_change_nothing(subject) -> None:
    backend, hardware, _ = subject
    before = hardware()
    caps = backend.capabilities()
    assert caps.devices and caps.power_limit_range_w and caps.sm_clocks_mhz
    assert caps.measured == backend.measured
    assert hardware() == before


def test_apply_then_restore_returns_to_what_was_found(subject) -> None:
    backend, hardware, _ = subject
    before = hardware()
    applied = backend.apply(Settings(power_limit_w=350, sm_clock_mhz=(1200, 1200), batch_size=64))
    assert applied.in_force.power_limit_w == 350 and applied.in_force.batch_size == 64
    assert hardware() != before
    backend.restore()
    assert hardware() == before
    backend.restore()  # idempotent
    assert hardware() == before


def test_prior_is_recorded_once_across_several_applies(subject) -> None:
    backend, hardware, _ = subject
    before = hardware()
    backend.apply(Settings(power_limit_w=500))
    backend.apply(Settings(power_limit_w=300))
    backend.restore()
    assert hardware() == before


def test_a_none_field_means_as_found_not_as_last_applied(subject) -> None:
    """Review repro: apply(400 W, SM locked) then apply(700 W) left the SM clock locked, so the
    deadline guard's switch back to a fast mode did not speed anything up."""
    backend, hardware, _ = subject
    before = hardware()
    backend.apply(Settings(power_limit_w=400, sm_clock_mhz=(1200, 1200)))
    applied = backend.apply(Settings(power_limit_w=700))
    assert applied.in_force.sm_clock_mhz is None
    assert "sm_clock_mhz" in applied.changed
    assert hardware() == Settings(power_limit_w=700, sm_clock_mhz=before.sm_clock_mhz)
    # and a mode that leaves the power limit unset puts back the limit found before the first apply
    backend.apply(Settings(power_limit_w=350))
    applied = backend.apply(Settings(sm_clock_mhz=(1200, 1200)))
    assert applied.in_force.power_limit_w == before.power_limit_w
    assert hardware() == Settings(power_limit_w=before.power_limit_w, sm_clock_mhz=(1200, 1200))
    applied = backend.apply(Settings())
    assert hardware() == before and applied.in_force.sm_clock_mhz is None
    backend.restore()
    assert hardware() == before


def test_context_manager_restores_on_exception(subject) -> None:
    backend, hardware, _ = subject
    before = hardware()
    with pytest.raises(RuntimeError):
        with backend:
            backend.apply(Settings(power_limit_w=250))
            raise RuntimeError("boom")
    assert hardware() == before


def test_meter_windows_are_labelled(subject) -> None:
    backend, _, clock = subject
    meter = backend.meter()
    with meter.window("w") as out:
        clock.advance(5.0)
    window = out[0]
    assert window.energy_j > 0 and window.duration_s == pytest.approx(5.0)
    assert window.measured == backend.measured
    first = backend.energy_mj()
    clock.advance(1.0)
    assert all(backend.energy_mj()[i] >= first[i] for i in first)


@pytest.mark.parametrize("name", ["simulated", "nvidia"])
def test_registry_knows_both(name: str) -> None:
    assert issubclass(load_backend_class(name), Backend)


def test_auto_selects_simulated_without_a_gpu() -> None:
    assert resolve_auto("auto", gpu_probe=lambda: False) == "simulated"
    assert resolve_auto("auto", gpu_probe=lambda: True) == "nvidia"


def test_auto_selects_simulated_on_this_driverless_machine() -> None:
    from backends.registry import nvml_sees_gpu

    if nvml_sees_gpu():
        pytest.skip("an NVIDIA driver is present here")
    assert resolve_auto("auto") == "simulated"
