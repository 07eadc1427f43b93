"""The training-loop callback: profiling through a backend at step boundaries, profile reuse, epoch restarts."""

from __future__ import annotations

import pytest

from backends.meter import EnergyMeter
from backends.simulated import SimulatedBackend
from plans.integrations.power_limit import PowerLimitCallback
from plans.power_limit import Done, PowerLimitProfiler
from plans.profile_store import ProfileStore
from plans.selectors import ZeusCost


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Loop:
    """A training loop whose steps take the modelled time of the limit in force."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.backend = SimulatedBackend(clock=self.clock)
        self.meter = EnergyMeter(self.backend.energy_mj, clock=self.clock, measured=False)
        self.limits_seen: list[float] = []

    def step(self, cb: PowerLimitCallback) -> None:
        cb.on_step_begin()
        self.limits_seen.append(self.backend.operating_point().power_w)
        self.clock.t += 0.1 * self.backend.operating_point().time_factor
        cb.on_step_end()


def make(loop: Loop, store: ProfileStore | None, limits=(700, 500, 300)) -> PowerLimitCallback:
    prof = PowerLimitProfiler(limits, ZeusCost(0.5), wait_steps=1, warmup_steps=2, profile_steps=5)
    return PowerLimitCallback(loop.backend, prof, meter=loop.meter, store=store, gpu_model="H200", fingerprint="fp")


def test_profiles_every_limit_selects_and_saves(tmp_path):
    loop = Loop()
    store = ProfileStore(tmp_path)
    cb = make(loop, store)
    with loop.backend:
        for _ in range(40):
            loop.step(cb)
        assert cb.done and isinstance(cb.state, Done)
        assert [m.power_limit_w for m in cb.profile] == [700.0, 500.0, 300.0]
        assert loop.backend.current.in_force.power_limit_w == cb.state.selected_w
    # restored on exit (the simulated backend started at its default)
    assert loop.backend.operating_point().power_w > 600
    saved = store.load("H200", "fp")
    assert saved is not None and saved.measured is False and len(saved.measurements) == 3
    # the profile is consistent with the model: lower limits are slower per step
    times = [m.time_per_step_s for m in saved.measurements]
    assert times == sorted(times)


def test_reuses_a_stored_profile_without_profiling(tmp_path):
    store = ProfileStore(tmp_path)
    first = Loop()
    cb = make(first, store)
    for _ in range(40):
        first.step(cb)
    second = Loop()
    cb2 = make(second, store)
    assert cb2.reused and cb2.done
    second.step(cb2)
    assert second.backend.current.in_force.power_limit_w == cb.state.selected_w
    assert not second.meter.windows  # nothing was measured


def test_epoch_end_mid_window_restarts_that_limit():
    loop = Loop()
    cb = make(loop, None)
    for _ in range(5):  # wait 2, warm-up 2, then the window is open
        loop.step(cb)
    cb.on_epoch_end()
    assert loop.backend.current.in_force.power_limit_w == 700
    assert loop.meter.windows and not cb.profile  # the cut window was discarded
    for _ in range(60):
        loop.step(cb)
    assert cb.done and len(cb.profile) == 3


def test_request_limit_applies_at_the_next_step_once_done(tmp_path):
    loop = Loop()
    cb = make(loop, None)
    cb.request_limit(400)  # ignored while profiling
    for _ in range(40):
        loop.step(cb)
    cb.request_limit(450)
    assert loop.backend.current.in_force.power_limit_w != 450
    loop.step(cb)
    assert loop.backend.current.in_force.power_limit_w == 450


def test_the_core_of_the_integrations_imports_no_framework():
    """plans and the framework-free integrations stay importable (and fast) without torch or a framework."""
    import subprocess
    import sys

    code = ("import sys, plans, plans.integrations.core, plans.integrations.power_limit; "
            "assert not {'torch', 'transformers', 'lightning'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
