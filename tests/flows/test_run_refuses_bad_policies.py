"""Issue 22: `gridshift run` refuses every policy `policy check` refuses, with the same located lines
and exit 2, before a Prefect server starts (nothing is written under GRIDSHIFT_HOME: no ledger, no log)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flows.cli import app
from flows.cli._errors import run_guarded
from tests.scheduler.test_checks_in_one_pass import FOUR_MISTAKES, NO_COMMAND


@pytest.mark.parametrize("text, errors", [(FOUR_MISTAKES, 4), (NO_COMMAND, 1)], ids=["four mistakes", "no command"])
def test_run_refuses_before_any_server_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str], text: str, errors: int) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(text, encoding="utf-8")
    home = tmp_path / "home"
    monkeypatch.setenv("GRIDSHIFT_HOME", str(home))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # a run would start a temporary server
    assert run_guarded(app, ["policy", "check", str(policy)]) == 2
    check = capsys.readouterr().err.splitlines()
    started = time.monotonic()
    rc = run_guarded(app, ["run", str(policy)])
    elapsed_s = time.monotonic() - started
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    located = [line.removeprefix("gridshift: error: ") for line in err.splitlines()]
    assert len(located) == errors and all(line.startswith(f"{policy}:") for line in located), err
    assert located == check  # the same lines as `policy check`
    assert "Prefect server" not in err
    assert not home.exists()  # no ledger, no run log, no server folder: it stopped at the policy
    assert elapsed_s < 5
