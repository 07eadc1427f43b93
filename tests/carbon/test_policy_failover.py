"""Inside a policy run the chain fails over with the reason recorded (monitor_for is what the flow uses)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from flows.sources import monitor_for
from scheduler.policy.loader import load_policy

POLICY = """
schema_version: 1
carbon:
  provider: ukgrid
  base_url: {url}
  options: {{timeout_s: 0.3, backoff_s: 0}}
  max_staleness_s: 1800
  fallbacks:
    - provider: static
      options: {{g_per_kwh: 250}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.6}}
rules: {{kind: absolute, clean_below_g_per_kwh: 200, dirty_above_g_per_kwh: 300}}
job: {{command: [python, -c, "pass"], expected_duration_s: 1}}
"""


@pytest.mark.parametrize("mode", ["429", "503", "403-html", "timeout", "malformed", "empty", "204", "unknown-zone"])
def test_failover_reason_names_the_failed_source(mode: str, server, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(url=server.url))
    monitor = monitor_for(load_policy(path))
    server.failure = mode
    reading = monitor.read(datetime(2018, 1, 20, 12, 10, tzinfo=timezone.utc))
    assert reading.source == "static" and reading.current.g_per_kwh == 250.0
    assert len(reading.failures) == 1 and reading.failures[0].startswith("ukgrid: ")
    assert reading.reason.startswith("intensity from static after: ukgrid: ")
    monitor.close()


def test_the_policy_cache_lives_under_gridshift_home(server, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(url=server.url))
    monitor_for(load_policy(path)).read(datetime(2018, 1, 20, 12, 10, tzinfo=timezone.utc))
    home = Path(__import__("os").environ["GRIDSHIFT_HOME"])
    # one file for the source: "ukgrid.json", or "ukgrid_<options hash>.json" once flows passes
    # the source's options to SourceSpec (see carbon.cache.cache_key)
    assert len(list((home / "carbon-cache").glob("ukgrid*.json"))) == 1


@pytest.mark.slow
def test_a_policy_run_records_the_failover_in_its_report(server, tmp_path: Path, prefect_harness) -> None:
    import sys

    from flows.training import carbon_aware_training

    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(url=server.url).replace("[python, -c", f"[{sys.executable}, -c"))
    server.failure = "503"
    report = carbon_aware_training(policy_path=str(path), backend_name="simulated", ledger_path=str(tmp_path / "l.sqlite3"))
    assert report["status"] == "completed"
    assert any(w.startswith("carbon: ukgrid: ") and "503" in w for w in report["warnings"])
    assert report["carbon_sources"][0].startswith("static")
