"""Acceptance 2 of issue 12: `gridshift serve`'s real path on a real local Prefect server, through an outage.

The plan is serve's own (``flows.cli.deploy.serve_plan`` over examples/nightly.yaml), the trigger is
serve's own (``flows.deployments.deploy.trigger_deployment``); only the clock is injected. The server is stopped
across the run's due time: the trigger fails and its claim is released; serve is restarted in
between; the server comes back; the first trigger after it creates the flow run but its answer is
"lost" (it raises once), so serve retries: the deployment has exactly one flow run, with the run key
as its idempotency key, at the planned start. A restart afterwards changes nothing. No worker: the
flow run only has to exist on the server.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.flows.local_server import BIN, REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # two server starts on a loaded 2-core machine

POLICY = REPO / "examples" / "nightly.yaml"
# planning happens on a fixed evening so the replayed trace, and so the plan, are the same every run
PLANNED_AT = datetime(2026, 6, 1, 18, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _flow_runs(api: str, deployment_id: str) -> list[dict]:
    resp = httpx.post(f"{api}/flow_runs/filter", json={"deployments": {"id": {"any_": [deployment_id]}}}, timeout=10)
    resp.raise_for_status()
    return resp.json()


def test_a_run_due_while_prefect_is_down_fires_exactly_once_when_it_is_back(prefect_server, tmp_path):
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    from flows.cli.deploy import serve_plan
    from flows.deployments.deploy import trigger_deployment
    from scheduler.policy.loader import load_policy
    from scheduler.service.serve import PlanningService

    api = prefect_server.url
    out = run_cli([str(BIN / "gridshift"), "deploy", str(POLICY), "--no-schedule", "--pool", "it-serve-pool", "--json"],
                  prefect_server.env_for(tmp_path))
    assert out.returncode == 0, out.stderr
    dep = json.loads(out.stdout)
    assert dep["name"] == "gridshift-nightly/nightly-retrain" and dep["cron"] == ""

    plan = serve_plan([(POLICY, load_policy(POLICY))], [dep["name"]])
    db, clock, log = tmp_path / "serve.sqlite", Clock(PLANNED_AT), []
    answers_lost = []

    def trigger_losing_its_first_answer(**kwargs):
        run_id = trigger_deployment(**kwargs)
        if not answers_lost:
            answers_lost.append(run_id)
            raise httpx.ReadError("connection reset after the request was sent")
        return run_id

    def service(trigger=trigger_deployment) -> PlanningService:
        return PlanningService(db_path=db, plan=plan, trigger=trigger, now=clock, poll_interval_s=3600, log=log.append)

    with temporary_settings(updates={PREFECT_API_URL: api, PREFECT_CLIENT_MAX_RETRIES: 0}):
        first = service()
        first.tick()
        key, run_at = min(first.planned().items(), key=lambda kv: kv[1])
        assert key.startswith("nightly-retrain@") and run_at > PLANNED_AT
        assert _flow_runs(api, dep["deployment_id"]) == []  # planned, not triggered

        prefect_server.stop()  # the outage spans the due time
        clock.now = run_at + timedelta(minutes=1)
        assert first.tick().failed == [key]
        assert first.store.get(key).state == "planned"  # the claim is released

        clock.now = first.next_wakeup()
        second = service()  # serve restarted during the outage
        assert second.tick().failed == [key]
        assert second.store.get(key).attempts == 2

        prefect_server.start()
        third = service(trigger_losing_its_first_answer)  # and restarted again once it is back
        clock.now = third.store.get(key).next_try  # the retry the backoff set
        assert third.tick().failed == [key]  # the run was created, the answer lost: retried
        clock.now = third.next_wakeup()
        assert third.tick().fired == [key]
        clock.now += timedelta(hours=1)
        assert service().tick().fired == []  # a restart afterwards changes nothing

    (run,) = _flow_runs(api, dep["deployment_id"])
    assert answers_lost == [run["id"]]
    assert run["idempotency_key"] == key
    assert run["state_type"] == "SCHEDULED"
    assert datetime.fromisoformat(run["expected_start_time"].replace("Z", "+00:00")) == run_at
    assert datetime.fromisoformat(run["parameters"]["planned_start"]) == run_at
    assert run["parameters"]["policy_path"] == str(POLICY)
    row = third.store.get(key)
    assert (row.state, row.outcome, row.attempts) == ("fired", run["id"], 4)
    failed = [m for m in log if m.startswith(f"trigger of {key} failed (attempt ")]
    assert len(failed) == 3 and "ConnectError" in failed[0] and "ReadError" in failed[2]
    assert any(m.startswith(f"fired {key} (planned for ") and run["id"] in m for m in log)
