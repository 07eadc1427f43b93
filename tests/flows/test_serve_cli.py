"""`gridshift serve` as a user starts it: refuses without Prefect or the deployment (exit 3, one line),
rejects a policy without job.cron (exit 2), plans and logs, and exits 130 on SIGINT / 143 on SIGTERM / 129 on SIGHUP.
A stub Prefect API (a real local HTTP server) answers the start-up checks; the real server is in
test_serve_integration.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.service.serve import ServeStore
from tests.fakes.fake_prefect import PrefectApiStub

REPO = Path(__file__).resolve().parents[2]
GRIDSHIFT = str(Path(sys.executable).parent / "gridshift")
NIGHTLY = REPO / "examples" / "nightly.yaml"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(GRIDSHIFT_HOME=str(tmp_path / "home"), PREFECT_HOME=str(tmp_path / "prefect-home"), **extra)
    return env


def _serve(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GRIDSHIFT, "serve", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def _one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert out.stdout == ""
    return lines[0]


def test_serve_refuses_without_a_prefect_api(tmp_path):
    out = _serve([str(NIGHTLY)], _env(tmp_path))
    assert out.returncode == 3
    assert "serve needs a running Prefect server" in _one_error_line(out)
    assert not (tmp_path / "prefect-home").exists() or not list((tmp_path / "prefect-home").rglob("*.db"))  # no ephemeral server


def test_serve_refuses_an_unreachable_prefect_api(tmp_path):
    from tests.flows.local_server import free_port

    out = _serve([str(NIGHTLY)], _env(tmp_path, PREFECT_API_URL=f"http://127.0.0.1:{free_port()}/api"))
    assert out.returncode == 3
    assert "is not reachable" in _one_error_line(out)


def test_serve_refuses_when_the_deployment_is_missing(tmp_path):
    with PrefectApiStub(["gridshift-nightly/other"]) as api:
        out = _serve([str(NIGHTLY)], _env(tmp_path, PREFECT_API_URL=api.url))
    assert out.returncode == 3
    line = _one_error_line(out)
    assert "deployment gridshift-nightly/nightly-retrain is not on the Prefect server" in line and "--no-schedule" in line


def test_serve_rejects_a_policy_without_cron(tmp_path):
    policy = tmp_path / "once.yaml"
    policy.write_text(NIGHTLY.read_text().replace('cron: "0 1 * * *"', "").replace("cron: '0 1 * * *'", "")
                      .replace("  name: nightly-retrain", f"  name: nightly-retrain\n  workdir: {NIGHTLY.parent}"))
    assert "cron" not in policy.read_text()
    out = _serve([str(policy)], _env(tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api"))
    assert out.returncode == 2
    assert _one_error_line(out) == f"gridshift: error: {policy}: job.cron: serve needs a recurring job (e.g. cron: '0 1 * * *')"


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_serve_plans_logs_and_stops_on_a_signal(tmp_path, sig, code):
    db = tmp_path / "serve.sqlite"
    with PrefectApiStub(["gridshift-nightly/nightly-retrain"]) as api:
        proc = subprocess.Popen([GRIDSHIFT, "serve", str(NIGHTLY), "--db", str(db), "--poll-s", "3600"], cwd=REPO,
                                env=_env(tmp_path, PREFECT_API_URL=api.url), stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        lines: list[str] = []
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if "run(s) of nightly-retrain on " in line:  # one line per job and day
                    break
            os.killpg(proc.pid, sig)  # what a terminal (or a service manager) sends
            rest = proc.stderr.read()
            assert proc.wait(timeout=60) == code
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert any(line.startswith("gridshift serve: planned ") and "run(s) of nightly-retrain on " in line for line in lines), "".join(lines)
    assert f"stopped by {sig.name}" in rest and "Traceback" not in rest
    planned = ServeStore(db).runs(state="planned")
    assert planned and all(r.key.startswith("nightly-retrain@") and r.latest_start for r in planned)
