"""Regressions from the review of the control loop: a carbon outage and a slow clean pace must not
make a job with a deadline miss it (injected clock, no sleeping)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from backends.simulated import SimulatedBackend
from carbon.errors import CarbonError
from carbon.monitor import CarbonMonitor, Reading, SourceSpec
from carbon.providers.trace import TraceProvider
from flows.supervise import SupervisedRun, supervise
from scheduler.planner.thresholds import decide
from tests.flows.test_supervise_timeline import T0, FakeClock, FakeJob, _policy, _signal


class SlowSpeedJob(FakeJob):
    """A FakeJob whose full-speed pace is ``speed_factor`` times slower than expected_duration_s."""

    def __init__(self, *args: object, speed_factor: float, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.speed_factor = speed_factor

    def _factor(self) -> float:
        return self.speed_factor if self.backend.operating_point().power_w >= 650 else self.efficiency_factor


def _run(deadline_h: float, *, outage_after_h: float | None = None, speed_factor: float = 1.0,
         eff_factor: float = 1.7) -> tuple[SupervisedRun, datetime]:
    policy = _policy()
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = CarbonMonitor(sources=[SourceSpec("trace", lambda: TraceProvider(series=_signal(), replay="aligned"))],
                            forecast_horizon=timedelta(hours=6), history_window=timedelta(hours=1))
    real_read = monitor.read

    def read(now: datetime) -> Reading:
        if outage_after_h is not None and now >= T0 + timedelta(hours=outage_after_h):
            raise CarbonError("all carbon sources down")
        return real_read(now)

    reading = real_read(clock())
    first = decide(policy, reading.series, now=clock(), start_at=clock())
    job = SlowSpeedJob(clock, backend, policy.job.expected_duration_s, eff_factor, speed_factor=speed_factor)
    monitor.read = read  # type: ignore[method-assign]
    run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                    first=first, first_reading=reading, start_job=lambda env: job, now=clock, log=lambda s: None,
                    deadline=T0 + timedelta(hours=deadline_h), slowdown={"efficiency": 1.25}, progress=job.progress)
    return run, clock.t


def test_a_carbon_outage_keeps_the_deadline_guard() -> None:
    # the signal is lost just after the switch to the dirty (efficiency) mode, which runs 1.7x slower
    run, end = _run(7.2, outage_after_h=2.1)
    assert end <= T0 + timedelta(hours=7.2), f"ended {end}, after the deadline"
    assert run.spans[-1].mode == "speed"  # the guard forced the clean mode without a fresh reading
    assert any("carbon signal unavailable" in w for w in run.warnings)


def test_work_left_is_counted_at_the_observed_clean_pace() -> None:
    # 1.5x slower than expected_duration_s even at full speed: speed-only ends at 9.0 h. Counting
    # the work left at the expected pace made the loop take the dirty mode and end at 9.6 h.
    run, end = _run(9.4, speed_factor=1.5, eff_factor=1.5 * 1.25)
    assert end <= T0 + timedelta(hours=9.4), f"ended {end}, after the deadline"


class ClaimedBackend(SimulatedBackend):
    """Another run claims the GPU between the flow's control probe and the first apply."""

    def _record_prior(self) -> None:
        from backends.errors import NoPermission

        raise NoPermission("GPU 0 (GPU-x) was just claimed by gridshift pid 4242", action="record prior settings",
                           gpu_index=0)


def _race(require_control: bool) -> tuple[SupervisedRun, list[str], list[str]]:
    policy = _policy()
    if require_control:
        policy = policy.model_copy(update={"backend": policy.backend.model_copy(update={"require_control": True})})
    clock = FakeClock()
    backend = ClaimedBackend(clock=clock.monotonic)
    monitor = CarbonMonitor(sources=[SourceSpec("trace", lambda: TraceProvider(series=_signal(), replay="aligned"))],
                            forecast_horizon=timedelta(hours=6), history_window=timedelta(hours=1))
    reading = monitor.read(clock())
    first = decide(policy, reading.series, now=clock(), start_at=clock())
    job = FakeJob(clock, backend, policy.job.expected_duration_s, 1.25)
    started: list[str] = []
    logs: list[str] = []

    def start_job(env: dict[str, str]) -> FakeJob:
        started.append("job")
        return job

    out = SupervisedRun()
    supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
              first=first, first_reading=reading, start_job=start_job, now=clock, log=logs.append, out=out,
              deadline=T0 + timedelta(hours=10), slowdown={"efficiency": 1.25}, progress=job.progress)
    return out, started, logs


def test_a_gpu_claimed_by_another_run_falls_back_to_measure_only() -> None:
    run, started, logs = _race(require_control=False)
    assert started == ["job"] and run.exit_code == 0
    (warning,) = [w for w in run.warnings if "measure-only" in w]
    assert "just claimed by gridshift pid 4242" in warning
    assert all("measure-only" in s.settings for s in run.spans)  # no later switch tried to apply either


def test_a_gpu_claimed_by_another_run_fails_when_control_is_required() -> None:
    from backends.errors import NoPermission

    with pytest.raises(NoPermission, match="just claimed"):
        _race(require_control=True)
