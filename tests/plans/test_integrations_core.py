"""The integrations' shared core (plans/integrations/core.py) on its own, without a framework: the
mode file read at step starts, the plan swapped, batch-size announcements kept for the framework's
boundary, progress and window steps, SIGTERM turned into a stop at the next step, one writer per
job, and every failure of its own one warning line. Time is injected (the polls); no torch.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from plans.integrations.background_writes import BackgroundWriter
from plans.integrations.core import TrainingSession, newest_checkpoint, resume_checkpoint
from plans.integrations.protocol import GridshiftJob, ModeAnnouncement, read_result_file, write_mode_file
from tests.fakes.clock_plans import make_plan, write_plan

PHASES = ("forward", "backward", "optimizer")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"GRIDSHIFT_MODE_FILE": str(tmp_path / "mode.json"), "GRIDSHIFT_RESULT_FILE": str(tmp_path / "result.json"),
            "GRIDSHIFT_PROGRESS_FILE": str(tmp_path / "progress"), "GRIDSHIFT_WINDOW": "0", **more}


def _announce(tmp_path: Path, seq: int, batch_size: int | None, plan: Path | None) -> ModeAnnouncement:
    ann = ModeAnnouncement(seq=seq, mode=("speed", "efficiency")[seq % 2], batch_size=batch_size, since=f"t{seq}",
                           clock_plan=str(plan) if plan else None)
    write_mode_file(tmp_path / "mode.json", ann)
    return ann


def _plans(tmp_path: Path) -> tuple[Path, Path]:
    return (write_plan(tmp_path / "fast.json", make_plan((1980, 1410, 1200), phases=PHASES)),
            write_plan(tmp_path / "slow.json", make_plan((1410, 1200, 1980), phases=PHASES)))


def _train(s: TrainingSession, clock: Clock, steps: range) -> None:
    for step in steps:
        s.step_begin(step)
        for p in PHASES:
            s.phase(p)
        s.runner.flush()
        clock.t += 0.5
        s.step_end(step + 1)


def test_a_mode_change_swaps_the_plan_at_the_next_poll_and_waits_for_the_batch_size_boundary(tmp_path: Path) -> None:
    fast, slow = _plans(tmp_path)
    first = _announce(tmp_path, 0, 64, fast)
    clock = Clock()
    s = TrainingSession(environ=_env(tmp_path), dry_run=True, clock=clock, poll_interval_s=1.0)
    s.start(0, total_steps=10, events=PHASES)
    assert s.batch_size_change() == first  # the mode the job starts in, for its first boundary
    s.acknowledge(first, 64, epoch=0)
    _train(s, clock, range(0, 4))
    s.poll()
    second = _announce(tmp_path, 1, 32, slow)
    s.step_begin(4)  # less than a poll interval since the last look: not seen yet
    assert s.runner.plan_path == str(fast)
    clock.t += 1.0
    _train(s, clock, range(4, 10))  # seen at the next step start: the plan swaps there
    assert s.runner.plan_path == str(slow)
    assert s.batch_size_change() == second and s.batch_size_change() is None  # once, at the job's boundary
    s.acknowledge(second, 64, reason="the loader is fixed", step=10)
    s.finish(10, metric=0.5, metric_name="loss")
    s.close()
    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    assert [(r.mode_seq, r.step, r.dry_run, r.switches > 0) for r in result.clock_plans] == [
        (0, 0, True, True), (1, 4, True, True)]
    assert all(set(r.phase_switches) == set(PHASES) for r in result.clock_plans)
    assert [(a.mode_seq, a.batch_size, a.reason) for a in result.batch_sizes] == [(0, 64, None), (1, 64, "the loader is fixed")]
    assert [(w.window, w.start_step, w.end_step, w.ended) for w in result.windows] == [(0, 0, 10, "finished")]
    assert (result.steps, result.metric) == (10, 0.5)
    assert (tmp_path / "progress").read_text() == "1.000000\n"


def test_progress_is_written_from_the_step_count_at_most_every_poll_interval(tmp_path: Path) -> None:
    clock = Clock()
    s = TrainingSession(environ=_env(tmp_path), dry_run=True, clock=clock, poll_interval_s=1.0)
    s.start(0, total_steps=8)
    seen = []
    for step in range(8):
        clock.t += 0.4
        s.step_end(step + 1)
        s.flush()  # the periodic writes are the writer thread's
        seen.append((tmp_path / "progress").read_text().strip() if (tmp_path / "progress").exists() else None)
    s.close()
    assert seen == ["0.000000", "0.000000", "0.375000", "0.375000", "0.375000", "0.750000", "0.750000", "0.750000"]
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.windows[0].end_step == 6  # the window's last step, with the progress


def test_sigterm_in_a_pausable_run_stops_at_the_next_step_end(tmp_path: Path) -> None:
    clock = Clock()
    env = _env(tmp_path, GRIDSHIFT_CHECKPOINT_DIR=str(tmp_path / "ckpt"))
    before = signal.getsignal(signal.SIGTERM)
    s = TrainingSession(environ=env, dry_run=True, clock=clock)
    s.start(0, total_steps=10)
    assert not s.step_end(1)
    os.kill(os.getpid(), signal.SIGTERM)  # gridshift's planned pause
    assert s.step_end(2)
    s.pause(2, tmp_path / "ckpt" / "step-2")
    s.close()
    assert signal.getsignal(signal.SIGTERM) is before  # handed back
    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    assert [(w.start_step, w.end_step, w.ended, Path(w.checkpoint or "").name) for w in result.windows] == [
        (0, 2, "paused", "step-2")]
    assert result.reached is None and result.steps is None  # paused: no outcome yet


def test_without_a_checkpoint_dir_sigterm_is_left_alone(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    s = TrainingSession(environ=_env(tmp_path), dry_run=True)
    s.start(0, total_steps=10)
    assert signal.getsignal(signal.SIGTERM) is before and not s.step_end(1)
    s.close()


def test_only_rank_0_writes_and_every_rank_runs_the_plan(tmp_path: Path) -> None:
    fast, _ = _plans(tmp_path)
    _announce(tmp_path, 0, 64, fast)
    s = TrainingSession(environ=_env(tmp_path, RANK="1", WORLD_SIZE="2"), dry_run=True)
    assert (s.rank, s.world_size) == (1, 2)
    s.start(0, total_steps=10, events=PHASES)
    _train(s, Clock(), range(3))
    s.finish(3)
    s.close()
    assert s.runner.runs and s.runner.runs[0].switches > 0  # it ran the plan on its own GPU
    assert not (tmp_path / "result.json").exists() and not (tmp_path / "progress").exists()


def test_a_resumed_window_keeps_what_the_earlier_windows_wrote(tmp_path: Path) -> None:
    fast, _ = _plans(tmp_path)
    first = _announce(tmp_path, 0, 64, fast)
    s = TrainingSession(environ=_env(tmp_path, GRIDSHIFT_CHECKPOINT_DIR=str(tmp_path)), dry_run=True)
    s.start(0, total_steps=10, events=PHASES)
    s.acknowledge(first, 64)
    _train(s, Clock(), range(4))
    s.pause(4, tmp_path / "ckpt-4")
    s.close()
    again = TrainingSession(environ=_env(tmp_path, GRIDSHIFT_WINDOW="1", GRIDSHIFT_RESUME="1",
                                         GRIDSHIFT_CHECKPOINT_DIR=str(tmp_path)), dry_run=True)
    again.start(4, total_steps=10, events=PHASES, checkpoint=tmp_path / "ckpt-4")
    _train(again, Clock(), range(4, 10))
    again.finish(10)
    again.close()
    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    assert [(w.window, w.start_step, w.end_step, w.ended) for w in result.windows] == [
        (0, 0, 4, "paused"), (1, 4, 10, "finished")]
    assert [a.mode_seq for a in result.batch_sizes] == [0]  # window 0's acknowledgement survives window 1
    assert [r.mode_seq for r in result.clock_plans] == [0, 0]  # each window's run of the plan


def test_a_hook_that_cannot_be_installed_is_one_warning_and_the_plan_is_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fast, _ = _plans(tmp_path)
    _announce(tmp_path, 0, None, fast)

    class NoHooks:
        """An optimizer wrapper that takes no step hooks (and wraps nothing that does)."""

        def step(self) -> None: ...

    s = TrainingSession(environ=_env(tmp_path), dry_run=True)
    with caplog.at_level(logging.WARNING, logger="gridshift.integrations"):
        s.start(0, total_steps=4, optimizer=NoHooks(), events=("forward", "backward"))
        _train(s, Clock(), range(4))  # training goes on
        s.finish(4)
        s.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("gridshift")]
    assert warning.startswith("gridshift: could not hook the clock plan's phases (cannot hook clock plan phase "
                              "'optimizer': AttributeError") and warning.endswith("the clock plan is dropped, training goes on")
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.steps == 4
    (run,) = result.clock_plans
    assert run.errors == 1 and "cannot hook" in run.last_error and run.switches == 0


def test_an_unreadable_mode_file_is_one_warning_and_training_goes_on(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "mode.json").write_text("{")
    clock = Clock()
    s = TrainingSession(environ=_env(tmp_path), dry_run=True, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gridshift.integrations"):
        s.start(0, total_steps=4)
        for step in range(4):
            clock.t += 2.0
            s.step_begin(step)
            s.step_end(step + 1)
        s.finish(4)
        s.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("gridshift")]
    assert warning.startswith("gridshift: could not read the mode file (BadJobFile: ") and "mode.json:1" in warning


def test_the_newest_complete_checkpoint_is_resumed_only_when_gridshift_says_so(tmp_path: Path,
                                                                                caplog: pytest.LogCaptureFixture) -> None:
    for n in (5, 40, 120):
        (tmp_path / f"checkpoint-{n}").mkdir()
    for n in (5, 40):
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text("{}")
    complete: Any = lambda p: (p / "trainer_state.json").exists()  # noqa: E731
    assert newest_checkpoint(tmp_path, "checkpoint-*", complete=complete) == tmp_path / "checkpoint-40"
    env = {"GRIDSHIFT_CHECKPOINT_DIR": str(tmp_path)}
    assert resume_checkpoint("checkpoint-*", environ=env, complete=complete) is None  # not a resume
    resumed = {**env, "GRIDSHIFT_RESUME": "1"}
    assert resume_checkpoint("checkpoint-*", environ=resumed, complete=complete) == tmp_path / "checkpoint-40"
    with caplog.at_level(logging.WARNING, logger="gridshift.integrations"):
        assert resume_checkpoint("*.ckpt", environ=resumed) is None
    assert "GRIDSHIFT_RESUME=1 but no checkpoint in" in caplog.records[0].getMessage()


def test_outside_gridshift_the_session_does_nothing(tmp_path: Path) -> None:
    s = TrainingSession(environ={}, dry_run=True)
    s.start(0, total_steps=3)
    for step in range(3):
        s.step_begin(step)
        s.phase("forward")
        assert not s.step_end(step + 1)
    assert s.batch_size_change() is None
    s.finish(3)
    s.close()
    assert list(tmp_path.iterdir()) == [] and GridshiftJob.from_env({}).result_file is None


def test_a_second_training_in_one_process_keeps_the_first_ones_record_and_the_mode_in_force(tmp_path: Path) -> None:
    """A script that calls train() (or fit()) twice: one writer, both trainings in the result file."""
    fast, slow = _plans(tmp_path)
    _announce(tmp_path, 0, 64, fast)
    first = TrainingSession(environ=_env(tmp_path), dry_run=True)
    first.start(0, total_steps=10, events=PHASES)
    _announce(tmp_path, 1, 32, slow)
    first.poll()  # the efficiency mode, during the first training
    _train(first, Clock(), range(10))
    first.finish(10)
    first.close()
    second = TrainingSession(environ=_env(tmp_path), dry_run=True, job=first.job)
    second.start(0, total_steps=5, events=PHASES)
    assert second.runner.plan_path == str(slow)  # the mode in force, not the one the process started in
    _train(second, Clock(), range(5))
    second.finish(5)
    second.close()
    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    assert [(r.mode_seq, Path(r.plan or "").name) for r in result.clock_plans] == [
        (0, "fast.json"), (1, "slow.json"), (1, "slow.json")]
    assert [(w.start_step, w.end_step, w.ended) for w in result.windows] == [(0, 10, "finished"), (0, 5, "finished")]


def test_the_periodic_writes_leave_the_training_thread_and_never_overtake_the_final_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step hands its progress and result-file write to the writer thread (a disk may stall); the
    final writes are the session's own, after whatever the writer still had."""
    clock = Clock()
    s = TrainingSession(environ=_env(tmp_path), dry_run=True, clock=clock, poll_interval_s=1.0)
    s.start(0, total_steps=4)
    writers: list[str] = []
    write = GridshiftJob.write
    monkeypatch.setattr(GridshiftJob, "write", lambda job: (writers.append(threading.current_thread().name), write(job)))
    for step in range(4):
        clock.t += 1.0
        s.step_end(step + 1)
    s.flush()
    assert writers and set(writers) == {"gridshift-writes"}  # not on the training thread
    writers.clear()
    s.finish(4)
    s.close()
    assert writers and set(writers) == {threading.current_thread().name}  # the outcome: here, last
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.steps == 4 and result.windows[-1].ended == "finished"
    assert (tmp_path / "progress").read_text() == "1.000000\n"
    assert s.busy_s > 0  # what its calls cost the steps, for the benchmarks


def test_the_background_writer_writes_the_newest_item_and_survives_a_failure() -> None:
    written: list[int] = []
    errors: list[Exception] = []
    entered, release = threading.Event(), threading.Event()

    def write(item: int) -> None:
        if item == 1:
            entered.set()
            release.wait(10)
        if item == 4:
            raise OSError("disk full")
        written.append(item)

    w = BackgroundWriter(write, errors.append)
    w.flush()  # nothing handed over: returns at once
    w.submit(1)
    assert entered.wait(10)
    w.submit(2)
    w.submit(3)  # 2 was never written: 3 replaces it
    release.set()
    w.flush()
    assert written == [1, 3]
    w.submit(4)
    w.flush()
    w.submit(5)  # the thread goes on after a failed write
    w.flush()
    assert written == [1, 3, 5] and [str(e) for e in errors] == ["disk full"]
    w.close()
    w.submit(6)  # after close: written at once, here
    assert written[-1] == 6
