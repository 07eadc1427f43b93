"""The Prefect flow end to end under a real (test-harness) Prefect server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backends.simulated import SimulatedBackend
from scheduler.store.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "policy.yaml"
TINY = [sys.executable, str(REPO / "examples" / "train_tiny.py"), "--epochs", "3"]

pytestmark = pytest.mark.usefixtures("prefect_harness")


class RecordingBackend(SimulatedBackend):
    """A simulated backend that remembers whether settings were restored."""

    restored = 0

    def _restore(self) -> None:
        super()._restore()
        RecordingBackend.restored += 1


def test_flow_runs_the_job_and_records_report_and_artifact(tmp_path: Path) -> None:
    from prefect.artifacts import Artifact

    from flows.run.artifacts import artifact_key
    from flows.training import carbon_aware_training

    ledger = tmp_path / "ledger.sqlite3"
    report = carbon_aware_training(policy_path=str(POLICY), run_id="t-ok", command=TINY, backend_name="simulated",
                                   ledger_path=str(ledger))
    assert report["status"] == "completed" and report["exit_code"] == 0
    assert report["backend"] == "simulated" and report["measured"] is False
    assert report["energy_j"] > 0 and report["carbon_g"] > 0
    assert report["modes"] and report["modes"][0]["mode"] in ("speed", "efficiency")
    assert report["deferred_s"] < 5
    with Ledger(ledger) as led:
        assert [r["run_id"] for r in led.runs()] == ["t-ok"]
    artifact = Artifact.get(artifact_key("t-ok"))  # one artifact per run, keyed by its run id
    assert artifact is not None and "t-ok" in str(artifact.data)
    assert "simulated (modelled)" in str(artifact.data)
    assert "](data:image/svg+xml;base64," in str(artifact.data) and "**Saving**" in str(artifact.data)  # its chart


def test_failing_job_fails_the_flow_records_and_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training

    monkeypatch.setattr(training, "create_backend", lambda name, **kw: RecordingBackend())
    RecordingBackend.restored = 0
    ledger = tmp_path / "ledger.sqlite3"
    state = training.carbon_aware_training(
        policy_path=str(POLICY), run_id="t-fail", backend_name="simulated", ledger_path=str(ledger),
        command=[sys.executable, "-c", "import sys; print('training diverged'); sys.exit(3)"], return_state=True,
    )
    assert state.is_failed()
    with Ledger(ledger) as led:
        (row,) = led.runs()
    assert row["status"] == "failed" and row["exit_code"] == 3
    assert "training diverged" in row["error"]
    assert row["energy_j"] >= 0 and row["modes"]
    assert RecordingBackend.restored == 1


def test_missing_command_binary_is_a_failed_run(tmp_path: Path) -> None:
    from flows.training import carbon_aware_training

    state = carbon_aware_training(policy_path=str(POLICY), run_id="t-missing", backend_name="simulated",
                                  ledger_path=str(tmp_path / "l.sqlite3"), command=["/no/such/trainer"],
                                  return_state=True)
    assert state.is_failed()
    with Ledger(tmp_path / "l.sqlite3") as led:
        (row,) = led.runs()
    assert row["status"] == "failed" and "command not found" in row["error"]
