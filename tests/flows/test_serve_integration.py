"""`gridshift serve`'s real path on a real local Prefect server: the planned run of examples/nightly.yaml
becomes due (time-machine moves the service's clock), the real trigger ``flows.deploy:trigger_deployment``
creates exactly one flow run of the deployment at the planned start with the run key as its idempotency
key, and a restart on the same job store (or a repeated trigger) creates no second run. No worker: the
flow run only has to exist on the server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.flows.local_server import BIN, REPO, run_cli

time_machine = pytest.importorskip("time_machine")

pytestmark = pytest.mark.slow

POLICY = REPO / "examples" / "nightly.yaml"
TRIGGER = "flows.deploy:trigger_deployment"  # what `gridshift serve` passes
# planning happens on a fixed evening so the replayed trace, and so the plan, are the same every run
PLANNED_AT = datetime(2026, 6, 1, 18, 0, tzinfo=timezone.utc)


def _service(db, plan):
    from scheduler.service import PlanningService

    service = PlanningService(scheduler=PlanningService.build_scheduler(db), db_path=db, plan=plan, trigger_ref=TRIGGER,
                              poll_interval_s=3600)
    done = threading.Event()
    outcome: list[object] = []

    def _on_job(event) -> None:
        if event.job_id != "gridshift-replan":
            outcome.append(event.exception if event.exception is not None else event.retval)
            done.set()

    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED

    service.scheduler.add_listener(_on_job, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    service.fired, service.outcome = done, outcome  # type: ignore[attr-defined]
    return service


@contextmanager
def _api_for_all_threads(api: str) -> Iterator[None]:
    """Point Prefect at ``api`` here and in APScheduler's worker threads, where the trigger runs.

    A new thread starts without this thread's settings context and falls back to Prefect's process-global
    one, which the session's ``prefect_harness`` (when an earlier test used it) points at its own server.
    Replacing the global context is what ``prefect_test_harness`` itself does.
    """
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api}):
        with prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
            yield


def _flow_runs(api: str, deployment_id: str) -> list[dict]:
    resp = httpx.post(f"{api}/flow_runs/filter", json={"deployments": {"id": {"any_": [deployment_id]}}}, timeout=10)
    resp.raise_for_status()
    return resp.json()


def test_serve_triggers_the_real_deployment_once(prefect_server, tmp_path, monkeypatch):
    env = prefect_server
    api = env["PREFECT_API_URL"]
    out = run_cli([str(BIN / "gridshift"), "deploy", str(POLICY), "--no-schedule", "--pool", "it-pool", "--json"], env)
    assert out.returncode == 0, out.stderr
    dep = json.loads(out.stdout)
    assert dep["name"] == "gridshift-nightly/nightly-retrain" and dep["cron"] == ""

    for name, value in env.items():
        if name.startswith("PREFECT_"):
            monkeypatch.setenv(name, value)

    from flows.sources import monitor_for
    from scheduler.planning import plan_runs
    from scheduler.policy_io import load_policy
    from scheduler.service import fired_keys

    policy = load_policy(POLICY)
    monitor = monitor_for(policy)

    def plan(now: datetime):  # what `gridshift serve examples/nightly.yaml` plans
        return plan_runs(policy, monitor.read(now).series, now=now,
                         extra={"deployment": dep["name"], "policy_path": str(POLICY)})

    db = tmp_path / "serve.sqlite"
    with _api_for_all_threads(api):
        with time_machine.travel(PLANNED_AT, tick=True):
            first = _service(db, plan)
            first.start()
            first.replan()
            planned = first.planned()
            first.shutdown()
        assert planned, "nothing planned for the coming night"
        key, run_at = min(planned.items(), key=lambda kv: kv[1])
        assert key.startswith("nightly-retrain@") and run_at > PLANNED_AT
        assert _flow_runs(api, dep["deployment_id"]) == []  # planned, not triggered

        # the service comes back just after the chosen start: the stored run is due and fires once
        with time_machine.travel(run_at + timedelta(minutes=1), tick=True):
            second = _service(db, plan)
            second.start()
            assert second.fired.wait(timeout=30)
            second.replan()
            second.shutdown()
        (result,) = second.outcome
        assert result is True, result  # fire() claimed the key and the trigger returned without error
        assert key in fired_keys(db)

        runs = _flow_runs(api, dep["deployment_id"])
        assert len(runs) == 1, [(r["name"], r["parameters"]) for r in runs]
        run = runs[0]
        assert run["idempotency_key"] == key
        assert run["state_type"] == "SCHEDULED"
        expected = datetime.fromisoformat(run["expected_start_time"].replace("Z", "+00:00"))
        assert expected == run_at
        assert datetime.fromisoformat(run["parameters"]["planned_start"]) == run_at
        assert run["parameters"]["policy_path"] == str(POLICY)

        # a restart on the same job store plans nothing new and fires nothing
        with time_machine.travel(run_at + timedelta(minutes=2), tick=True):
            third = _service(db, plan)
            third.start()
            third.replan()
            assert key not in third.planned()
            third.shutdown()
        assert third.outcome == []

        # and were the trigger called again with the same key, Prefect's idempotency key keeps one run
        from flows.deploy import trigger_deployment

        again = trigger_deployment(key=key, deployment=dep["name"], planned_start=run_at.isoformat(),
                                   policy_path=str(POLICY))
        assert again == run["id"]
        assert [r["id"] for r in _flow_runs(api, dep["deployment_id"])] == [run["id"]]
