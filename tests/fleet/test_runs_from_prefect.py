"""`gridshift runs --from prefect`: every run's artifact read back from the (session's real) Prefect API, once."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from flows.run.artifacts import artifact_key, report_markdown


def _report(run_id: str, job: str, started: str) -> dict:
    return {"run_id": run_id, "status": "completed", "job": job, "policy": "p.yaml", "backend": "simulated",
            "measured": False, "energy_label": "modelled", "decision_reason": "clean", "energy_j": 1.0,
            "duration_s": 2.0, "carbon_g": 0.1, "intensity_kind": "average", "intensity_g_per_kwh": 100.0,
            "intensity_source": "trace", "deferred_s": 0.0, "modes": [], "started_at": started,
            "extra": {"site": "de"}}


def test_runs_from_prefect_lists_each_run_once(prefect_harness) -> None:
    from prefect.artifacts import create_markdown_artifact  # not at import: collection must not load Prefect

    from flows.cli import app

    reports = [_report(f"fleet-{i}", "fleet-job", f"2026-01-01T0{i}:00:00+00:00") for i in range(3)]
    for report in reports + [reports[0]]:  # a record written twice is still one run
        create_markdown_artifact(key=artifact_key(report["run_id"]), markdown=report_markdown(report))
    create_markdown_artifact(key="gridshift-run-not-a-report", markdown="# hand-written")
    out = CliRunner().invoke(app, ["runs", "--from", "prefect", "--job", "fleet-job", "--json"])
    assert out.exit_code == 0, out.output
    assert [r["run_id"] for r in json.loads(out.output)] == ["fleet-2", "fleet-1", "fleet-0"]
    table = CliRunner().invoke(app, ["runs", "--from", "prefect", "--job", "fleet-job"])
    assert table.exit_code == 0 and "site" in table.output.splitlines()[0]
    bad = CliRunner().invoke(app, ["runs", "--from", "elsewhere"])
    assert bad.exit_code == 2
