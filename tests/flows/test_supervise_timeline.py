"""A long run through a clean-dirty-clean signal, driven by an injected clock (no sleeping).

The fake job advances the clock by each poll's timeout and makes progress at the pace of the mode
the simulated backend is in, so the control loop sees exactly what a real job would report.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from backends.simulated import SimulatedBackend
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.trace import TraceProvider
from carbon.series import IntensityPoint, IntensitySeries
from flows.supervise import supervise
from scheduler.planner.thresholds import decide
from scheduler.policy.types import Policy

T0 = datetime(2024, 3, 1, 0, 0, tzinfo=timezone.utc)
H = 3600.0


def _policy() -> Policy:
    return Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.6, "max_slowdown": 0.25}},
        "rules": {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300,
                  "min_dwell_s": 1800, "interval_s": 600},
        "job": {"name": "long", "expected_duration_s": 6 * H, "deadline_s": 10 * H},
        "backend": {"name": "simulated"},
    })


def _signal() -> IntensitySeries:
    """clean 0-1.5 h, band 1.5-2 h, dirty 2-5 h with one clean 10-min blip at 2:20, clean after 5 h."""
    def value(minute: int) -> float:
        if minute < 90:
            return 100.0
        if minute < 120:
            return 250.0  # inside the hysteresis band
        if 140 <= minute < 150:
            return 100.0  # a blip during the minimum dwell
        if minute < 300:
            return 500.0
        return 100.0
    step = timedelta(minutes=10)
    return IntensitySeries.of(IntensityPoint(start=T0 + i * step, duration=step, g_per_kwh=value(i * 10))
                              for i in range(12 * 6 * 2))


class FakeClock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t

    def monotonic(self) -> float:
        return (self.t - T0).total_seconds()


class FakeJob:
    """Makes progress at 1/real_factor per second; the factor is read from the backend's power limit."""

    def __init__(self, clock: FakeClock, backend: SimulatedBackend, work_s: float, efficiency_factor: float) -> None:
        self.clock, self.backend, self.work_s, self.done_s = clock, backend, work_s, 0.0
        self.efficiency_factor = efficiency_factor

    def _factor(self) -> float:
        return 1.0 if self.backend.operating_point().power_w >= 650 else self.efficiency_factor

    def wait(self, timeout_s: float | None = None) -> int | None:
        step = float(timeout_s or 0)
        need = (self.work_s - self.done_s) * self._factor()
        if need <= step:
            self.clock.t += timedelta(seconds=need)
            self.done_s = self.work_s
            return 0
        self.clock.t += timedelta(seconds=step)
        self.done_s += step / self._factor()
        return None

    def progress(self) -> float:
        return self.done_s / self.work_s

    @property
    def tail(self) -> list[str]:
        return []

    def kill(self) -> None:
        pass


def _run(efficiency_factor: float, deadline_h: float, *, report_progress: bool):
    policy = _policy()
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = CarbonMonitor(sources=[SourceSpec("trace", lambda: TraceProvider(series=_signal(), replay="aligned"))],
                            forecast_horizon=timedelta(hours=6), history_window=timedelta(hours=1))
    reading = monitor.read(clock())
    first = decide(policy, reading.series, now=clock(), start_at=clock())
    job = FakeJob(clock, backend, policy.job.expected_duration_s, efficiency_factor)
    logs: list[str] = []
    run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                    first=first, first_reading=reading, start_job=lambda env: job, now=clock, log=logs.append,
                    deadline=T0 + timedelta(hours=deadline_h), slowdown={"efficiency": 1.25},
                    progress=job.progress if report_progress else None)
    return run, clock.t, logs


def _timeline(run) -> list[tuple[str, float, float]]:
    return [(s.mode, (s.start - T0).total_seconds() / 60, (s.end - T0).total_seconds() / 60) for s in run.spans]


def test_clean_dirty_clean_timeline_with_hysteresis_and_dwell():
    run, end, logs = _run(efficiency_factor=1.25, deadline_h=10, report_progress=True)
    assert run.exit_code == 0
    modes = _timeline(run)
    # speed through clean and the band (hysteresis keeps it), efficiency from the first dirty check,
    # the 2:20 blip is ignored (minimum dwell), speed again once the grid is clean at 5 h
    assert [m for m, _, _ in modes] == ["speed", "efficiency", "speed"]
    assert modes[1][1] == pytest.approx(120) and modes[2][1] == pytest.approx(300)
    assert all(e - s >= 30 for _, s, e in modes[:-1])  # no span shorter than the dwell
    assert end <= T0 + timedelta(hours=10)
    # the energy is metered per span, and the dirty span ran at the lower modelled power
    eff = run.spans[1]
    assert eff.energy_j / (eff.end - eff.start).total_seconds() < run.spans[0].energy_j / (run.spans[0].end - run.spans[0].start).total_seconds()
    assert any("switching speed -> efficiency" in line for line in logs)


def test_deadline_guard_moves_a_slow_efficiency_run_back_to_speed():
    # the job is 1.7x slower in efficiency mode, not the modelled 1.25x: the model promises an end at
    # 7.0 h (inside the 7.2 h deadline less one interval), the real pace would end at 8.8 h
    run, end, logs = _run(efficiency_factor=1.7, deadline_h=7.2, report_progress=True)
    assert run.exit_code == 0
    modes = _timeline(run)
    # speed catches up; efficiency comes back only once the slack allows it at the real pace
    assert [m for m, _, _ in modes] == ["speed", "efficiency", "speed", "efficiency", "speed"]
    # guard fires at the first check after progress shows the real pace, inside the minimum dwell
    assert modes[1][1] == pytest.approx(120) and modes[1][2] == pytest.approx(130)
    assert "after the deadline" in run.spans[1].reason or any("deadline" in line for line in logs)
    assert end <= T0 + timedelta(hours=7.2)


def test_without_progress_reports_the_model_is_trusted():
    # the same slow job without progress reports: the loop cannot see it and misses the deadline,
    # which is why jobs should report progress (documented in docs/scheduling.md)
    run, end, _ = _run(efficiency_factor=1.7, deadline_h=7.2, report_progress=False)
    assert [s.mode for s in run.spans] == ["speed", "efficiency", "speed"]
    assert end > T0 + timedelta(hours=7.2)


def test_progress_file_reader(tmp_path):
    from flows.supervise import progress_file_reader

    path = tmp_path / "progress"
    read = progress_file_reader(path)
    assert read() is None
    path.write_text("0.25\n0.5\n")
    assert read() == 0.5
    path.write_text("done\n")
    assert read() is None
    path.write_text("7\n")
    assert read() is None
