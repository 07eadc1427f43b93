"""Acceptance 3 of issue 12 (a provider serving 5-hour-old data with a 1 h staleness limit: the run uses the
fallback and its report says why), and deadline misses (``late_s``) in the report, the ledger and `gridshift runs`."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.store.ledger import Ledger
from scheduler.report import deadline_miss
from tests.fakes.fake_prefect import JsonServer

POLICY = """
schema_version: 1
carbon:
  provider: ukgrid
  base_url: {url}
  options: {{timeout_s: 2, backoff_s: 0}}
  max_staleness_s: 3600
  fallbacks:
    - provider: static
      options: {{g_per_kwh: 250}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.6}}
rules: {{kind: absolute, clean_below_g_per_kwh: 200, dirty_above_g_per_kwh: 300}}
job: {{name: stale-check, command: [{python}, -c, "pass"], expected_duration_s: 1, deadline_s: 600}}
"""


def old_intensity_server(age: timedelta) -> JsonServer:
    """A real local HTTP server playing the UK grid API, whose "current" half hour ended ``age`` ago."""
    end = datetime.now(timezone.utc).replace(second=0, microsecond=0) - age
    body = {"data": [{"from": f"{end - timedelta(minutes=30):%Y-%m-%dT%H:%MZ}", "to": f"{end:%Y-%m-%dT%H:%MZ}",
                      "intensity": {"forecast": 90, "actual": 88, "index": "low"}}]}
    return JsonServer(lambda path: (200, body))


@pytest.mark.slow
def test_five_hour_old_data_is_not_used_the_fallback_is_and_the_report_says_why(tmp_path: Path, prefect_harness) -> None:
    from flows.training import carbon_aware_training

    server = old_intensity_server(timedelta(hours=5))
    try:
        path = tmp_path / "policy.yaml"
        path.write_text(POLICY.format(url=server.url, python=sys.executable))
        report = carbon_aware_training(policy_path=str(path), backend_name="simulated",
                                       ledger_path=str(tmp_path / "ledger.sqlite3"))
    finally:
        server.close()
    assert server.paths and server.paths[0] == "/intensity"  # it was asked, and answered at once
    assert report["status"] == "completed"
    assert report["carbon_sources"][0].startswith("static")
    assert report["intensity_g_per_kwh"] != 88
    (why,) = [w for w in report["warnings"] if w.startswith("carbon: ukgrid: ")]
    assert "stale data: the newest value's interval ended 5.0 h ago" in why and "1.0 h staleness limit" in why
    assert report["late_s"] == 0.0  # a deadline, met


def test_deadline_miss_counts_seconds_past_the_deadline() -> None:
    deadline = datetime(2026, 6, 2, 8, 0, tzinfo=timezone.utc)
    assert deadline_miss(deadline - timedelta(minutes=1), deadline) == (0.0, "")
    assert deadline_miss(deadline, None) == (None, "")
    late, warning = deadline_miss(deadline + timedelta(seconds=754), deadline)
    assert late == 754.0 and warning == "deadline missed: finished 754 s after the deadline 2026-06-02 08:00:00 UTC"


def _report(run_id: str, late_s: float | None) -> dict:
    return {"version": 1, "run_id": run_id, "policy": "p.yaml", "job": "nightly", "status": "completed",
            "backend": "simulated", "measured": False, "started_at": f"2026-06-02T0{len(run_id)}:00:00+00:00",
            "energy_j": 10.0, "carbon_g": 0.5, "duration_s": 60.0, "late_s": late_s}


def test_gridshift_runs_warns_about_late_runs_in_both_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.cli import app

    monkeypatch.setenv("GRIDSHIFT_HOME", str(tmp_path))
    with Ledger() as ledger:
        ledger.record(_report("on-time", 0.0))
        ledger.record(_report("late-one", 754.0))
        ledger.record(_report("no-dl", None))
    warning = "warning: run late-one of nightly finished 754 s after its deadline"
    runner = CliRunner()
    human = runner.invoke(app, ["runs"])
    assert human.exit_code == 0 and warning in human.stderr and "late-one" in human.stdout
    as_json = runner.invoke(app, ["runs", "--json"])
    assert as_json.exit_code == 0 and warning in as_json.stderr
    rows = {r["run_id"]: r for r in json.loads(as_json.stdout)}
    assert (rows["late-one"]["late_s"], rows["on-time"]["late_s"], rows["no-dl"]["late_s"]) == (754.0, 0.0, None)


def test_gridshift_runs_warns_about_runs_serve_missed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a missed night never started, so only serve's store knows it: `gridshift runs` must not be silent
    from flows.cli import app
    from scheduler.service.serve import PlannedRun, ServeStore

    monkeypatch.setenv("GRIDSHIFT_HOME", str(tmp_path))
    now = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    store = ServeStore(tmp_path / "serve.sqlite")
    for job, day in (("nightly", 1), ("weekly", 1), ("nightly", 2)):
        key = f"{job}@202603{day:02d}T0100Z"
        store.add(PlannedRun(key=key, run_at=datetime(2026, 3, day, 2, 30, tzinfo=timezone.utc)), now)
        store.missed(key, now, "not triggered by its latest start 04:20 (3 attempts: ConnectError)")
    runner = CliRunner()
    result = runner.invoke(app, ["runs", "--job", "nightly"])
    assert result.exit_code == 0 and "no runs of job 'nightly' recorded" in result.stdout
    lines = [ln for ln in result.stderr.splitlines() if "missed" in ln]
    assert lines == [f"warning: gridshift serve missed run nightly@202603{d:02d}T0100Z (planned for 2026-03-{d:02d} 02:30 UTC): "
                     "not triggered by its latest start 04:20 (3 attempts: ConnectError)" for d in (2, 1)]
    assert "weekly" in runner.invoke(app, ["runs"]).stderr
    assert runner.invoke(app, ["runs", "--json"]).stdout.strip() == "[]"  # the JSON list stays the ledger's runs
