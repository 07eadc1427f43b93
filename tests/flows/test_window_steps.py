"""The steps each window of a pausable job started and ended at, as the job said them (issue 30):
each start of the job is told its window, the result file's windows are matched to the run's, and
the report (JSON and human) shows them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from flows.report.human import human_report as _human
from flows.job.mode_file import ModeFileChannel
from plans.integrations.protocol import GridshiftJob, read_result_file
from scheduler.report import RunWindow

T0 = datetime(2026, 12, 2, tzinfo=timezone.utc)


def _window(i: int, ended_by: str) -> RunWindow:
    return RunWindow(start=T0 + timedelta(hours=2 * i), end=T0 + timedelta(hours=2 * i + 1), ended_by=ended_by)


def test_each_start_of_the_job_is_told_its_window_and_the_result_names_the_steps(tmp_path: Path) -> None:
    channel = ModeFileChannel(tmp_path, {"speed": 8})
    envs = [channel.job_env("speed"), channel.job_env("speed")]
    assert [e["GRIDSHIFT_WINDOW"] for e in envs] == ["0", "1"]
    first = GridshiftJob.from_env({**envs[0]})
    first.window_started(0)
    first.window_at(37, ended="paused", checkpoint="ckpt/step-37")
    second = GridshiftJob.from_env({**envs[1], "GRIDSHIFT_RESUME": "1"})  # keeps window 0's entry
    second.window_started(37, checkpoint="ckpt/step-37")
    second.window_at(100, ended="finished")
    result = read_result_file(tmp_path / "result.json")
    labelled = channel.label_windows([_window(0, "pause"), _window(1, "exit")], result)
    assert [(w.start_step, w.end_step) for w in labelled] == [(0, 37), (37, 100)]
    assert channel.label_windows([_window(0, "exit")], None)[0].start_step is None  # a job that said nothing


def test_the_human_report_shows_each_windows_steps() -> None:
    windows = [RunWindow(start=T0, end=T0 + timedelta(minutes=50), ended_by="pause", exit_code=0, start_step=0,
                         end_step=37),
               RunWindow(start=T0 + timedelta(hours=3), end=T0 + timedelta(hours=4), ended_by="exit", exit_code=0,
                         start_step=37, end_step=100)]
    report = {"run_id": "r", "status": "completed", "job": "j", "backend": "simulated", "decision_reason": "plan",
              "started_at": T0.isoformat(), "deferred_s": 0.0, "duration_s": 1.0, "measured": False, "modes": [],
              "intensity_g_per_kwh": 100.0, "intensity_kind": "average", "intensity_source": "trace",
              "windows": [w.to_json() for w in windows], "extra": {}}
    lines = [line for line in _human(report).splitlines() if line.startswith("  window")]
    assert lines == ["  window 1   00:00:00-00:50:00 UTC, ended by pause, steps 0-37",
                     "  window 2   03:00:00-04:00:00 UTC, ended by exit, steps 37-100"]
