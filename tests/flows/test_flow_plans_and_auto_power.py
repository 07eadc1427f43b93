"""The flow with clock plans and ``power_limit_select`` modes, on the simulated backend."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from plans.power_limit import LimitMeasurement
from plans.profile_store import PowerProfile, ProfileStore
from scheduler.settings.auto_power import job_fingerprint, profiles_dir
from scheduler.errors import PolicyError
from tests.fakes.clock_plans import make_plan, write_plan

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "policy.yaml"
ENV_KEYS = ("GRIDSHIFT_MODE", "GRIDSHIFT_CLOCK_PLAN", "GRIDSHIFT_GPU_DELEGATED_BY", "GRIDSHIFT_PROFILE_DIR", "GRIDSHIFT_WORKLOAD_FINGERPRINT",
            "GRIDSHIFT_GPU_MODEL")


def _policy(tmp_path: Path, mode_lines: str) -> Path:
    """The example policy with both modes replaced by ``mode_lines``, so whichever the carbon signal picks has them."""
    text = EXAMPLE.read_text()
    start, end = text.index("modes:\n"), text.index("rules:")
    text = text[:start] + f"modes:\n  speed:\n{mode_lines}  efficiency:\n{mode_lines}\n" + text[end:]
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    (tmp_path / "train_tiny.py").write_bytes((EXAMPLE.parent / "train_tiny.py").read_bytes())  # the job beside its policy
    return p


def _env_dump_job(out: Path) -> list[str]:
    code = (f"import json, os, pathlib; pathlib.Path({str(out)!r}).write_text("
            f"json.dumps({{k: os.environ.get(k) for k in {ENV_KEYS!r}}}))")
    return [sys.executable, "-c", code]


def _run(policy: Path, tmp_path: Path, run_id: str) -> tuple[dict, dict]:
    from flows.training import carbon_aware_training

    env_file = tmp_path / f"{run_id}.env.json"
    report = carbon_aware_training(policy_path=str(policy), run_id=run_id, command=_env_dump_job(env_file),
                                   backend_name="simulated", ledger_path=str(tmp_path / "ledger.sqlite3"))
    return report, json.loads(env_file.read_text())


@pytest.mark.usefixtures("prefect_harness")
def test_a_mode_clock_plan_is_checked_handed_to_the_job_and_reported(tmp_path: Path) -> None:
    write_plan(tmp_path / "plan.json", make_plan([1980, 1410, 1200], energy_change_pct=-6.0, time_change_pct=0.8))
    report, env = _run(_policy(tmp_path, "    clock_plan: plan.json\n"), tmp_path, "t-plan")
    assert report["status"] == "completed"
    plan = report["extra"]["clock_plan"]
    assert plan["file"] == str((tmp_path / "plan.json").resolve()) and plan["mode"] == report["modes"][0]["mode"]
    assert plan["predicted_energy_saving_pct"] == pytest.approx(6.0) and plan["modelled"] is True
    assert "clock plan plan.json (modelled: energy -6.0%, time +0.8% per step" in report["modes"][0]["settings"]
    assert env["GRIDSHIFT_CLOCK_PLAN"] == plan["file"]
    assert env["GRIDSHIFT_WORKLOAD_FINGERPRINT"] is None  # no power_limit_select mode here


@pytest.mark.usefixtures("prefect_harness")
def test_a_bad_plan_stops_the_flow_before_the_job(tmp_path: Path) -> None:
    from flows.training import carbon_aware_training

    (tmp_path / "plan.json").write_text(make_plan([1980, 1411]).model_dump_json())  # 1411 MHz: not an H200 clock
    policy = _policy(tmp_path, "    clock_plan: plan.json\n")
    marker = tmp_path / "ran.json"
    with pytest.raises(PolicyError, match="not supported by this GPU"):
        carbon_aware_training(policy_path=str(policy), run_id="t-badplan", command=_env_dump_job(marker),
                              backend_name="simulated", ledger_path=str(tmp_path / "ledger.sqlite3"))
    assert not marker.exists()


def test_cli_run_with_a_missing_plan_exits_2_with_file_and_message(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "    clock_plan: nowhere.json\n")
    result = CliRunner().invoke(app, ["run", str(policy)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()  # both modes name the missing plan: one line each
    assert len(lines) == 2
    for line in lines:
        assert line.startswith(f"gridshift: error: {policy}:")
        assert f"clock_plan: {tmp_path.resolve() / 'nowhere.json'}: no such clock plan file" in line


@pytest.mark.usefixtures("prefect_harness")
def test_power_limit_select_without_then_with_a_stored_profile(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "    power_limit_select: energy\n")
    report, env = _run(policy, tmp_path, "t-auto-1")
    assert report["status"] == "completed"
    (warning,) = [w for w in report["warnings"] if "power_limit_select" in w]
    assert "no stored power-limit profile" in warning and "PowerLimitCallback" in warning
    assert report["extra"]["power_limit_auto"]["profile_found"] is False
    assert report["modes"][0]["settings"].startswith("power limit 700 W")
    assert env["GRIDSHIFT_PROFILE_DIR"] == str(profiles_dir())
    assert env["GRIDSHIFT_GPU_MODEL"] == "NVIDIA H200 (simulated)"

    # what the job's PowerLimitCallback would have saved, under the keys the flow gave it
    fp = env["GRIDSHIFT_WORKLOAD_FINGERPRINT"]
    assert fp == job_fingerprint("tiny-logreg", _env_dump_job(tmp_path / "t-auto-1.env.json"))
    ProfileStore(env["GRIDSHIFT_PROFILE_DIR"]).save(PowerProfile(
        gpu_model=env["GRIDSHIFT_GPU_MODEL"], fingerprint=fp,
        measurements=(LimitMeasurement(700.0, 1.0, 600.0), LimitMeasurement(450.0, 1.2, 480.0),
                      LimitMeasurement(250.0, 1.9, 560.0))))
    # same job, same command: the second run finds the profile (the command's output path is the same file)
    from flows.training import carbon_aware_training

    env_file = tmp_path / "t-auto-1.env.json"
    report = carbon_aware_training(policy_path=str(policy), run_id="t-auto-2", command=_env_dump_job(env_file),
                                   backend_name="simulated", ledger_path=str(tmp_path / "ledger.sqlite3"))
    assert not [w for w in report["warnings"] if "power_limit_select" in w]
    auto = report["extra"]["power_limit_auto"]
    assert auto["profile_found"] is True and auto["power_limit_w"] == 450.0
    assert report["modes"][0]["settings"].startswith("power limit 450 W")
    assert "power limit auto: 450 W by the energy selector" in report["modes"][0]["settings"]


@pytest.mark.usefixtures("prefect_harness")
def test_on_nvidia_the_flow_delegates_the_clock_lock_to_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import flows.training as training
    from tests.backends.nvidia_helpers import make_backend

    backend, fake, _ = make_backend(tmp_path)
    monkeypatch.setattr(training, "create_backend", lambda name, **options: backend)
    found = fake.state()["gpus"]
    write_plan(tmp_path / "plan.json", make_plan([1980, 1410, 1200]))
    policy = _policy(tmp_path, "    clock_plan: plan.json\n")
    env_file = tmp_path / "env.json"
    report = training.carbon_aware_training(policy_path=str(policy), run_id="t-nv", command=_env_dump_job(env_file),
                                            backend_name="nvidia", ledger_path=str(tmp_path / "ledger.sqlite3"))
    assert report["status"] == "completed" and report["extra"]["clock_plan"]["gpu_model"] == "NVIDIA H200"
    env = json.loads(env_file.read_text())
    assert env["GRIDSHIFT_CLOCK_PLAN"] == str((tmp_path / "plan.json").resolve())
    assert env["GRIDSHIFT_GPU_DELEGATED_BY"] == str(os.getpid())
    # the flow's journal covered the job's locks, so its restore resets them; the GPU ends as found
    assert fake.state()["calls"][-1] == ["nvmlDeviceResetGpuLockedClocks", 0]
    after = fake.state()["gpus"]
    for key in ("power_limit_mw", "locked_sm_mhz"):
        assert after[0][key] == found[0][key]
    assert backend.journal.entries() == []
