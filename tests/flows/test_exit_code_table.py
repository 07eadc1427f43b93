"""One test per row of the README's exit-code table, through the real command line:
0 ok · 1 the job failed (or a bug) · 2 bad input · 3 environment · 130/143 SIGINT/SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer

from flows.cli import app
from flows.cli._errors import run_guarded

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "policy.yaml"
GRIDSHIFT = [sys.executable, "-c", "from flows.cli import main; main()"]


def _code(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    rc = run_guarded(app, argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert not any("Traceback" in line for line in err), err
    return rc, err


def test_0_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert _code(["policy", "check", str(POLICY)], capsys)[0] == 0


def test_1_a_bug_is_one_line_internal_error(capsys: pytest.CaptureFixture[str]) -> None:
    buggy = typer.Typer()

    @buggy.command()
    def boom() -> None:
        {}["missing"]

    @buggy.command()
    def other() -> None:  # two commands, so typer keeps the command name
        pass

    assert run_guarded(buggy, ["boom"]) == 1
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line == "gridshift: internal error: KeyError: 'missing'"


@pytest.mark.usefixtures("prefect_harness")
def test_1_a_failing_job(tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "GRIDSHIFT_HOME": str(tmp_path)}
    proc = subprocess.run([*GRIDSHIFT, "run", str(POLICY), "--backend", "simulated", "--", sys.executable, "-c",
                           "import sys; print('bad data'); sys.exit(4)"], capture_output=True, text=True, env=env,
                          timeout=240)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "failed" in proc.stdout and "exit code 4" in proc.stderr


@pytest.mark.parametrize("argv, expect", [
    (["intensity", "--provider", "static", "-o", "country=XYZ"], "unknown country 'XYZ'"),   # an unknown zone
    (["intensity", "--provider", "ukgrid", "--zone", "99"], "unknown UK region id 99"),      # offline: no request made
    (["intensity", "--horizon-h", "-5", "--forecast"], "--horizon-h must be positive"),
    (["intensity", "--provider", "trcae"], "did you mean 'trace'?"),
    (["policy", "check", "no-such-policy.yaml"], "policy file not found"),
    (["run", str(POLICY), "--backend", "nvidai"], "did you mean 'nvidia'?"),
    (["simulate", str(POLICY), "--trace", "no-such-trace.csv"], "no-such-trace.csv"),
    (["run"], "Missing argument"),
])
def test_2_bad_input(argv: list[str], expect: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _code(argv, capsys)
    assert rc == 2
    assert any(expect in line for line in err), err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["home", "prefect", "provider"])
def test_3_environment(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", str(POLICY), "--", sys.executable, "-c", "pass"]
    if case == "home":
        (tmp_path / "file").write_text("")
        monkeypatch.setenv("GRIDSHIFT_HOME", str(tmp_path / "file" / "home"))
    elif case == "prefect":
        monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{_free_port()}/api")
    else:  # a provider that cannot be reached, with no fallback
        argv = ["intensity", "--provider", "ukgrid", "--base-url", f"http://127.0.0.1:{_free_port()}"]
    rc, err = _code(argv, capsys)
    assert rc == 3
    assert len(err) == 1 and err[0].startswith("gridshift: error: ") and "internal error" not in err[0], err


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_130_143_signals(signum: int, code: int, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    started = tmp_path / "started"
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "GRIDSHIFT_HOME": str(tmp_path)}
    job = f"import time; open({str(started)!r}, 'w'); time.sleep(120)"
    proc = subprocess.Popen([*GRIDSHIFT, "run", str(POLICY), "--backend", "simulated", "--", sys.executable, "-c", job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 180
        while not started.exists():  # waiting on a subprocess's progress, not timing the code under test
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.2)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-2000:]
    assert "failed" in out  # the report, recorded and printed
