"""Which errors exit 2 (bad input), 3 (environment) or 1 (job failure or a bug), and how a recorded
failed run maps to its exit code."""

from __future__ import annotations

import pytest

from backends.errors import BackendError, DeviceLost, NoDevice, NoPermission, UnknownBackend, Unsupported
from backends.journal import JournalError
from carbon.errors import BadTrace, ProviderUnreachable
from carbon.providers.registry import UnknownProvider
from flows.cli._errors import EXIT_ENV, EXIT_FAILED, EXIT_INPUT, exit_code_for
from flows.cli.run import _exit_code_of
from flows.job.process import JobFailed
from plans.dvfs.errors import PlanFileError, ProfileError
from plans.errors import BadProfile, BadTraceFile, SimulationAborted
from scheduler.errors import LedgerError, PolicyError


@pytest.mark.parametrize("exc", [PolicyError("bad"), BadTrace("bad"), UnknownBackend("x"), UnknownProvider("x"),
                                 PlanFileError("x"), ProfileError("x"), BadTraceFile("x"), BadProfile("x")])
def test_bad_input_exits_2(exc: BaseException) -> None:
    assert exit_code_for(exc) == EXIT_INPUT


@pytest.mark.parametrize("exc", [NoDevice("x"), NoPermission("x"), DeviceLost("x"), Unsupported("x"),
                                 BackendError("x"), JournalError("x"), ProviderUnreachable("x"), LedgerError("x")])
def test_environment_exits_3(exc: BaseException) -> None:
    assert exit_code_for(exc) == EXIT_ENV


@pytest.mark.parametrize("exc", [KeyError("k"), IndexError("i"), LookupError("l"), ValueError("v"),
                                 JobFailed(3, ["boom"]), SimulationAborted("x")])
def test_bugs_and_failed_jobs_exit_1(exc: BaseException) -> None:
    assert exit_code_for(exc) == EXIT_FAILED


@pytest.mark.parametrize(("error_type", "code"), [
    ("backends.errors:DeviceLost", EXIT_ENV), ("backends.errors:NoPermission", EXIT_ENV),
    ("flows.job.process:JobFailed", EXIT_FAILED), ("builtins:KeyError", EXIT_FAILED), ("builtins:SystemExit", 143),
    ("builtins:KeyboardInterrupt", 130), ("no.such.module:Gone", EXIT_FAILED), ("", EXIT_FAILED),
])
def test_a_recorded_failure_exits_by_its_error_type(error_type: str, code: int) -> None:
    assert _exit_code_of({"extra": {"error_type": error_type}}) == code
    assert _exit_code_of({"extra": {}}) == EXIT_FAILED


@pytest.mark.usefixtures("prefect_harness")
def test_cli_run_losing_the_gpu_is_recorded_and_exits_3(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from pathlib import Path

    from typer.testing import CliRunner

    import flows.training as training
    from backends.simulated import SimulatedBackend
    from backends.types import Applied, Settings
    from flows.cli import app
    from scheduler.store.ledger import Ledger

    class Lost(SimulatedBackend):
        def _apply(self, settings: Settings) -> Applied:
            raise DeviceLost("GPU 0 fell off the bus")

    monkeypatch.setattr(training, "create_backend", lambda name, **kw: Lost())
    policy = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
    result = CliRunner().invoke(app, ["run", str(policy), "--json", "--", sys.executable, "-c", "print(1)"])
    assert result.exit_code == EXIT_ENV, result.output
    with Ledger() as ledger:
        (row,) = ledger.runs()
    assert row["status"] == "failed" and "fell off the bus" in row["error"]
