"""Deployment pieces that need no server: the planning cron, prefect.yaml, CLI errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.deployments.deploy import planning_cron
from scheduler.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cron,earliest,expected", [
    ("0 1 * * *", -4 * 3600, "0 21 * * *"),
    ("30 2 * * 1-5", -3600, "30 1 * * 1-5"),
    ("0 1 * * 1", -4 * 3600, "0 1 * * 1"),  # would cross midnight on a weekday cron: unchanged
    ("*/5 * * * *", -600, "*/5 * * * *"),
    ("0 1 * * *", 0, "0 1 * * *"),
])
def test_planning_cron(cron, earliest, expected):
    assert planning_cron(cron, earliest) == expected


def test_prefect_yaml_matches_the_nightly_policy():
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    (dep,) = spec["deployments"]
    policy = load_policy(REPO / dep["parameters"]["policy_path"])
    assert dep["entrypoint"] == "flows/nightly.py:nightly_retrain"
    assert dep["schedules"][0]["cron"] == planning_cron(policy.job.cron, policy.job.earliest_start_s)
    assert dep["schedules"][0]["timezone"] == policy.job.timezone  # the zone the cron is read in
    assert (REPO / dep["entrypoint"].split(":")[0]).exists()


@pytest.mark.parametrize("cron", ["0 1 * * 1-5", "30 2 * * 0", "0 1 * * 7", "15 3 * * sat,sun"])
@pytest.mark.parametrize("earliest", [-3600, -4 * 3600])
def test_each_planning_run_plans_a_run_policy_check_shows(tmp_path, cron, earliest):
    """The deployment's schedule, evaluated by Prefect itself, fires once before each run of the
    policy's calendar (in its time zone, across a clock change), and the planning run plans that run."""
    import asyncio
    from datetime import datetime, timezone

    from prefect.server.schemas.schedules import CronSchedule

    from flows.deployments.deploy import planning_schedule
    from scheduler.policy.cron import next_runs
    from scheduler.planner.inputs import occurrence_for

    text = (REPO / "examples" / "nightly.yaml").read_text().replace('"0 1 * * *"', repr(cron))
    text = text.replace("earliest_start_s: -14400", f"earliest_start_s: {earliest}").replace(
        "timezone: UTC", "timezone: Europe/London")
    policy_path = tmp_path / "nightly.yaml"
    policy_path.write_text(text)
    (tmp_path / "train_tiny.py").write_text("")
    policy = load_policy(policy_path)
    schedule = planning_schedule(policy)
    assert policy.job.timezone == schedule.timezone == "Europe/London" and schedule.parameters == {"plan": True}
    start = datetime(2026, 3, 26, tzinfo=timezone.utc)  # London's clocks go forward on the 29th
    fired = asyncio.run(CronSchedule(cron=schedule.cron, timezone=schedule.timezone).get_dates(n=5, start=start))
    planned = [occurrence_for(policy.job, datetime.fromtimestamp(f.timestamp(), timezone.utc)) for f in fired]
    assert planned == next_runs(policy.job.cron, planned[0], tz=policy.job.timezone)
    assert all(0 <= (p - f).total_seconds() <= -earliest for p, f in zip(planned, fired))


def test_deploy_without_a_server_is_an_environment_error(monkeypatch):
    from flows.cli import app

    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "")
    # the session's test harness may have set an API URL in-process: take it away for this test
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        out = CliRunner().invoke(app, ["deploy", str(REPO / "examples" / "nightly.yaml")])
    assert out.exit_code == 3
    assert "prefect server start" in out.output


def test_deploy_bad_policy_is_exit_2(tmp_path):
    from flows.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("carbon: {provider: trace}\n")
    out = CliRunner().invoke(app, ["deploy", str(bad)])
    assert out.exit_code == 2


@pytest.mark.parametrize("fired, expected", [
    ("2026-12-02T21:00:00", "2026-12-03T01:00:00"),  # the cron's planning run, at the earliest start
    ("2026-12-02T16:30:00", "2026-12-03T01:00:00"),  # started by hand (-p plan=true): the next occurrence,
    ("2026-12-02T23:10:00", "2026-12-03T01:00:00"),  # not now + 4 h (20:30 and 03:10 would be no occurrence)
    ("2026-12-03T01:00:00", "2026-12-03T01:00:00"),  # a cron that planning_cron left unchanged fires at it
])
def test_a_planning_run_plans_the_crons_occurrence(fired: str, expected: str) -> None:
    from datetime import datetime, timezone

    from scheduler.planner.inputs import occurrence_for
    from scheduler.policy.types import JobSpec

    assert planning_cron("0 1 * * *", -4 * 3600) == "0 21 * * *"
    job = JobSpec(name="j", command=["true"], cron="0 1 * * *", earliest_start_s=-4 * 3600, deadline_s=8 * 3600,
                  expected_duration_s=3600)
    at = datetime.fromisoformat(fired).replace(tzinfo=timezone.utc)
    assert occurrence_for(job, at).isoformat() == expected + "+00:00"
