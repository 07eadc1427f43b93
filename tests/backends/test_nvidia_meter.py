"""Counter differencing, short windows as power x time, the sampler, RAPL."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from backends.nvidia import NvidiaMeter, PowerSampler, RaplReader
from backends.types import Settings
from tests.backends.nvidia_helpers import FakeClock, make_backend
from tests.fakes.fake_nvml import FakeNvml, default_state


def test_long_window_is_counter_differencing(tmp_path: Path) -> None:
    backend, fake, clock = make_backend(tmp_path)
    meter = backend.meter()
    meter.begin("epoch")
    clock.advance(10.0)
    w = meter.end("epoch")
    assert w.energy_j == pytest.approx(4000.0)  # 400 W x 10 s, on counter ticks
    assert w.measured and not w.approximate and w.note.startswith("NVML energy counter")


def test_power_limit_caps_the_metered_energy(tmp_path: Path) -> None:
    backend, fake, clock = make_backend(tmp_path)
    backend.apply(Settings(power_limit_w=300))
    meter = backend.meter()
    with meter.window("capped") as out:
        clock.advance(5.0)
    assert out[0].energy_j == pytest.approx(1500.0)
    backend.restore()


def test_short_window_is_power_times_time_and_approximate(tmp_path: Path) -> None:
    backend, fake, clock = make_backend(tmp_path)
    clock.advance(0.05)  # mid-tick: the counter alone would read 0 J for a 30 ms window
    meter = backend.meter()
    meter.begin("step")
    clock.advance(0.03)
    w = meter.end("step")
    assert w.approximate and "power x time" in w.note
    assert w.energy_j == pytest.approx(400.0 * 0.03)


def test_windows_nest_and_cover_every_gpu(tmp_path: Path) -> None:
    state = default_state(gpus=2)
    state["gpus"][1]["draw_mw"] = 200_000
    backend, fake, clock = make_backend(tmp_path, fake=FakeNvml(state=state, clock=(c := FakeClock())), clock=c)
    meter = backend.meter()
    meter.begin("run")
    clock.advance(2.0)
    meter.begin("epoch")
    clock.advance(3.0)
    inner = meter.end("epoch")
    clock.advance(1.0)
    outer = meter.end("run")
    assert inner.per_device_j == pytest.approx({0: 1200.0, 1: 600.0})
    assert outer.energy_j == pytest.approx(600.0 * 6.0)
    with pytest.raises(ValueError):
        meter.end("epoch")


def test_counter_going_backwards_falls_back_to_power_times_time(tmp_path: Path) -> None:
    backend, fake, clock = make_backend(tmp_path)
    meter = backend.meter()
    meter.begin("w")
    clock.advance(5.0)
    fake.update(lambda s: s["gpus"][0].__setitem__("energy_mj", 0.0))  # driver reload
    w = meter.end("w")
    assert w.approximate and "backwards" in w.note and w.energy_j == pytest.approx(2000.0)


@settings(deadline=None, max_examples=40)
@given(st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=1.0, max_value=60.0),
       st.floats(min_value=50.0, max_value=700.0))
def test_counter_error_is_bounded_by_one_update_period_per_end(offset_s: float, length_s: float, draw_w: float) -> None:
    clock = FakeClock(1000.0 + offset_s)
    state = default_state()
    state["gpus"][0]["draw_mw"] = int(draw_w * 1000)
    fake = FakeNvml(state=state, clock=clock)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        backend, _, _ = make_backend(Path(d), fake=fake, clock=clock)
        meter = backend.meter()
        meter.begin("w")
        clock.advance(length_s)
        w = meter.end("w")
    true_j = min(draw_w, 700.0) * length_s
    assert abs(w.energy_j - true_j) <= 2 * 0.1 * min(draw_w, 700.0) + 1e-6 * true_j + 0.002


def test_sampler_timeline_and_integral_with_a_fake_clock() -> None:
    clock = FakeClock(0.0)
    power = {"w": 100.0}
    sampler = PowerSampler(lambda: {0: power["w"], 1: 50.0}, clock=clock)
    for w in (100.0, 200.0, 300.0):
        power["w"] = w
        sampler.sample()
        clock.advance(1.0)
    assert [p for _, p in sampler.between(0.0, 10.0)] == [150.0, 250.0, 350.0]
    assert sampler.energy_j(0.0, 2.0) == pytest.approx((150 + 250) / 2 + (250 + 350) / 2)
    assert sampler.mean_power_w(0.5, 2.0) == pytest.approx(300.0)


def test_sampler_thread_samples_until_stopped() -> None:
    calls = {"n": 0}
    enough = threading.Event()

    def read() -> dict[int, float]:
        calls["n"] += 1
        if calls["n"] >= 5:
            enough.set()
        if calls["n"] == 3:
            raise RuntimeError("transient NVML hiccup")
        return {0: 100.0}

    sampler = PowerSampler(read, interval_s=0.001)
    with sampler:
        assert enough.wait(timeout=30)
    n = calls["n"]
    assert sampler.errors == 1 and len(sampler.timeline) == n - 1
    assert calls["n"] == n  # stopped: no more reads


def test_short_window_uses_the_sampler_mean(tmp_path: Path) -> None:
    backend, fake, clock = make_backend(tmp_path)
    sampler = backend.sampler()
    meter = backend.meter(sampler=sampler)
    meter.begin("step")
    for draw in (400.0, 600.0):
        fake.set_draw_w(0, draw)
        sampler.sample()
        clock.advance(0.01)
    w = meter.end("step")
    assert w.approximate and w.energy_j == pytest.approx(500.0 * 0.02)


def _rapl_tree(root: Path, energy_uj: int, max_uj: int = 1_000_000) -> None:
    pkg = root / "intel-rapl:0"
    sub = root / "intel-rapl:0:0"
    for zone, name in ((pkg, "package-0"), (sub, "core")):
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "name").write_text(name + "\n")
        (zone / "energy_uj").write_text(f"{energy_uj}\n")
        (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")


def test_rapl_reads_packages_and_handles_wraparound(tmp_path: Path) -> None:
    _rapl_tree(tmp_path, 900_000)
    rapl = RaplReader(tmp_path)
    assert rapl.readable() and [p.name for p in rapl.packages()] == ["intel-rapl:0"]
    start = rapl.read_uj()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("100000\n")  # wrapped
    assert rapl.delta_j(start, rapl.read_uj()) == pytest.approx(0.2)
    assert not RaplReader(tmp_path / "absent").readable()


def test_meter_reports_cpu_energy_beside_gpu_energy(tmp_path: Path) -> None:
    _rapl_tree(tmp_path / "powercap", 0)
    backend, fake, clock = make_backend(tmp_path)
    meter = NvidiaMeter(backend.energy_mj, backend.power_w, clock=clock, rapl=RaplReader(tmp_path / "powercap"))
    meter.begin("w")
    (tmp_path / "powercap" / "intel-rapl:0" / "energy_uj").write_text("30000000\n")
    clock.advance(2.0)
    w = meter.end("w")
    assert meter.cpu_j["w"] == pytest.approx(30.0) and "CPU packages 30.0 J" in w.note
    assert w.energy_j == pytest.approx(800.0)
