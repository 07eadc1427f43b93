"""Regressions from the review of the flow wiring: when the flow starts and decides, and that a
run's report is recorded whatever fails in cleanup."""

from __future__ import annotations

import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.store.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "policy.yaml"
QUICK = [sys.executable, "-c", "print(1)"]

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _window_policy(tmp_path: Path, earliest_start_s: float) -> Path:
    policy = yaml.safe_load(POLICY.read_text())
    policy["job"].update(earliest_start_s=earliest_start_s, deadline_s=25200, expected_duration_s=5,
                         workdir=str(POLICY.parent))  # the copy's job still runs beside the example
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def _record_start(monkeypatch: pytest.MonkeyPatch) -> tuple[list[datetime], list[datetime]]:
    """Stand-ins for the wait (never sleeps) and the intensity read that record their times."""
    import flows.training as training

    waited: list[datetime] = []
    read_at: list[datetime] = []
    real_read = training.read_intensity.fn

    def read(monitor: Any, now: datetime) -> Any:
        read_at.append(now)
        return real_read(monitor, now)

    monkeypatch.setattr(training, "wait_until", lambda start_at: waited.append(start_at))
    monkeypatch.setattr(training, "read_intensity", read)
    return waited, read_at


def test_a_run_inside_an_early_window_starts_now_and_decides_now(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training

    waited, read_at = _record_start(monkeypatch)
    now = datetime.now(timezone.utc)
    nominal = now + timedelta(hours=3)  # the window opens 4 h before the nominal time
    report = training.carbon_aware_training(policy_path=str(_window_policy(tmp_path, -14400)), run_id="t-early",
                                            backend_name="simulated", ledger_path=str(tmp_path / "l.sqlite3"),
                                            nominal_start=nominal.isoformat(), command=QUICK)
    assert waited[0] <= now + timedelta(minutes=1), "waited for the nominal time"
    assert read_at[0] <= now + timedelta(minutes=1), "intensity read for the nominal time, not the start"
    assert report["deferred_s"] < 0  # started before the nominal time


def test_a_planned_start_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training

    waited, _ = _record_start(monkeypatch)
    now = datetime.now(timezone.utc)
    planned = now + timedelta(hours=1)
    training.carbon_aware_training(policy_path=str(_window_policy(tmp_path, -14400)), run_id="t-planned",
                                   backend_name="simulated", ledger_path=str(tmp_path / "l.sqlite3"),
                                   nominal_start=(now + timedelta(hours=3)).isoformat(),
                                   planned_start=planned.isoformat(), command=QUICK)
    assert waited == [planned]


def test_a_run_before_its_window_waits_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training

    waited, _ = _record_start(monkeypatch)
    nominal = datetime.now(timezone.utc).replace(microsecond=0)
    training.carbon_aware_training(policy_path=str(_window_policy(tmp_path, 3600)), run_id="t-late-window",
                                   backend_name="simulated", ledger_path=str(tmp_path / "l.sqlite3"),
                                   nominal_start=nominal.isoformat(), command=QUICK)
    assert waited == [nominal + timedelta(hours=1)]


def test_restore_handlers_are_installed_from_the_main_thread(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training

    seen: list[bool] = []
    real = training.install_restore_handlers

    def wrap(backend: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread() is threading.main_thread())
        return real(backend, **kwargs)

    monkeypatch.setattr(training, "install_restore_handlers", wrap)
    training.carbon_aware_training(policy_path=str(POLICY), run_id="t-thread", backend_name="simulated",
                                   ledger_path=str(tmp_path / "l.sqlite3"), command=QUICK)
    assert seen == [True]


def test_a_failed_restore_still_records_the_run_and_fails_it(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training
    from backends.simulated import SimulatedBackend

    closed: list[str] = []

    class BadRestore(SimulatedBackend):
        def _restore(self) -> None:
            raise RuntimeError("nvml: restore failed")

        def close(self) -> None:
            closed.append("backend")

    monkeypatch.setattr(training, "create_backend", lambda name, **kw: BadRestore())
    ledger = tmp_path / "ledger.sqlite3"
    state = training.carbon_aware_training(policy_path=str(POLICY), run_id="t-badrestore", backend_name="simulated",
                                           ledger_path=str(ledger), command=QUICK, return_state=True)
    assert state.is_failed()
    with Ledger(ledger) as led:
        (row,) = led.runs()
    assert row["run_id"] == "t-badrestore" and row["status"] == "failed" and row["exit_code"] == 0
    assert "settings may not be restored: run `gridshift gpu restore`" in row["error"]
    assert any("gridshift gpu restore" in w for w in row["warnings"])
    assert row["extra"]["error_type"] == "builtins:RuntimeError"
    assert closed == ["backend"]


def test_a_refusal_before_the_job_is_recorded_and_closes_everything(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.training as training
    from backends.errors import NoPermission
    from backends.simulated import SimulatedBackend
    from backends.types import Capabilities

    closed: list[str] = []

    class Unprivileged(SimulatedBackend):
        def capabilities(self) -> Capabilities:
            from dataclasses import replace

            return replace(super().capabilities(), can_control=False, control_note="no privilege")

        def close(self) -> None:
            closed.append("backend")

    real_monitor_for = training.monitor_for

    def monitor_for(policy: Any) -> Any:
        monitor = real_monitor_for(policy)
        real_close = monitor.close

        def close() -> None:
            closed.append("monitor")
            real_close()

        monitor.close = close
        return monitor

    policy = yaml.safe_load(POLICY.read_text())
    policy["backend"]["require_control"] = True
    policy["job"]["workdir"] = str(POLICY.parent)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    monkeypatch.setattr(training, "create_backend", lambda name, **kw: Unprivileged())
    monkeypatch.setattr(training, "monitor_for", monitor_for)
    marker = tmp_path / "ran"
    with pytest.raises(NoPermission):
        training.carbon_aware_training(policy_path=str(path), run_id="t-refused", ledger_path=str(tmp_path / "l.sqlite3"),
                                       command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert not marker.exists()
    assert sorted(closed) == ["backend", "monitor"]
    with Ledger(tmp_path / "l.sqlite3") as led:
        (row,) = led.runs()
    assert row["status"] == "failed" and row["modes"] == []
    assert row["extra"]["error_type"] == "backends.errors:NoPermission"


def test_nightly_trains_now_unless_it_is_a_planning_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run started by hand or a deferred run trains at once (it never waits on planned_start); only a
    planning run (plan=True) plans, and outside a deployment it hands its planned start to the training."""
    import flows.training as training
    from flows.nightly import nightly_retrain

    calls: list[dict[str, Any]] = []

    class Recorder:
        @staticmethod
        def fn(**kwargs: Any) -> dict[str, Any]:
            calls.append(kwargs)
            return {}

    monkeypatch.setattr(training, "carbon_aware_training", Recorder)
    planned = "2026-01-01T23:00:00+00:00"
    nightly_retrain(policy_path=str(REPO / "examples" / "nightly.yaml"), planned_start=planned,
                    nominal_start="2026-01-02T01:00:00+00:00", ledger_path=str(tmp_path / "l.sqlite3"))
    (call,) = calls
    assert call["start_now"] is True and "planned_start" not in call
    assert call["nominal_start"] == "2026-01-02T01:00:00+00:00"
    calls.clear()
    nightly_retrain(policy_path=str(REPO / "examples" / "nightly.yaml"), plan=True, ledger_path=str(tmp_path / "l.sqlite3"))
    (call,) = calls  # no deployment to defer through: it trains in this run, at the planned start
    assert call["planned_start"] is not None and call["nominal_start"] is not None and not call.get("start_now")
