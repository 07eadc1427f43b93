"""One run loop: the product's supervisor and the simulator run scheduler.loop on the same trace and decide alike.

The product side is flows.supervise.supervise with the simulated backend, a trace provider behind
the carbon monitor, a fake job on an injected clock (it makes progress at its mode's figure speed
and reports it); the simulator side is simulation.trace_run on the same trace with a perfect
forecast. Both must switch modes, pause and resume at the same moments.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from backends.simulated import SimulatedBackend
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.trace import TraceProvider
from carbon.series import IntensityPoint, IntensitySeries
from flows.supervise import SupervisedRun, supervise
from scheduler.loop.gate import ForecastChoice
from scheduler.loop.loop import DEFER_PAUSES_OVER_S, SignalReading
from scheduler.planner.deciders import make_decider
from scheduler.planner.grid import GridSignal
from scheduler.policy.types import Policy
from scheduler.run_spec import resolve_run
from simulation.trace_run import TraceDriver, run_job_on_trace

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
STEP = 900.0


def _values(days: int = 3) -> np.ndarray:
    """Dirty evenings, clean small hours, a wobble that makes the planner switch modes."""
    h = np.arange(int(days * 86400 / STEP)) * STEP / 3600.0
    return 300 + 150 * np.cos((h % 24 - 19) / 24 * 2 * math.pi) + 60 * np.sin(h * 1.7)


def _policy(*, checkpointable: bool) -> Policy:
    return Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.7, "max_slowdown": 0.3}},
        "rules": {"kind": "plan", "slot_s": 900, "interval_s": 900, "min_dwell_s": 1800, "deadline_margin_s": 900},
        # a tight deadline makes the job mix its modes; a loose one lets a pausable job pause
        "job": {"name": "j", "command": ["true"], "expected_duration_s": 3 * 3600,
                "deadline_s": 10 * 3600 if checkpointable else 3.5 * 3600,
                "reports_progress": True, "checkpointable": checkpointable, "resume_overhead_s": 300 if checkpointable else 0},
        "backend": {"name": "simulated"},
    })


class _Clock:
    def __init__(self, t: datetime) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += timedelta(seconds=s)


class _Job:
    """Works at the figure speed of the mode the backend's power limit says; reports its fraction done."""

    def __init__(self, clock: _Clock, backend: SimulatedBackend, figures: list, total_s: float, done_s: float) -> None:
        self.clock, self.backend, self.figures, self.total_s, self.done_s = clock, backend, figures, total_s, done_s
        self.stopped = False

    def _speed(self) -> float:
        watts = self.backend.operating_point().power_w
        return min(self.figures, key=lambda f: abs(f.power_w - watts)).speed

    def wait(self, timeout_s: float | None = None) -> int | None:
        if self.stopped:
            return 0
        step = float(timeout_s or 0)
        need = (self.total_s - self.done_s) / self._speed()
        if need <= step:
            self.clock.t += timedelta(seconds=need)
            self.done_s = self.total_s
            return 0
        self.clock.t += timedelta(seconds=step)
        self.done_s += step * self._speed()
        return None

    def kill(self) -> None:
        self.stopped = True

    @property
    def tail(self) -> list[str]:
        return []


def _product(policy: Policy, start: datetime, series: IntensitySeries) -> list[tuple[str, float, float]]:
    """The product's supervisor, as a deployment runs it: a long pause ends the run, the next window is another."""
    clock = _Clock(start)
    backend = SimulatedBackend(clock=lambda: (clock() - T0).total_seconds())
    spec = resolve_run(policy)
    figures = spec.mode_figures(backend=backend)
    monitor = CarbonMonitor(sources=[SourceSpec("trace", lambda: TraceProvider(series=series, replay="aligned"))],
                            forecast_horizon=timedelta(hours=24), history_window=timedelta(hours=1), forecaster=None)
    run, done = SupervisedRun(), 0.0
    jobs: list[_Job] = []

    def start_job(env: dict[str, str]) -> _Job:
        # a resume redoes what the checkpoint lost, as the simulator's job does
        lost = spec.job.resume_overhead_s if env.get("GRIDSHIFT_RESUME") == "1" else 0.0
        jobs.append(_Job(clock, backend, figures, spec.job.expected_duration_s, max(done - lost, 0.0)))
        return jobs[-1]

    for _ in range(20):
        run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                        first_reading=monitor.read(clock()), start_job=start_job, now=clock, log=lambda line: None,
                        deadline=start + timedelta(seconds=spec.job.deadline_s), figures=figures, out=run,
                        progress=lambda: jobs[-1].done_s / jobs[-1].total_s, sleep=clock.sleep,
                        defer_pauses_over_s=DEFER_PAUSES_OVER_S)
        if run.next_window is None:
            break
        done = jobs[-1].done_s if jobs else 0.0
        clock.t, run.next_window = run.next_window, None
    assert run.exit_code == 0
    return _merged([(s.mode, (s.start - T0).total_seconds(), (s.end - T0).total_seconds()) for s in run.spans])


def _simulated(policy: Policy, start: datetime, values: np.ndarray) -> list[tuple[str, float, float]]:
    spec = resolve_run(policy)
    figures = spec.mode_figures(backend=SimulatedBackend())
    truth = GridSignal(values, STEP, 0.0, epoch=T0)

    def read(s: float) -> SignalReading:  # the perfect forecast, as the trace provider gives it
        i = int(s // STEP)
        return SignalReading(GridSignal(values[i:], STEP, i * STEP, epoch=T0), float(values[i]), label="trace")

    driver = TraceDriver(truth, figures, work_s=spec.job.expected_duration_s, read=read, reports_progress=True,
                         resume_overhead_s=spec.job.resume_overhead_s if spec.job.checkpointable else 0.0)
    deadline = start + timedelta(seconds=spec.job.deadline_s)
    run_job_on_trace(driver, lambda done, windows: make_decider(spec, figures, deadline=deadline, pausable=spec.job.pausable,
                                                                done_s=done, explain=False),
                     start_s=(start - T0).total_seconds(), interval_s=spec.interval_s, pausable=spec.job.pausable,
                     choice=ForecastChoice(), clean_mode=spec.clean_mode, give_up_s=1e9)
    return _merged([(figures[m].name, a, b) for a, b, m in driver.spans])


def _merged(spans: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    out: list[tuple[str, float, float]] = []
    for mode, a, b in spans:
        if out and out[-1][0] == mode and abs(out[-1][2] - a) < 1e-3:
            out[-1] = (mode, out[-1][1], b)
        else:
            out.append((mode, a, b))
    return [(m, round(a, 3), round(b, 3)) for m, a, b in out]


@pytest.mark.parametrize("checkpointable", [False, True], ids=["runs-through", "pauses"])
def test_the_product_and_the_simulator_decide_alike_on_one_trace(checkpointable: bool) -> None:
    values = _values()
    series = IntensitySeries.of(IntensityPoint(start=T0 + timedelta(seconds=k * STEP), duration=timedelta(seconds=STEP),
                                               g_per_kwh=float(v)) for k, v in enumerate(values))
    policy = _policy(checkpointable=checkpointable)
    start = T0 + timedelta(days=1, hours=18)
    product, simulated = _product(policy, start, series), _simulated(policy, start, values)
    # there were decisions to get wrong: modes mixed, or pauses
    if checkpointable:
        assert any(b < c for (_, _, b), (_, c, _) in zip(product, product[1:]))
    else:
        assert len({m for m, _, _ in product}) == 2 and len(product) >= 3
    assert product == simulated
