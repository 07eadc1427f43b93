"""The job's side of clock plans: run the plan gridshift handed over, swap it when a newer mode is
announced, report the switches (in all and per phase) in the result file, and let the report
confirm them. Framework-free: phases are called by hand (the integrations' tests drive them from
real frameworks).

Clock calls go to the fake NVML (tests/fakes) through the NVIDIA backend's journalled path, or to
the executor's dry run; ``flush`` waits for the worker thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from backends.nvidia.backend import NvidiaClockControl
from flows.job.span_settings import job_settings
from plans.integrations.clock_runner import ClockPlanRunner
from plans.integrations.protocol import GridshiftJob, ModeAnnouncement, read_result_file, write_mode_file
from scheduler.report import settings_phrase
from tests.backends.nvidia_helpers import make_backend
from tests.fakes.clock_plans import make_plan, write_plan

FAST = (1980, 1410, 1200)  # per phase: layer0.forward, layer0.backward, optimizer
SLOW = (1410, 1200, 1410)
PHASES = ("layer0.forward", "layer0.backward", "optimizer")


def _files(tmp_path: Path) -> tuple[Path, Path, GridshiftJob]:
    fast = write_plan(tmp_path / "fast.json", make_plan(FAST))
    slow = write_plan(tmp_path / "slow.json", make_plan(SLOW))
    job = GridshiftJob(batch_size=None, mode_file=tmp_path / "mode.json", result_file=tmp_path / "result.json",
                       clock_plan=fast)
    return fast, slow, job


def _announce(job: GridshiftJob, seq: int, mode: str, plan: Path | None) -> ModeAnnouncement:
    ann = ModeAnnouncement(seq=seq, mode=mode, batch_size=None, since=f"2026-12-02T0{seq}:00:00+00:00",
                           clock_plan=str(plan) if plan else None)
    assert job.mode_file is not None
    write_mode_file(job.mode_file, ann)
    return ann


def _sm_locks(fake: Any) -> list[int]:
    return [c[2] for c in fake.state()["calls"] if c[0] == "nvmlDeviceSetGpuLockedClocks"]


def _step(runner: ClockPlanRunner, step: int) -> None:
    runner.on_step(step)
    for phase in PHASES:
        runner.on_phase(phase)
        runner.flush()  # one switch per phase, so the counts below are exact


def test_the_job_runs_its_plan_swaps_it_on_a_mode_change_and_reports_the_switches(tmp_path: Path) -> None:
    fast, slow, job = _files(tmp_path)
    backend, fake, _ = make_backend(tmp_path)
    announced = [_announce(job, 0, "speed", fast)]
    runner = ClockPlanRunner(job, control=NvidiaClockControl(backend), min_interval_s=0.0).start(announced[0])
    for step in range(2):
        _step(runner, step)
    assert _sm_locks(fake) == [*FAST, *FAST]  # the plan's clock at each phase, on the (fake) GPU

    announced.append(_announce(job, 1, "efficiency", slow))
    assert runner.follow(announced[1]) and not runner.follow(announced[1])  # once per announcement
    assert runner.plan_path == str(slow)
    _step(runner, 2)
    assert _sm_locks(fake)[-3:] == list(SLOW)

    announced.append(_announce(job, 2, "eco", None))  # a mode without a plan: the lock is undone
    runner.follow(announced[2])
    assert fake.state()["gpus"][0]["locked_sm_mhz"] is None
    runner.close()

    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    runs = [(r.mode_seq, r.plan, r.step, r.switches, r.errors, r.dry_run) for r in result.clock_plans]
    # fast: 6 locks in 2 steps + the reset at the swap; slow: 3 locks + its reset
    assert runs == [(0, str(fast), 0, 7, 0, False), (1, str(slow), 1, 4, 0, False), (2, None, 2, 0, 0, False)]
    assert result.clock_plans[0].phase_switches == {p: 2 for p in PHASES}
    assert result.clock_plans[1].phase_switches == {p: 1 for p in PHASES}
    resets = [c for c in fake.state()["calls"] if c[0] == "nvmlDeviceResetGpuLockedClocks"]
    assert len(_sm_locks(fake)) + len(resets) == 7 + 4  # what the job reports is what the GPU got

    # gridshift's report: each span confirmed by the job's own account
    words = [settings_phrase(d) for d in job_settings(announced, None, result)]
    per_phase = "switches asked per phase: layer0.backward {n}, layer0.forward {n}, optimizer {n}"
    assert words == [f"clock plan fast.json (run by the job: 7 clock switches; {per_phase.format(n=2)})",
                     f"clock plan slow.json (run by the job: 4 clock switches; {per_phase.format(n=1)})",
                     "clock plan none (the job runs no plan, its clock lock undone)"]
    assert all(s.confirmed and s.applied_by == "job" for d in job_settings(announced, None, result) for s in d)


def test_a_dry_run_is_reported_as_one_and_confirms_no_clock(tmp_path: Path) -> None:
    fast, _, job = _files(tmp_path)
    _, fake, _ = make_backend(tmp_path)
    announced = [_announce(job, 0, "speed", fast)]
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0).start(announced[0])
    _step(runner, 0)
    assert runner.executor is not None and list(runner.executor.control.calls) == [  # type: ignore[attr-defined]
        ("set_locked_sm_clock_mhz", (f, f)) for f in FAST]
    runner.close()
    assert _sm_locks(fake) == []  # nothing reached the GPU
    (span,) = job_settings(announced, None, read_result_file(tmp_path / "result.json"))
    assert settings_phrase(span).startswith(
        "clock plan fast.json (run by the job in dry run: 4 clock switches counted, no clock changed; ")
    assert not span[0].confirmed


def test_a_real_control_under_read_only_is_refused_and_the_errors_reported(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fast, _, job = _files(tmp_path)
    backend, fake, _ = make_backend(tmp_path)
    monkeypatch.setenv("GRIDSHIFT_NVML_READ_ONLY", "1")
    announced = [_announce(job, 0, "speed", fast)]
    runner = ClockPlanRunner(job, control=NvidiaClockControl(backend), min_interval_s=0.0).start(announced[0])
    _step(runner, 0)
    runner.close()
    assert _sm_locks(fake) == []  # refused before the driver
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.clock_plans[0].errors == 3 and result.clock_plans[0].switches == 0
    (span,) = job_settings(announced, None, result)
    assert not span[0].confirmed and span[0].how.startswith("not run by the job: ") and "read-only" in span[0].how


def test_a_corrupt_plan_at_a_mode_change_is_one_warning_and_reported_not_run(tmp_path: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    fast, slow, job = _files(tmp_path)
    slow.write_text("{not json")
    announced = [_announce(job, 0, "speed", fast)]
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0).start(announced[0])
    _step(runner, 0)
    announced.append(_announce(job, 1, "efficiency", slow))
    with caplog.at_level(logging.WARNING, logger="gridshift.integrations"):
        runner.follow(announced[1])
        _step(runner, 1)  # training goes on, at the clocks it has
    runner.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("gridshift")]
    assert warning.startswith("gridshift: clock plan not run: ") and "slow.json" in warning
    words = [settings_phrase(d) for d in job_settings(announced, None, read_result_file(tmp_path / "result.json"))]
    assert "run by the job in dry run" in words[0]
    # a plan that never ran is not reported as "run in dry run" (issue 30: errors come first)
    assert words[1].startswith("clock plan slow.json (not run by the job: ") and "dry run" not in words[1]


def test_a_phase_that_never_starts_gets_one_warning_and_is_named_in_the_report(tmp_path: Path,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    fast, _, job = _files(tmp_path)
    announced = [_announce(job, 0, "speed", fast)]
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0, warn_after_steps=5).start(announced[0])
    with caplog.at_level(logging.WARNING, logger="gridshift.integrations"):
        for step in range(12):
            runner.on_step(step)
            runner.on_phase("layer0.forward")  # nothing marks the backward or the optimizer step
    runner.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("gridshift")]
    assert "layer0.backward, optimizer never started in 5 steps" in warning
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.clock_plans[0].unfired == ("layer0.backward", "optimizer")
    (span,) = job_settings(announced, None, result)
    assert "phase(s) layer0.backward, optimizer never started" in span[0].how


def test_without_a_plan_the_runner_does_nothing(tmp_path: Path) -> None:
    job = GridshiftJob(batch_size=None, mode_file=None, result_file=tmp_path / "result.json")
    runner = ClockPlanRunner(job, dry_run=True).start(None)
    runner.on_step(0)
    runner.on_phase("forward")
    runner.close()
    assert runner.executor is None and not (tmp_path / "result.json").exists()


def test_modes_without_plans_report_nothing_and_a_shared_plan_is_confirmed_per_mode(tmp_path: Path) -> None:
    fast, _, job = _files(tmp_path)
    announced = [_announce(job, 0, "speed", None)]
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0).start(announced[0])
    _step(runner, 0)
    assert runner.executor is None and not (tmp_path / "result.json").exists()  # no plan: nothing to report
    for seq, mode in ((1, "efficiency"), (2, "eco")):  # two modes that share one plan
        announced.append(_announce(job, seq, mode, fast))
        runner.follow(announced[-1])
        _step(runner, seq)
    runner.close()
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and [(r.mode_seq, r.switches) for r in result.clock_plans] == [(1, 4), (2, 4)]
    words = [settings_phrase(d) for d in job_settings(announced, None, result)]
    assert words[0] == "" and all(w.startswith("clock plan fast.json (run by the job in dry run: 4 clock") for w in words[1:])


def test_the_result_file_keeps_acks_plans_and_outcome_whatever_the_order(tmp_path: Path) -> None:
    fast, _, job = _files(tmp_path)
    ann = _announce(job, 0, "speed", fast)
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0).start(ann)
    job.acknowledge(ann, 64, epoch=0)
    job.finish(reached=True, epochs=1)
    runner.close()  # after finish: the outcome is kept
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.reached is True and len(result.batch_sizes) == 1 and len(result.clock_plans) == 1
