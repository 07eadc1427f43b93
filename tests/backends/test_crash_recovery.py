"""Real processes against the file-backed fake NVML: SIGKILL then restore; SIGTERM/SIGINT at once.

The child applies settings through gridshift's backend inside ``restoring_on_signals`` and then
blocks reading stdin (its "training"). The fake's state lives in a JSON file, so it outlives the
child exactly as a real GPU's settings outlive a killed process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.fake_nvml import default_state, write_state

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from backends.nvidia import NvidiaBackend
from backends.safety import restoring_on_signals
from backends.types import Settings
backend = NvidiaBackend()
with restoring_on_signals(backend):
    applied = backend.apply(Settings(power_limit_w=300, sm_clock_mhz=(1200, 1200)))
    print("applied", applied.changed, flush=True)
    sys.stdin.read()  # "training" until killed
"""


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    state = default_state(gpus=2)
    state["gpus"][0]["power_limit_mw"] = 450_000  # an admin's setting, not the 700 W maximum
    write_state(tmp_path / "nvml.json", state)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK")}
    env.update({
        "PYTHONPATH": str(REPO),
        "GRIDSHIFT_NVML_MODULE": "tests.fakes.fake_nvml",
        "GRIDSHIFT_FAKE_NVML_STATE": str(tmp_path / "nvml.json"),
        "GRIDSHIFT_HOME": str(tmp_path / "home"),
    })
    return env


def _state(env: dict[str, str]) -> dict:
    return json.loads(Path(env["GRIDSHIFT_FAKE_NVML_STATE"]).read_text())


def _journal_files(env: dict[str, str]) -> list[Path]:
    d = Path(env["GRIDSHIFT_HOME"]) / "gpu-journal"
    return sorted(d.glob("*.json")) if d.exists() else []


def _start_child(env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # blocks until the settings are applied
    assert line.startswith("applied"), proc.stderr.read()
    return proc


def _gridshift(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_sigkill_then_gpu_restore_brings_back_exact_values(fake_env: dict[str, str]) -> None:
    proc = _start_child(fake_env)
    gpus = _state(fake_env)["gpus"]
    assert [g["power_limit_mw"] for g in gpus] == [300_000, 300_000]
    assert [g["locked_sm_mhz"] for g in gpus] == [[1200, 1200], [1200, 1200]]
    proc.kill()
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert len(_journal_files(fake_env)) == 2 and _state(fake_env)["gpus"][0]["power_limit_mw"] == 300_000

    status = _gridshift(fake_env, "gpu", "status", "--json")
    assert status.returncode == 0, status.stderr
    entries = json.loads(status.stdout)["journal"]["entries"]
    assert len(entries) == 2 and not any(e["owner_alive"] for e in entries)

    result = _gridshift(fake_env, "gpu", "restore")
    assert result.returncode == 0, result.stderr
    assert "300 W -> 450 W" in result.stdout and "300 W -> 700 W" in result.stdout
    gpus = _state(fake_env)["gpus"]
    assert [g["power_limit_mw"] for g in gpus] == [450_000, 700_000]
    assert [g["locked_sm_mhz"] for g in gpus] == [None, None]
    assert _journal_files(fake_env) == []
    again = _gridshift(fake_env, "gpu", "restore")
    assert again.returncode == 0 and "nothing to restore" in again.stdout


def test_a_corrupt_journal_file_does_not_stop_gpu_restore(fake_env: dict[str, str]) -> None:
    """Review repro: ``{`` in GPU-other.json made ``gridshift gpu restore`` (and every run) exit 1."""
    proc = _start_child(fake_env)
    proc.kill()
    proc.wait()
    bad = Path(fake_env["GRIDSHIFT_HOME"]) / "gpu-journal" / "GPU-other.json"
    bad.write_text("{")
    result = _gridshift(fake_env, "gpu", "restore")
    assert result.returncode == 3, result.stderr  # restored the rest, but a person must look at the bad file
    assert "300 W -> 450 W" in result.stdout and "GPU-other.json" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "UserWarning" not in result.stderr
    assert [g["power_limit_mw"] for g in _state(fake_env)["gpus"]] == [450_000, 700_000]
    assert _journal_files(fake_env) == [bad]
    status = _gridshift(fake_env, "gpu", "status")
    assert status.returncode == 0, status.stderr
    assert "GPU-other.json" in status.stdout


def test_gpu_restore_with_only_an_unreadable_file_exits_3(fake_env: dict[str, str]) -> None:
    bad = Path(fake_env["GRIDSHIFT_HOME"]) / "gpu-journal" / "GPU-other.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("{")
    result = _gridshift(fake_env, "gpu", "restore")
    assert result.returncode == 3
    assert result.stderr.count("GPU-other.json") == 1 and "Traceback" not in result.stderr
    assert bad.exists()


def test_sigkill_then_next_start_restores(fake_env: dict[str, str]) -> None:
    proc = _start_child(fake_env)
    proc.kill()
    proc.wait()
    nxt = subprocess.run(
        [sys.executable, "-c", "from backends.nvidia import NvidiaBackend\n"
                               "b = NvidiaBackend(); b.capabilities(); print(len(b.recovered)); b.close()"],
        env=fake_env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert nxt.returncode == 0, nxt.stderr
    assert nxt.stdout.strip() == "2"
    assert [g["power_limit_mw"] for g in _state(fake_env)["gpus"]] == [450_000, 700_000]
    assert _journal_files(fake_env) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_restore_at_once(fake_env: dict[str, str], sig: int) -> None:
    proc = _start_child(fake_env)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    gpus = _state(fake_env)["gpus"]
    assert [g["power_limit_mw"] for g in gpus] == [450_000, 700_000]
    assert [g["locked_sm_mhz"] for g in gpus] == [None, None]
    assert _journal_files(fake_env) == []
