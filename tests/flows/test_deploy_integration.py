"""`gridshift deploy` on a real local Prefect server: the planning run, picked up by a process worker,
defers the job as a Scheduled flow run at the chosen time (no worker slot held); that run moved earlier
trains at once, and `prefect deployment run` trains now (issue 14, acceptance 2).

Loopback only; the server is the session's one (fixture ``prefect_server`` in tests/conftest.py); it
fails in CI (skips locally) when the server does not come up.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from scheduler.store.ledger import Ledger
from tests.flows.local_server import BIN, run_cli

pytestmark = pytest.mark.slow


def _write_trace_and_policy(tmp_path: Path, now: datetime) -> tuple[Path, datetime]:
    """Dirty now, clean two hours from now for two hours, dirty after; the job takes one hour. The
    cron's next occurrence is the next whole hour, so a planning run started now plans that night."""
    t0 = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    valley = t0 + timedelta(hours=3)
    occurrence = t0 + timedelta(hours=2)
    rows = []
    for i in range(4 * 30):
        t = t0 + timedelta(minutes=15 * i)
        rows.append(f"{t:%Y-%m-%dT%H:%M:%S}+00:00,{100.0 if valley <= t < valley + timedelta(hours=2) else 600.0}")
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,g_per_kwh\n" + "\n".join(rows) + "\n")
    policy = tmp_path / "it.yaml"
    policy.write_text(f"""
carbon:
  provider: trace
  options: {{path: "{trace}", replay: aligned}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.7, max_slowdown: 0.3}}
rules: {{kind: absolute, clean_below_g_per_kwh: 200, dirty_above_g_per_kwh: 400}}
job:
  name: it-nightly
  command: [python, -c, "pass"]
  expected_duration_s: 3600
  cron: "0 {occurrence.hour} * * *"
  earliest_start_s: 0
  deadline_s: 28800
backend: {{name: simulated}}
""")
    return policy, valley


def _runs(api: str, deployment_id: str) -> list[dict]:
    return httpx.post(f"{api}/flow_runs/filter", json={"deployments": {"id": {"any_": [deployment_id]}}},
                      timeout=10).json()


def _worker_once(env: dict[str, str]) -> None:
    out = run_cli([str(BIN / "prefect"), "worker", "start", "--pool", "it-pool", "--run-once"], env, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.timeout(900)  # four worker starts on a shared 2-core machine: a hang guard, not a timing
def test_deploy_defer_move_earlier_and_train_now(prefect_server, tmp_path):
    env = prefect_server.env_for(tmp_path)
    api = prefect_server.url
    policy, valley = _write_trace_and_policy(tmp_path, datetime.now(timezone.utc))

    out = run_cli([str(BIN / "gridshift"), "deploy", str(policy), "--pool", "it-pool", "--json"], env)
    assert out.returncode == 0, out.stderr
    dep = json.loads(out.stdout)
    assert dep["name"] == "gridshift-nightly/it-nightly" and dep["cron"] == f"0 {(valley - timedelta(hours=1)).hour} * * *"
    (schedule,) = httpx.get(f"{api}/deployments/{dep['deployment_id']}", timeout=10).json()["schedules"]
    assert schedule["parameters"] == {"plan": True}  # the cron makes planning runs; a run by hand trains
    again = run_cli([str(BIN / "gridshift"), "deploy", str(policy), "--pool", "it-pool", "--json"], env)
    assert again.returncode == 0 and "replacing deployment gridshift-nightly/it-nightly" in again.stderr

    # the planning run: what the cron creates every night (plan: true), triggered now through the REST
    # API (what `prefect deployment run -p plan=true` calls, without the CLI's seconds of start-up)
    resp = httpx.post(f"{api}/deployments/{dep['deployment_id']}/create_flow_run", json={"parameters": {"plan": True}},
                      timeout=10)
    assert resp.status_code == 201 and resp.json()["state_type"] == "SCHEDULED", resp.text
    _worker_once(env)
    runs = _runs(api, dep["deployment_id"])
    planning = [r for r in runs if r["parameters"].get("plan")]
    deferred = [r for r in runs if r["parameters"].get("planned_start")]
    assert any(r["state_type"] == "COMPLETED" for r in planning), [(r["name"], r["state_type"]) for r in runs]
    assert len(deferred) == 1
    run = deferred[0]
    assert run["state_type"] == "SCHEDULED"
    chosen = datetime.fromisoformat(run["parameters"]["planned_start"])
    assert valley <= chosen < valley + timedelta(minutes=5)
    assert abs((datetime.fromisoformat(run["expected_start_time"].replace("Z", "+00:00")) - chosen).total_seconds()) < 1

    # moved earlier in Prefect (what dragging it in the UI does): it trains at once, in the dirty hour
    moved_at = datetime.now(timezone.utc)
    resp = httpx.post(f"{api}/flow_runs/{run['id']}/set_state", timeout=10, json={
        "state": {"type": "SCHEDULED", "name": "Scheduled", "state_details": {"scheduled_time": moved_at.isoformat()}},
        "force": True})
    assert resp.status_code in (200, 201), resp.text
    _worker_once(env)
    # `prefect deployment run` with no parameters trains now as well
    out = run_cli([str(BIN / "prefect"), "deployment", "run", dep["name"]], env)
    assert out.returncode == 0, out.stderr
    _worker_once(env)

    with Ledger(Path(env["GRIDSHIFT_HOME"]) / "ledger.sqlite3") as ledger:
        reports = ledger.runs()
    assert len(reports) == 2, [r["run_id"] for r in reports]
    for report in reports:
        started = datetime.fromisoformat(report["started_at"])
        assert report["status"] == "completed"
        assert moved_at - timedelta(seconds=1) <= started < valley, started  # no waiting for the planned start
    states = {r["id"]: r["state_type"] for r in _runs(api, dep["deployment_id"])}
    assert states[run["id"]] == "COMPLETED"
    logs = httpx.post(f"{api}/logs/filter", json={"logs": {"flow_run_id": {"any_": [run["id"]]}}}, timeout=10).json()
    assert any("decision:" in entry["message"] for entry in logs)  # training logs are in the run itself
