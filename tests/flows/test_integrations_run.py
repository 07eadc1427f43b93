"""Each example under a real ``gridshift run`` (issue 30, acceptance 1, 2 and 5): a policy whose two
modes differ in batch size and clock plan, and a grid that turns dirty once the job is training.

The grid is a local HTTP server playing the UK grid API (tests/fakes/switchable_grid.py), switched
to dirty when the job prints its first steps, so the mode change comes mid-run on an event, not on
the clock of a quiet machine; the jobs idle a little per step (``--step-overhead-s``), so they are
still training, seconds later, when gridshift's next decision (every second) and the job's next
look at the mode file (every 0.2 s) come, even on a loaded machine. Expected: exit 0; both modes in the report; in each mode the batch size
confirmed by the job (applied, or kept with the reason) and the clock plan run by the job (a dry
run: GRIDSHIFT_NVML_READ_ONLY=1) with switches asked at every phase of the plan; the job's progress
read by the run loop; the outcome recorded. ``train_torch.py`` runs as two gloo ranks under
``torchrun``: rank 0 writes gridshift's files, both ranks follow the mode.

Runs against the session's Prefect server (tests/conftest.py); the simulated backend.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.fakes.clock_plans import make_plan, write_plan
from tests.fakes.switchable_grid import SwitchableGrid
from tests.requires import need

REPO = Path(__file__).resolve().parents[2]
PHASES = ("forward", "backward", "optimizer")
#: a loaded 2-core machine imports torch, transformers and lightning slowly; the runs take seconds of training
RUN_TIMEOUT_S = 420


def _policy(tmp_path: Path, grid: SwitchableGrid, argv: list[str], *, speed_batch: int, efficiency_batch: int) -> Path:
    write_plan(tmp_path / "fast.json", make_plan((1980, 1410, 1200), phases=PHASES))
    write_plan(tmp_path / "slow.json", make_plan((1410, 1200, 1980), phases=PHASES))
    policy = {
        "schema_version": 1,
        "carbon": {"provider": "ukgrid", "base_url": grid.url},
        "modes": {"speed": {"power_limit_fraction": 1.0, "batch_size": speed_batch, "clock_plan": "fast.json"},
                  "efficiency": {"power_limit_fraction": 0.6, "batch_size": efficiency_batch, "clock_plan": "slow.json",
                                 "max_slowdown": 0.5}},
        "rules": {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300, "min_dwell_s": 0,
                  "interval_s": 1},
        "job": {"name": "integration", "command": argv, "expected_duration_s": 60, "reports_progress": True},
        "backend": {"name": "simulated"},
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def _run(prefect_server, tmp_path: Path, argv: list[str], *, speed_batch: int, efficiency_batch: int,
         dirty_after: str) -> tuple[dict, list[str]]:
    """``gridshift run --json POLICY`` with ``argv`` as the policy's job; the grid turns dirty at the
    job's first line that holds ``dirty_after``. Returns the report and the job's lines (stderr)."""
    with SwitchableGrid(100.0) as grid:
        policy = _policy(tmp_path, grid, argv, speed_batch=speed_batch, efficiency_batch=efficiency_batch)
        env = {**prefect_server.env_for(tmp_path), "GRIDSHIFT_NVML_READ_ONLY": "1", "OMP_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1"}
        gridshift = str(Path(sys.executable).parent / "gridshift")
        proc = subprocess.Popen([gridshift, "run", "--json", str(policy)], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []

        def read_stderr() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line.rstrip("\n"))
                if dirty_after in line:
                    grid.g_per_kwh = 500.0  # the grid turns dirty while the job trains

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        try:
            assert proc.stdout is not None
            out = proc.stdout.read()  # the report, at the end
            proc.wait(timeout=RUN_TIMEOUT_S)
        finally:
            proc.kill()
        reader.join(10)
    assert proc.returncode == 0, "\n".join(lines[-30:])
    return json.loads(out), lines


def _check_report(report: dict, *, batches: tuple[int, int], lines: list[str]) -> dict:
    """What acceptance 1 asks of every example; returns the job's result."""
    tail = "\n".join(lines[-30:])
    assert [m["mode"] for m in report["modes"]] == ["speed", "efficiency"], tail
    result = report["extra"]["job_result"]
    for seq, span in enumerate(report["modes"]):
        detail = {s["name"]: s for s in span["settings_detail"]}
        size = detail["batch_size"]
        assert size["applied_by"] == "job" and size["confirmed"], size  # applied, or kept with the reason
        plan = detail["clock_plan"]
        assert plan["value"] == ("fast.json", "slow.json")[seq] and "run by the job in dry run" in plan["how"], plan
        (run,) = [r for r in result["clock_plans"] if r["mode_seq"] == seq]
        assert all(run["phase_switches"].get(p, 0) > 0 for p in PHASES), run  # every phase of the plan fired
        assert run["dry_run"] and not run.get("unfired") and run["errors"] == 0
    acked = {a["mode_seq"]: a for a in result["batch_sizes"]}
    assert acked[0]["batch_size"] == batches[0]
    assert report["extra"]["job_progress"]["reads"] > 0  # the job's progress reached the run loop's decisions
    assert result["steps"] > 0 and result["windows"][-1]["ended"] == "finished"  # the outcome recorded
    return result


@pytest.mark.slow
def test_the_hf_trainer_example_follows_a_mode_change_under_gridshift_run(prefect_server, tmp_path: Path) -> None:
    need("transformers")
    need("accelerate")
    from plans.integrations.hf import KEPT_BATCH_SIZE

    argv = [sys.executable, str(REPO / "examples" / "train_hf.py"), "--max-steps", "40", "--grad-accum", "2",
            "--mode-poll-s", "0.2", "--step-overhead-s", "0.2", "--log-every", "2"]
    report, lines = _run(prefect_server, tmp_path, argv, speed_batch=8, efficiency_batch=4, dirty_after="step 2/")
    result = _check_report(report, batches=(8, 4), lines=lines)
    kept = {a["mode_seq"]: a for a in result["batch_sizes"]}[1]
    assert (kept["batch_size"], kept["reason"]) == (8, KEPT_BATCH_SIZE)  # the Trainer keeps its DataLoader, and says why
    assert "kept by the job" in report["modes"][1]["settings"] and "the mode asks 4" in report["modes"][1]["settings"]
    assert result["steps"] == 40 and result["metric_name"] == "loss"


@pytest.mark.slow
def test_the_lightning_example_follows_a_mode_change_under_gridshift_run(prefect_server, tmp_path: Path) -> None:
    need("lightning")
    argv = [sys.executable, str(REPO / "examples" / "train_lightning.py"), "--epochs", "6", "--steps-per-epoch", "8",
            "--mode-poll-s", "0.2", "--step-overhead-s", "0.2", "--log-every", "2"]
    report, lines = _run(prefect_server, tmp_path, argv, speed_batch=32, efficiency_batch=16, dirty_after="step 2 ")
    result = _check_report(report, batches=(32, 16), lines=lines)
    applied = [a for a in result["batch_sizes"] if a["mode_seq"] == 1][-1]
    assert (applied["batch_size"], applied.get("reason")) == (16, None)  # the next epoch's DataLoader has it
    assert any("batch_size=16" in line for line in lines)
    assert result["steps"] == 48


@pytest.mark.slow
def test_the_torch_example_under_torchrun_has_one_writer_and_both_ranks_follow(prefect_server, tmp_path: Path) -> None:
    need("torch")
    torchrun = str(Path(sys.executable).parent / "torchrun")
    argv = [torchrun, "--standalone", "--nproc-per-node", "2", str(REPO / "examples" / "train_torch.py"),
            "--epochs", "6", "--steps-per-epoch", "10", "--width", "32", "--mode-poll-s", "0.2",
            "--step-overhead-s", "0.15"]
    report, lines = _run(prefect_server, tmp_path, argv, speed_batch=64, efficiency_batch=32,
                         dirty_after="rank 0: epoch 1/")
    result = _check_report(report, batches=(64, 32), lines=lines)
    assert result["steps"] == 60
    for rank in (0, 1):  # both ranks ran the efficiency mode's batch size and plan by the end
        last = [line for line in lines if f"rank {rank}: epoch 6/6" in line]
        assert last and "batch_size=32" in last[-1] and "slow.json" in last[-1], lines[-20:]
    # two ranks print to one pipe: a line of one may run into the other's ("writes_result=yesrank 1: ...")
    writers = re.findall(r"writes_result=(yes|no)", "\n".join(lines))
    assert sorted(set(writers)) == ["no", "yes"] and len(result["windows"]) == 1  # rank 0 alone wrote the file
