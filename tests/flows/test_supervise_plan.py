"""The run path follows the planner: receding horizon through a clean-dirty-clean signal, a job slower
than modelled re-planned on its progress, and a pausable job stopped and resumed for real.

The clock is injected: a fake job advances it by each poll's timeout, and a real subprocess's handle
is wrapped so that each poll lets the job finish one epoch of real work while the clock moves on.
"""

from __future__ import annotations

import queue
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from backends.simulated import SimulatedBackend
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.trace import TraceProvider
from carbon.series import IntensityPoint, IntensitySeries
from flows.job.process import start_command
from flows.job.progress import progress_file_reader
from flows.supervise import PROGRESS_ENV, RESUME_ENV, SupervisedRun, supervise
from flows.job.windows import CHECKPOINT_DIR_ENV
from scheduler.planner import ModeFigures
from scheduler.planner.inputs import plan_policy_job
from scheduler.policy.types import Policy
from tests.flows.test_supervise_timeline import T0, FakeClock, FakeJob

H = 3600.0
REPO = Path(__file__).resolve().parents[2]
#: the simulated H200's modes as the planner sees them: efficiency 0.6 W fraction, 1.25x slower
FIGURES = [ModeFigures("speed", 700.0, 1.0, "test figures", False),
           ModeFigures("efficiency", 420.0, 0.8, "test figures", False)]


def _policy(work_h: float, deadline_h: float, **job: object) -> Policy:
    return Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.6}},
        "rules": {"kind": "plan", "min_dwell_s": 1800, "interval_s": 600, "deadline_margin_s": 600, "slot_s": 300},
        "job": {"name": "long", "expected_duration_s": work_h * H, "deadline_s": deadline_h * H, **job},
        "backend": {"name": "simulated"},
    })


def _series(value_at_minute) -> IntensitySeries:
    step = timedelta(minutes=10)
    return IntensitySeries.of(IntensityPoint(start=T0 + i * step, duration=step, g_per_kwh=value_at_minute(i * 10))
                              for i in range(6 * 24))


def _clean_dirty_clean(minute: int) -> float:
    """clean until 1:30, dirty 1:30-5:00, clean after."""
    return 100.0 if minute < 90 or minute >= 300 else 500.0


def _monitor(series: IntensitySeries) -> CarbonMonitor:
    return CarbonMonitor(sources=[SourceSpec("trace", lambda: TraceProvider(series=series, replay="aligned"))],
                         forecast_horizon=timedelta(hours=12), history_window=timedelta(hours=1))


def _run_fake(policy: Policy, series: IntensitySeries, *, efficiency_factor: float, report_progress: bool = True):
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = _monitor(series)
    reading = monitor.read(clock())
    job = FakeJob(clock, backend, policy.job.expected_duration_s, efficiency_factor)
    logs: list[str] = []

    def sleep(s: float) -> None:
        clock.t += timedelta(seconds=s)

    run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                    first_reading=reading, start_job=lambda env: job, now=clock, log=logs.append,
                    deadline=T0 + timedelta(seconds=policy.job.deadline_s or 0), figures=FIGURES, sleep=sleep,
                    progress=job.progress if report_progress else None)
    return run, clock.t, reading, logs


def _timeline(spans) -> list[tuple[str, float, float]]:
    out: list[tuple[str, float, float]] = []
    for s in spans:
        a, b = (s.start - T0).total_seconds() / 60, (s.end - T0).total_seconds() / 60
        if out and out[-1][0] == s.mode and abs(out[-1][2] - a) < 1e-6:
            out[-1] = (s.mode, out[-1][1], b)
        else:
            out.append((s.mode, a, b))
    return out


def test_the_mode_timeline_follows_the_plan_through_clean_dirty_clean() -> None:
    policy = _policy(work_h=6, deadline_h=7)  # 1 h of slack: efficiency (1.25x slower) fits for ~3.5 h
    series = _series(_clean_dirty_clean)
    run, end, reading, logs = _run_fake(policy, series, efficiency_factor=1.25)
    plan = plan_policy_job(policy, reading.series, FIGURES, now=T0, work_s=6 * H, not_before=T0,
                           deadline=T0 + timedelta(hours=7), start_now=True)
    assert run.exit_code == 0 and plan.feasible
    planned = _timeline(plan.segments)
    ran = _timeline(run.spans)
    # the plan the run started from uses both modes, and the run did what it said, to two slots: each
    # re-plan counts the work left from its own first slot, so its rounding may move a switch by a
    # slot or two (here the run keeps speed through the whole first clean stretch, which is cheaper)
    assert {m for m, _, _ in planned} == {"speed", "efficiency"}
    assert [m for m, _, _ in ran] == [m for m, _, _ in planned]
    for (_, a0, b0), (_, a1, b1) in zip(planned, ran):
        assert a1 == pytest.approx(a0, abs=10) and b1 == pytest.approx(b0, abs=10)
    assert end <= T0 + timedelta(hours=7)
    # each span says why, in the plan's words; the report keeps the plan and the figures' sources
    assert all(s.reason for s in run.spans)
    assert run.reason == plan.reason
    assert run.extra["plan"]["feasible"] is True
    # the planner's count of its plan, and the bound it was held to, are in the report (--json extra.plan)
    assert 0.0 <= run.extra["plan"]["rounding"] <= run.extra["plan"]["max_rounding"] == 0.01
    assert {f["source"] for f in run.extra["mode_figures"]} == {"test figures"}
    assert run.extra["replans"] > 10  # it re-planned every interval, not only at the start
    # the run's start had come (the start is deploy/serve's choice), so it started at once
    assert planned[0][1] == 0 and ran[0][1] == 0
    assert len(run.windows) == 1 and run.windows[0].ended_by == "exit"


def test_a_job_without_a_deadline_is_not_explained_by_a_margin_it_never_had() -> None:
    policy = Policy.model_validate({**_policy(work_h=1, deadline_h=2).model_dump(mode="json", exclude_none=True),
                                    "job": {"name": "free", "expected_duration_s": H}})
    assert policy.job.deadline_s is None
    plan = plan_policy_job(policy, _series(lambda m: 300.0), FIGURES, now=T0, work_s=H, not_before=T0,
                           deadline=None, start_now=True)
    assert plan.feasible and plan.start == T0
    assert "margin" not in plan.reason and "deadline" not in plan.reason, plan.reason


def test_the_issue_case_ends_in_time_with_the_modes_real_slowdown() -> None:
    # issue 10: a 6 h job, a 6.5 h deadline, an efficiency mode 1.25x slower. The old guard counted
    # the slow mode as 1.0x (no max_slowdown) and ended at 7.3 h.
    policy = _policy(work_h=6, deadline_h=6.5)
    run, end, _, _ = _run_fake(policy, _series(lambda m: 500.0 if 60 <= m < 240 else 100.0), efficiency_factor=1.25,
                               report_progress=False)
    assert run.exit_code == 0
    assert "efficiency" in {s.mode for s in run.spans}  # it did use the slack
    assert end <= T0 + timedelta(hours=6.5)


@pytest.mark.parametrize("real_factor", [1.25, 1.7, 2.0])
def test_a_job_slower_than_modelled_meets_its_deadline_by_replanning_on_progress(real_factor: float) -> None:
    # the figures say efficiency is 1.25x slower; the job really is up to 2x slower there. The first
    # plan counts on 1.25x; the progress reports show the real pace and the re-plans move work to
    # the speed mode in time.
    policy = _policy(work_h=6, deadline_h=7.5)
    run, end, _, _ = _run_fake(policy, _series(_clean_dirty_clean), efficiency_factor=real_factor)
    assert run.exit_code == 0
    assert "efficiency" in {s.mode for s in run.spans}
    assert end <= T0 + timedelta(hours=7.5), f"ended {end}, after the deadline"


def test_without_progress_reports_a_much_slower_job_is_late() -> None:
    # the control: without progress reports the loop can only trust the figures
    policy = _policy(work_h=6, deadline_h=7.5)
    run, end, _, _ = _run_fake(policy, _series(_clean_dirty_clean), efficiency_factor=2.0, report_progress=False)
    assert end > T0 + timedelta(hours=7.5)


class EpochPacedHandle:
    """A real subprocess's handle; each poll waits (really) for its next epoch line (a line starting
    with ``prefix``), then moves the injected clock on by the poll's timeout, so one epoch of real
    work is one poll of modelled time. The first line may take ``first_line_s`` (the job's imports)."""

    def __init__(self, clock: FakeClock, argv: list[str], env: dict[str, str], lines: list[str], *,
                 prefix: str = "epoch ", first_line_s: float = 30.0) -> None:
        self.clock, self.lines = clock, lines
        self.epochs: queue.Queue[str] = queue.Queue()
        self.first_line_s, self.seen = first_line_s, False

        def on_line(line: str) -> None:
            lines.append(line)
            if line.startswith(prefix):
                self.epochs.put(line)

        self.handle = start_command(argv, on_line=on_line, env=env, kill_grace_s=20.0)

    def wait(self, timeout_s: float | None = None) -> int | None:
        rc = None
        for _ in range(int((30.0 if self.seen else self.first_line_s) / 0.05)):  # at most 30 s for one epoch
            try:
                self.epochs.get(timeout=0.05)
                self.seen = True
                break
            except queue.Empty:
                if (rc := self.handle.wait(timeout_s=0.0)) is not None:
                    break
        rc = self.handle.wait(timeout_s=0.0) if rc is None else rc
        self.clock.t += timedelta(seconds=float(timeout_s or 0.0))
        return rc

    @property
    def tail(self) -> list[str]:
        return self.handle.tail

    def kill(self) -> None:
        self.handle.kill()


def test_a_pausable_job_runs_for_real_through_pause_and_resume(tmp_path: Path) -> None:
    # 2 h of work; clean for 1 h, dirty 1-4 h, clean 4-5 h, dirty after; due at 6 h. A checkpointable
    # job runs in both clean windows and pauses through the dirty hours.
    policy = _policy(work_h=2, deadline_h=6, checkpointable=True, resume_overhead_s=300, stop_grace_s=20)
    series = _series(lambda m: 100.0 if m < 60 or 240 <= m < 300 else 600.0)
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = _monitor(series)
    progress_file = tmp_path / "progress"
    epochs = 12  # one epoch per poll (10 minutes at most): 2 h of work at the modelled speed
    # each epoch idles 0.5 s, so the job waits for the supervisor's polls and not the other way round: a
    # job free to run all its epochs before the planned pause (as a loaded CI machine once let it) exits
    # instead of pausing
    argv = [sys.executable, str(REPO / "examples" / "train_tiny.py"), "--epochs", str(epochs), "--epoch-pause-s", "0.5"]
    lines: list[str] = []
    starts: list[dict[str, str]] = []

    def start_job(env: dict[str, str]) -> EpochPacedHandle:
        starts.append(env)
        full = {**env, PROGRESS_ENV: str(progress_file), CHECKPOINT_DIR_ENV: str(tmp_path / "ckpt")}
        return EpochPacedHandle(clock, argv, full, lines)

    def sleep(s: float) -> None:
        clock.t += timedelta(seconds=s)

    run = SupervisedRun()
    supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
              first_reading=monitor.read(clock()), start_job=start_job, now=clock, log=lines.append, out=run,
              deadline=T0 + timedelta(hours=6), figures=FIGURES, sleep=sleep, progress=progress_file_reader(progress_file))
    assert run.exit_code == 0, lines[-10:]
    # two windows: the first ended by the planned pause, the second by the job's own end
    assert [w.ended_by for w in run.windows] == ["pause", "exit"]
    first, second = run.windows
    assert first.exit_code == 143 and second.exit_code == 0
    assert first.end <= T0 + timedelta(hours=1, minutes=30) and second.start >= T0 + timedelta(hours=3, minutes=30)
    assert second.end <= T0 + timedelta(hours=6)
    assert first.work_measured and first.work_s > 0 and second.work_s > 0
    # the job was told to resume, found its checkpoint and went on from it
    assert RESUME_ENV not in starts[0] and starts[1][RESUME_ENV] == "1"
    assert any(line.startswith("checkpoint written after epoch") for line in lines)
    assert any(line.startswith("resumed from train_tiny.npz after epoch") for line in lines)
    # no span runs inside the pause, and every span belongs to a window
    for s in run.spans:
        assert any(w.start <= s.start and s.end <= w.end for w in run.windows)
    # checkpoint and resume lose nothing: the final weights are those of an uninterrupted run
    straight = []
    EpochPacedHandle(FakeClock(), argv, {}, straight).handle.wait(timeout_s=60)
    last = lambda out: [x for x in out if x.startswith(f"epoch {epochs}/")][-1].split("w_sum=")[1]  # noqa: E731
    assert last(lines) == last(straight)


class LoadedHostJob(FakeJob):
    """The same job on a host busy with other work: every mode runs ``host`` times slower in wall time."""

    def __init__(self, *args: object, host: float) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.host = host

    def _factor(self) -> float:
        return super()._factor() * self.host


@pytest.mark.parametrize("report_progress", [True, False])
def test_simulated_energy_comes_from_the_model_not_from_the_hosts_load(report_progress: bool) -> None:
    # issue 22: the same job gave 1094-2373 J on a busy machine, because the simulated GPU integrated
    # its modelled power over wall time. With progress reports the work done is known and the energy
    # is the model's: the modes' power over the modelled time of that work.
    policy = _policy(work_h=1, deadline_h=10)
    energies = []
    for host in (1.0, 2.5):
        clock = FakeClock()
        backend = SimulatedBackend(clock=clock.monotonic)
        monitor = _monitor(_series(lambda m: 300.0))
        job = LoadedHostJob(clock, backend, policy.job.expected_duration_s, 1.25, host=host)

        def sleep(s: float) -> None:
            clock.t += timedelta(seconds=s)

        run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                        first_reading=monitor.read(clock()), start_job=lambda env: job, now=clock, log=lambda _: None,
                        deadline=T0 + timedelta(hours=10), figures=FIGURES, sleep=sleep,
                        progress=job.progress if report_progress else None)
        assert run.exit_code == 0 and {s.mode for s in run.spans} == {"efficiency"}
        energies.append(run.energy_j)
        assert run.windows[0].energy_j == pytest.approx(run.energy_j)
    if report_progress:  # 1 h of work at efficiency (420 W, speed 0.8): 420 W x 1.25 h, on any host
        assert energies[0] == pytest.approx(energies[1]) == pytest.approx(420.0 * 1.25 * H)
    else:  # no evidence of the work done but wall time: the meter's figure, which grows with the load
        assert energies[1] == pytest.approx(energies[0] * 2.5)


def test_a_job_that_says_it_reports_progress_and_does_not_keeps_the_margin_as_time() -> None:
    """job.reports_progress lets the planner keep the margin as a pace reserve; with no report within
    an interval the run says so once and plans with the margin as time, which a job slower than its
    figures (unseen without reports) needs."""
    policy = _policy(work_h=6, deadline_h=7, reports_progress=True)
    run, end, _, logs = _run_fake(policy, _series(_clean_dirty_clean), efficiency_factor=1.0, report_progress=False)
    warned = [w for w in run.warnings if "reported no progress" in w]
    assert len(warned) == 1 and any("reported no progress" in line for line in logs)
    assert run.exit_code == 0 and end <= T0 + timedelta(hours=7)
    quiet, _, _, _ = _run_fake(policy, _series(_clean_dirty_clean), efficiency_factor=1.0)
    assert not [w for w in quiet.warnings if "reported no progress" in w]
