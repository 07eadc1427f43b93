"""Deployment pieces that need no server: the planning cron, prefect.yaml, CLI errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.deploy import planning_cron
from scheduler.policy_io import load_policy

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
    assert (REPO / dep["entrypoint"].split(":")[0]).exists()


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

    from flows.nightly import _occurrence

    assert planning_cron("0 1 * * *", -4 * 3600) == "0 21 * * *"
    at = datetime.fromisoformat(fired).replace(tzinfo=timezone.utc)
    assert _occurrence("0 1 * * *", at, -4 * 3600).isoformat() == expected + "+00:00"
