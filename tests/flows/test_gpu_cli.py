"""``gridshift gpu status`` / ``gpu restore``: exit 3 without a driver, JSON with the fake NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.fake_nvml import default_state, write_state

REPO = Path(__file__).resolve().parents[2]


def _gridshift(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GRIDSHIFT_NVML_MODULE", "CUDA_VISIBLE_DEVICES")}
    env.update({"PYTHONPATH": str(REPO), "GRIDSHIFT_HOME": str(tmp_path / "home"), **extra})
    return env


def test_status_without_a_driver_is_exit_3_and_one_line(tmp_path: Path) -> None:
    from backends.registry import nvml_sees_gpu

    if nvml_sees_gpu():
        pytest.skip("an NVIDIA driver is present here")
    result = _gridshift(_env(tmp_path), "gpu", "status")
    assert result.returncode == 3
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gridshift: error: no NVIDIA driver")


def test_status_json_with_the_fake(tmp_path: Path) -> None:
    write_state(tmp_path / "nvml.json", default_state(gpus=2))
    env = _env(tmp_path, GRIDSHIFT_NVML_MODULE="tests.fakes.fake_nvml",
               GRIDSHIFT_FAKE_NVML_STATE=str(tmp_path / "nvml.json"), CUDA_VISIBLE_DEVICES="1")
    result = _gridshift(env, "gpu", "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert set(status) >= {"devices", "capabilities", "permissions", "journal", "driver_version"}
    (d,) = status["devices"]
    assert d["index"] == 1 and d["power_limit_range_w"] == [200.0, 700.0]
    assert len(d["supported_clocks_mhz"]["3201"]) == 110
    assert json.loads((tmp_path / "nvml.json").read_text())["calls"] == []
    human = _gridshift(env, "gpu", "status")
    assert human.returncode == 0
    assert "SM 345-1980 MHz, 15 MHz steps (110 values)" in human.stdout and "journal    empty" in human.stdout


def test_restore_with_empty_journal_needs_no_driver(tmp_path: Path) -> None:
    result = _gridshift(_env(tmp_path), "gpu", "restore")
    assert result.returncode == 0 and "nothing to restore" in result.stdout


def test_cli_import_stays_light() -> None:
    code = ("import sys, flows.cli, flows.cli.gpu, backends.nvidia\n"
            "heavy = [m for m in ('prefect', 'pydantic', 'apscheduler', 'pynvml') if m in sys.modules]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("how", ["--backend", "policy"])
def test_run_on_nvidia_without_a_driver_is_refused_like_gpu_status(tmp_path: Path, how: str) -> None:
    # before any server starts and before the ledger exists: exit 3 in `gpu status`'s words
    import yaml

    write_state(tmp_path / "nvml.json", default_state(driver=False))
    env = _env(tmp_path, GRIDSHIFT_NVML_MODULE="tests.fakes.fake_nvml", GRIDSHIFT_FAKE_NVML_STATE=str(tmp_path / "nvml.json"))
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["job"]["command"] = [sys.executable, "-c", "print('the job ran')"]
    if how == "policy":
        policy["backend"] = {"name": "nvidia"}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    args = ["run", str(tmp_path / "policy.yaml"), *(["--backend", "nvidia"] if how == "--backend" else [])]
    status = _gridshift(env, "gpu", "status")
    result = _gridshift(env, *args)
    assert result.returncode == 3 == status.returncode, result.stderr
    assert result.stderr == status.stderr and "no NVIDIA driver" in result.stderr
    assert "Prefect server" not in result.stderr and "the job ran" not in result.stdout + result.stderr
    assert not (tmp_path / "home" / "ledger.sqlite3").exists()
