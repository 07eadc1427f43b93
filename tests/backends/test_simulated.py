"""The simulated backend: same settings as a GPU, modelled answers, exact restore."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends import Settings, create_backend, load_backend_class, resolve_auto
from backends.errors import UnknownBackend
from backends.gpu_model import H200, TRAINING, operating_point
from backends.simulated import SimulatedBackend


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_energy_integrates_modelled_power_over_time() -> None:
    clock = FakeClock()
    b = SimulatedBackend(clock=clock)
    meter = b.meter()
    meter.begin("all")
    clock.t = 10.0
    w = meter.end("all")
    assert w.energy_j == pytest.approx(b.operating_point().power_w * 10.0)
    assert w.measured is False


def test_lower_power_limit_is_slower_and_draws_less() -> None:
    clock = FakeClock()
    b = SimulatedBackend(clock=clock)
    fast = b.operating_point(Settings(power_limit_w=700))
    slow = b.operating_point(Settings(power_limit_w=350))
    assert slow.power_w < fast.power_w and slow.time_factor > fast.time_factor
    # energy per unit of work falls at a moderate cap (the Zeus effect)
    assert slow.power_w * slow.time_factor < fast.power_w * fast.time_factor


@given(st.floats(200, 700), st.floats(200, 700))
def test_power_and_speed_are_monotone_in_the_limit(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    p_lo = operating_point(H200, TRAINING, power_limit_w=lo)
    p_hi = operating_point(H200, TRAINING, power_limit_w=hi)
    assert p_lo.power_w <= p_hi.power_w + 1e-6
    assert p_lo.time_factor >= p_hi.time_factor - 1e-9


def test_apply_then_restore_returns_to_what_was_found() -> None:
    b = SimulatedBackend(clock=FakeClock())
    before = b.operating_point()
    applied = b.apply(Settings(power_limit_w=300, sm_clock_mhz=(1200, 1200), batch_size=64))
    assert set(applied.changed) == {"power_limit_w", "sm_clock_mhz"}
    assert applied.in_force.batch_size == 64
    again = b.apply(Settings(power_limit_w=300))
    assert "power_limit_w" not in again.changed  # no-op writes are skipped
    b.restore()
    assert b.operating_point() == before
    b.restore()  # idempotent


def test_out_of_range_settings_are_skipped_with_reason() -> None:
    b = SimulatedBackend(clock=FakeClock())
    applied = b.apply(Settings(power_limit_w=5000, mem_clock_mhz=2201))
    assert any("outside" in s for s in applied.skipped)
    assert any("memory clock" in s for s in applied.skipped)


def test_context_manager_restores_on_error() -> None:
    b = SimulatedBackend(clock=FakeClock())
    with pytest.raises(RuntimeError):
        with b:
            b.apply(Settings(power_limit_w=250))
            raise RuntimeError("job crashed")
    assert b.operating_point().power_w > 600


def test_registry_and_auto() -> None:
    assert load_backend_class("simulated") is SimulatedBackend
    assert resolve_auto("auto", gpu_probe=lambda: False) == "simulated"
    assert resolve_auto("auto", gpu_probe=lambda: True) == "nvidia"
    assert resolve_auto("simulated") == "simulated"
    assert isinstance(create_backend("auto"), SimulatedBackend)  # no NVIDIA driver on CI machines
    with pytest.raises(UnknownBackend, match="unknown backend 'amd'"):
        load_backend_class("amd")


def test_capabilities_are_labelled_modelled() -> None:
    caps = SimulatedBackend().capabilities()
    assert caps.measured is False and caps.can_control
    assert caps.power_limit_range_w == (200.0, 700.0)
    assert len(caps.sm_clocks_mhz) == 110
