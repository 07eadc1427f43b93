"""`gridshift run` checks what it can before Prefect starts: exit 2 for bad input, 3 for a machine
that cannot take the run, one line on stderr and, with --json, exactly one JSON object on stdout."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import app
from flows.cli._errors import run_guarded

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "policy.yaml"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    rc = run_guarded(app, argv)
    out, err = capsys.readouterr()
    return rc, out, [line for line in err.splitlines() if line.strip()]


def _marker_job(tmp_path: Path) -> list[str]:
    marker = tmp_path / "job-started"
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("json_out", [False, True])
def test_unwritable_home_exits_3_before_the_job_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], json_out: bool) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("GRIDSHIFT_HOME", str(blocker / "home"))  # below a file: not creatable, also for root
    rc, out, err = _run(["run", str(POLICY), *(["--json"] if json_out else []), "--", *_marker_job(tmp_path)], capsys)
    assert rc == 3
    assert len(err) == 1 and "is not writable" in err[0] and "GRIDSHIFT_HOME" in err[0], err
    assert not (tmp_path / "job-started").exists()
    if json_out:
        obj = json.loads(out)  # exactly one JSON document
        assert obj["status"] == "error" and obj["exit_code"] == 3 and obj["error_type"] == "EnvironmentNotReady"
    else:
        assert out == ""


def test_unreachable_prefect_server_exits_3_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}/api"
    monkeypatch.setenv("PREFECT_API_URL", url)
    rc, out, err = _run(["run", str(POLICY), "--json", "--", *_marker_job(tmp_path)], capsys)
    assert rc == 3
    assert len(err) == 1 and f"PREFECT_API_URL={url} is unreachable" in err[0] and "internal error" not in err[0]
    assert json.loads(out)["exit_code"] == 3
    assert not (tmp_path / "job-started").exists()


@pytest.mark.parametrize("argv, expect", [
    (["--backend", "nvidai"], "--backend: unknown backend 'nvidai' (did you mean 'nvidia'?)"),
    (["--", "no-such-program-gridshift"], "command after '--': program 'no-such-program-gridshift' not found on PATH"),
    (["--", "python", "no_such_script.py"], "command after '--': script 'no_such_script.py' not found in"),
])
@pytest.mark.parametrize("json_out", [False, True])
def test_bad_run_arguments_exit_2(argv: list[str], expect: str, json_out: bool, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--json"] if json_out else []
    rc, out, err = _run(["run", str(POLICY), *flags, *argv] if argv[0] != "--" else ["run", str(POLICY), *flags, *argv], capsys)
    assert rc == 2
    assert len(err) == 1 and expect in err[0], err
    if json_out:
        assert json.loads(out)["exit_code"] == 2
    else:
        assert out == ""


def test_a_bad_policy_lists_every_error_and_json_carries_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(POLICY.read_text().replace("name: auto", "name: nvidai").replace("column: hist", "colum: hist"))
    rc, out, err = _run(["run", str(bad), "--json"], capsys)
    assert rc == 2 and len(err) == 3, err  # the two mistakes and the missing train_tiny.py beside the copy
    obj = json.loads(out)
    assert [i["path"] for i in obj["issues"]] == ["carbon.options.colum", "job.command.0", "backend.name"]
    assert all(line.startswith(f"gridshift: error: {bad}:") for line in err)


@pytest.mark.parametrize("argv", [["run", "--bogus", "x.yaml", "--json"], ["run", "--json"],
                                  ["policy", "check", "--json", "missing.yaml"], ["intensity", "--provider", "nope", "--json"]])
def test_every_json_failure_prints_one_json_object(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(argv, capsys)
    assert rc == 2
    obj = json.loads(out)
    assert obj["status"] == "error" and obj["exit_code"] == 2


def test_json_after_the_double_dash_belongs_to_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["run", "--bogus", "--", "prog", "--json"], capsys)
    assert rc == 2 and out == ""


@pytest.mark.usefixtures("prefect_harness")
def test_run_works_from_another_directory(tmp_path: Path) -> None:
    """`gridshift run path/to/examples/policy.yaml` from elsewhere: the job's relative command is read
    from the policy's folder."""
    from prefect.settings import PREFECT_API_URL

    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    policy = os.path.relpath(POLICY, elsewhere)
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "GRIDSHIFT_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "run", policy, "--json",
                           "--backend", "simulated"], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["status"] == "completed"
    assert "epoch 20/20" in proc.stderr
