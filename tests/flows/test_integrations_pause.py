"""A planned pause of each example (issue 30, acceptance 3): the planner pauses a checkpointable job
through dirty hours, the job writes its checkpoint on SIGTERM and exits 0 within ``stop_grace_s``,
and the resumed run goes on from the step it stopped at; the report says at which step each window
started and ended.

The clock is injected (test_supervise_plan's EpochPacedHandle): each poll waits (really) for the
job's next progress line, then moves the clock on by the poll's interval, so a few seconds of real training
are two hours of modelled work. The jobs idle a little per step so they are still training when the
pause comes. Clock plans are off here (test_integrations_run has them).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

from backends.simulated import SimulatedBackend
from flows.job.mode_file import ModeFileChannel
from flows.job.progress import progress_file_reader
from flows.supervise import PROGRESS_ENV, RESUME_ENV, SupervisedRun, supervise
from plans.integrations.protocol import CHECKPOINT_DIR_ENV
from scheduler.run_spec import resolve_run
from tests.flows.test_supervise_plan import FIGURES, EpochPacedHandle, _monitor, _policy, _series
from tests.flows.test_supervise_timeline import T0, FakeClock
from tests.requires import need

REPO = Path(__file__).resolve().parents[2]
#: the job's first line waits for its imports (torch, transformers, lightning) on a loaded machine
FIRST_LINE_S = 240.0


def _pause_and_resume(tmp_path: Path, argv: list[str], prefix: str) -> tuple[SupervisedRun, list[str]]:
    # 2 h of work; clean for 1 h, dirty 1-4 h, clean 4-5 h: the planner runs the job in both clean
    # windows and pauses it through the dirty hours (test_supervise_plan's case, with a real job)
    policy = _policy(work_h=2, deadline_h=6, checkpointable=True, resume_overhead_s=300, stop_grace_s=20,
                     reports_progress=True)
    series = _series(lambda m: 100.0 if m < 60 or 240 <= m < 300 else 600.0)
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = _monitor(series)
    progress_file = tmp_path / "progress"
    channel = ModeFileChannel(tmp_path, resolve_run(policy).batch_sizes(None))
    lines: list[str] = []
    starts: list[dict[str, str]] = []

    def start_job(env: dict[str, str]) -> EpochPacedHandle:
        starts.append(env)
        full = {**env, PROGRESS_ENV: str(progress_file), CHECKPOINT_DIR_ENV: str(tmp_path / "ckpt"),
                "OMP_NUM_THREADS": "1"}
        return EpochPacedHandle(clock, argv, full, lines, prefix=prefix, first_line_s=FIRST_LINE_S)

    def sleep(s: float) -> None:
        clock.t += timedelta(seconds=s)

    run = SupervisedRun()
    supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
              first_reading=monitor.read(clock()), start_job=start_job, now=clock, log=lines.append, out=run,
              deadline=T0 + timedelta(hours=6), figures=FIGURES, sleep=sleep, mode_file=channel,
              progress=progress_file_reader(progress_file))
    assert run.exit_code == 0, lines[-20:]
    assert RESUME_ENV not in starts[0] and starts[1][RESUME_ENV] == "1"
    return run, lines


def _check(run: SupervisedRun, total_steps: int) -> None:
    assert [w.ended_by for w in run.windows] == ["pause", "exit"]
    first, second = run.windows
    # exit 0 on its own: the checkpoint was written within stop_grace_s (SIGKILL would read -9)
    assert first.exit_code == 0 and second.exit_code == 0
    assert first.end <= T0 + timedelta(hours=1, minutes=30) and second.start >= T0 + timedelta(hours=3, minutes=30)
    # the resumed run went on from the step it stopped at: no step lost, none done twice
    assert first.start_step == 0 and 0 < first.end_step == second.start_step < total_steps  # type: ignore[operator]
    assert second.end_step == total_steps
    result = run.extra["job_result"]
    assert [w["ended"] for w in result["windows"]] == ["paused", "finished"] and result["steps"] == total_steps


@pytest.mark.slow
def test_a_paused_hf_trainer_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    need("transformers")
    need("accelerate")
    argv = [sys.executable, str(REPO / "examples" / "train_hf.py"), "--max-steps", "24", "--log-every", "2",
            "--step-overhead-s", "0.3", "--output-dir", str(tmp_path / "out")]
    run, lines = _pause_and_resume(tmp_path, argv, "step ")
    _check(run, 24)
    step = run.windows[0].end_step
    assert (tmp_path / "ckpt" / f"checkpoint-{step}" / "trainer_state.json").is_file()
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("checkpoint-*"))  # not the user's folder
    assert run.extra["job_result"]["windows"][1]["checkpoint"].endswith(f"checkpoint-{step}")


@pytest.mark.slow
def test_a_paused_lightning_job_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    need("lightning")
    argv = [sys.executable, str(REPO / "examples" / "train_lightning.py"), "--epochs", "3", "--steps-per-epoch", "8",
            "--log-every", "2", "--step-overhead-s", "0.3"]
    run, lines = _pause_and_resume(tmp_path, argv, "step ")
    _check(run, 24)
    assert (tmp_path / "ckpt" / f"step-{run.windows[0].end_step}.ckpt").is_file()


@pytest.mark.slow
def test_a_paused_torch_loop_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    need("torch")
    argv = [sys.executable, str(REPO / "examples" / "train_torch.py"), "--epochs", "12", "--steps-per-epoch", "4",
            "--width", "32", "--step-overhead-s", "0.1"]
    run, lines = _pause_and_resume(tmp_path, argv, "rank 0: epoch")
    _check(run, 48)
    step = run.windows[0].end_step
    assert (tmp_path / "ckpt" / f"torch-step-{step}.pt").is_file()
    assert any(line.startswith(f"rank 0: resumed from torch-step-{step}.pt at step {step}") for line in lines)
