"""Privileges are decided before the job starts: measure-only with one warning, or NoPermission (exit 3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from backends.errors import NoPermission
from flows.cli._errors import EXIT_ENV, exit_code_for
from tests.backends.nvidia_helpers import make_backend
from tests.fakes.fake_nvml import FakeNvml

REPO = Path(__file__).resolve().parents[2]


def _policy(tmp_path: Path, *, require_control: bool) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    marker = tmp_path / "job-started"
    policy["job"]["command"] = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    policy["backend"] = {"name": "nvidia", "require_control": require_control}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def test_probe_control_without_privilege_is_one_warning_line(tmp_path: Path) -> None:
    from flows.training import _probe_control

    backend, fake, _ = make_backend(tmp_path, fake=FakeNvml(privileged=False), allowed=False)
    control = _probe_control(backend)
    assert not control.allowed
    assert "measure-only" in control.warning and "\n" not in control.warning
    assert fake.state()["calls"] == []


def test_probe_control_required_raises_no_permission_exit_3(tmp_path: Path) -> None:
    from flows.training import _probe_control

    backend, _, _ = make_backend(tmp_path, allowed=False)
    with pytest.raises(NoPermission, match="require_control") as info:
        _probe_control(backend, require_control=True)
    assert exit_code_for(info.value) == EXIT_ENV


@pytest.mark.usefixtures("prefect_harness")
def test_flow_runs_measure_only_when_unprivileged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training

    backend, fake, _ = make_backend(tmp_path, fake=FakeNvml(privileged=False), allowed=False)
    monkeypatch.setattr(training, "create_backend", lambda name, **options: backend)
    report = training.carbon_aware_training(policy_path=str(_policy(tmp_path, require_control=False)),
                                            ledger_path=str(tmp_path / "ledger.sqlite3"))
    assert report["status"] == "completed" and report["backend"] == "nvidia" and report["measured"]
    measure_only = [w for w in report["warnings"] if "measure-only" in w]
    assert len(measure_only) == 1
    assert fake.state()["calls"] == []  # not one write was attempted
    assert (tmp_path / "job-started").exists()


@pytest.mark.usefixtures("prefect_harness")
def test_flow_refuses_before_the_job_when_control_is_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training

    backend, _, _ = make_backend(tmp_path, allowed=False)
    monkeypatch.setattr(training, "create_backend", lambda name, **options: backend)
    with pytest.raises(NoPermission):
        training.carbon_aware_training(policy_path=str(_policy(tmp_path, require_control=True)),
                                       ledger_path=str(tmp_path / "ledger.sqlite3"))
    assert not (tmp_path / "job-started").exists()
