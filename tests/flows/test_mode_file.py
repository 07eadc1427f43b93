"""The mode file during a real run, and what the report may say about the batch size after a switch.

The job is a real subprocess (examples/train_tiny.py, or one that ignores the mode file); the
control loop's clock is injected: each poll advances it by the poll's interval once the job has
started training, so the grid turns dirty mid-run and the loop switches mode without any sleeping.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

from backends.simulated import SimulatedBackend
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.trace import TraceProvider
from carbon.series import IntensityPoint, IntensitySeries
from flows.job.process import start_command
from flows.job.mode_file import ModeFileChannel
from flows.job.span_settings import batch_size_settings
from flows.supervise import supervise
from plans.integrations.protocol import BatchSizeAck, GridshiftJob, ModeAnnouncement, read_mode_file
from scheduler.planner.thresholds import decide
from scheduler.policy.types import Policy
from scheduler.run_spec import resolve_run
from tests.flows.test_supervise_timeline import T0, FakeClock

REPO = Path(__file__).resolve().parents[2]


def _policy() -> Policy:
    return Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0, "batch_size": 256},
                  "efficiency": {"power_limit_fraction": 0.6, "batch_size": 64}},
        "rules": {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300,
                  "min_dwell_s": 0, "interval_s": 600},
        "job": {"name": "switching", "expected_duration_s": 3600},
        "backend": {"name": "simulated"},
    })


def _signal() -> IntensitySeries:
    """Clean for the first 10 minutes, dirty after."""
    step = timedelta(minutes=10)
    return IntensitySeries.of(IntensityPoint(start=T0 + i * step, duration=step, g_per_kwh=100.0 if i == 0 else 500.0)
                              for i in range(36))


class InjectedTimeJob:
    """A real job; each ``wait(timeout)`` waits for real only until the job has begun training (its
    result file exists), then advances the injected clock by ``timeout`` and polls the job briefly."""

    def __init__(self, handle, clock: FakeClock, started: Path, mode_file: Path) -> None:
        self.handle, self.clock, self.started, self.mode_file = handle, clock, started, mode_file
        self.seen_modes: list[dict] = []

    def wait(self, timeout_s: float | None = None) -> int | None:
        while not self.started.exists():
            rc = self.handle.wait(0.05)  # polling a subprocess's readiness, not timing the code under test
            if rc is not None:
                return rc
        self.seen_modes.append(json.loads(self.mode_file.read_text()))
        self.clock.t += timedelta(seconds=float(timeout_s or 0))
        return self.handle.wait(0.2)

    @property
    def tail(self) -> list[str]:
        return self.handle.tail

    def kill(self) -> None:
        self.handle.kill()


def _supervise(tmp_path: Path, argv: list[str], started: Path):
    policy = _policy()
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = CarbonMonitor(sources=[SourceSpec("trace", lambda: TraceProvider(series=_signal(), replay="aligned"))],
                            forecast_horizon=timedelta(hours=6), history_window=timedelta(hours=1))
    reading = monitor.read(clock())
    first = decide(policy, reading.series, now=clock(), start_at=clock())
    channel = ModeFileChannel(tmp_path, resolve_run(policy).batch_sizes(None))
    jobs: list[InjectedTimeJob] = []
    lines: list[str] = []

    def start_job(env: dict[str, str]) -> InjectedTimeJob:
        jobs.append(InjectedTimeJob(start_command(argv, on_line=lines.append, env=env), clock, started,
                                    channel.mode_file))
        return jobs[0]

    run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                    first=first, first_reading=reading, start_job=start_job, now=clock, log=lambda _: None,
                    mode_file=channel)
    return run, jobs[0], lines


def test_the_mode_file_changes_mid_run_and_the_job_switches_batch_size(tmp_path: Path) -> None:
    argv = [sys.executable, str(REPO / "examples" / "train_tiny.py"), "--epochs", "8", "--samples", "2000",
            "--epoch-overhead-s", "0.1"]
    run, job, lines = _supervise(tmp_path, argv, started=tmp_path / "result.json")
    assert run.exit_code == 0, run.tail
    assert [s.mode for s in run.spans] == ["speed", "efficiency"]
    # the file the job read: first the start mode, then the switch, replaced in place
    assert [(m["seq"], m["mode"], m["batch_size"]) for m in job.seen_modes[:2]] == [(0, "speed", 256), (1, "efficiency", 64)]
    assert read_mode_file(tmp_path / "mode.json") == ModeAnnouncement(
        seq=1, mode="efficiency", batch_size=64, since=(T0 + timedelta(seconds=600)).isoformat(),
        reason=run.spans[1].reason)
    # the job read it at an epoch boundary and changed its batch size from there on
    sizes = [int(line.split("batch_size=")[1].split()[0]) for line in lines if line.startswith("epoch ")]
    switch_epoch = sizes.index(64)
    assert 0 < switch_epoch < len(sizes) and set(sizes[:switch_epoch]) == {256} and set(sizes[switch_epoch:]) == {64}
    acks = run.extra["job_result"]["batch_sizes"]
    assert acks == [{"mode_seq": 0, "batch_size": 256, "epoch": 0.0},
                    {"mode_seq": 1, "batch_size": 64, "epoch": float(switch_epoch)}]
    # what each span says is what the job acknowledged
    assert run.spans[0].settings.endswith("batch size 256 (acknowledged by the job at epoch 0)")
    assert run.spans[1].settings.endswith(f"batch size 64 (was 256, the job switched at epoch {switch_epoch})")
    assert run.spans[1].settings.startswith("power limit 420 W (set by gridshift, read back from the simulated GPU)")
    assert [s.to_json() for s in run.spans[1].settings_detail] == [
        {"name": "power_limit_w", "value": 420.0, "applied_by": "gridshift", "confirmed": True,
         "how": "set by gridshift, read back from the simulated GPU"},
        {"name": "batch_size", "value": 64, "applied_by": "job", "confirmed": True,
         "how": f"was 256, the job switched at epoch {switch_epoch}"}]


def test_a_job_that_ignores_the_mode_file_is_reported_with_its_start_batch_size(tmp_path: Path) -> None:
    started = tmp_path / "started"
    code = (f"import pathlib, time; pathlib.Path({str(started)!r}).write_text('x'); "
            "[time.sleep(0.05) for _ in range(20)]")
    run, job, _ = _supervise(tmp_path, [sys.executable, "-c", code], started)
    assert run.exit_code == 0
    assert [s.mode for s in run.spans] == ["speed", "efficiency"]
    assert job.seen_modes[-1]["mode"] == "efficiency"  # gridshift told it ...
    # ... but it never said it listened, so no span claims it ran any batch size
    assert run.spans[0].settings.endswith("batch size 256 (handed to the job, not confirmed)")
    assert run.spans[1].settings.endswith("batch size 64 (handed to the job, not confirmed)")
    for span in run.spans:
        (size,) = [s for s in span.settings_detail if s.name == "batch_size"]
        assert (size.applied_by, size.confirmed) == ("job", False)


def test_batch_sizes_are_confirmed_by_acknowledgements_not_requests() -> None:
    ann = [ModeAnnouncement(0, "speed", 256, ""), ModeAnnouncement(1, "efficiency", 64, ""),
           ModeAnnouncement(2, "speed", 256, ""), ModeAnnouncement(3, "eco", None, "")]
    # acknowledged the switch to 64, missed the switch back (it came between two epoch boundaries)
    acks = [BatchSizeAck(mode_seq=1, batch_size=64, epoch=3)]
    assert [s.phrase() if s else "" for s in batch_size_settings(ann, 256, acks)] == [
        "batch size 256 (handed to the job, not confirmed)",
        "batch size 64 (acknowledged by the job at epoch 3)",
        "batch size 256 (handed to the job, not confirmed; the job last acknowledged 64)",
        "batch size 64 (acknowledged earlier by the job)",
    ]
    assert [s.confirmed for s in batch_size_settings(ann, 256, acks)] == [False, True, False, True]  # type: ignore[union-attr]
    assert batch_size_settings([ModeAnnouncement(0, "speed", None, "")], None, []) == [None]


def test_the_job_helper_is_a_no_op_outside_gridshift(tmp_path: Path) -> None:
    job = GridshiftJob.from_env({})
    assert job.start_batch_size(32) == 32 and job.poll_mode() is None
    job.finish(reached=True)  # nowhere to write: nothing happens
    job = GridshiftJob.from_env({"GRIDSHIFT_BATCH_SIZE": "48", "GRIDSHIFT_MODE_FILE": str(tmp_path / "m.json"),
                                 "GRIDSHIFT_RESULT_FILE": str(tmp_path / "r.json")})
    assert job.start_batch_size(32) == 48 and job.poll_mode() is None  # no mode file written yet
