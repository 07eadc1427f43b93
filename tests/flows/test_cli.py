"""The command line: exit codes, one-line errors, --json contracts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.cli._errors import run_guarded

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "policy.yaml"
runner = CliRunner()


def test_policy_check_ok() -> None:
    result = runner.invoke(app, ["policy", "check", str(POLICY)])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output


@pytest.mark.parametrize(
    "mutation, expect",
    [
        (("  name: auto", "  name: auto\n  turbo: yes"), "backend.turbo: unknown key 'turbo'"),
        (("expected_duration_s: 5", "expected_duration_s: five"), "job.expected_duration_s"),
        (("kind: plan ", "kind: [plan "), "YAML syntax error"),
    ],
)
def test_policy_check_bad_input_is_one_line_exit_2(tmp_path: Path, mutation: tuple[str, str], expect: str) -> None:
    bad = tmp_path / "bad.yaml"
    text = POLICY.read_text()
    assert mutation[0] in text
    bad.write_text(text.replace(*mutation))
    (tmp_path / "train_tiny.py").write_text("")  # the copy's job, beside it
    result = runner.invoke(app, ["policy", "check", str(bad)])
    assert result.exit_code == 2
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{bad}:") and expect in lines[0], lines
    if "turbo" in expect:  # the line of the offending key itself
        turbo_line = bad.read_text().splitlines().index("  turbo: yes") + 1
        assert lines[0].startswith(f"{bad}:{turbo_line}:3:")


def test_run_with_bad_policy_exits_2_before_prefect(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("carbon: {provider: trace}\nmodes: {}\n")
    result = runner.invoke(app, ["run", str(bad)])
    assert result.exit_code == 2
    assert result.output.strip().startswith(f"gridshift: error: {bad}:")


def test_policy_schema_is_json() -> None:
    result = runner.invoke(app, ["policy", "schema"])
    assert result.exit_code == 0
    assert "modes" in json.loads(result.output)["properties"]


def test_runs_json_empty_ledger() -> None:
    result = runner.invoke(app, ["runs", "--json"])
    assert result.exit_code == 0 and json.loads(result.output) == []


def test_runs_limit_0_lists_every_run() -> None:
    from scheduler.store.ledger import Ledger

    with Ledger() as ledger:
        for i in range(25):
            ledger.record({"run_id": f"r{i:02d}", "started_at": f"2026-01-01T00:{i:02d}:00+00:00", "policy": "p.yaml",
                           "job": "j", "status": "completed", "backend": "simulated", "measured": False,
                           "energy_j": 1.0, "carbon_g": 0.1, "duration_s": 2.0, "modes": []})
    assert len(json.loads(runner.invoke(app, ["runs", "--json", "--limit", "0"]).output)) == 25
    assert len(json.loads(runner.invoke(app, ["runs", "--json"]).output)) == 20
    shown = runner.invoke(app, ["runs", "--limit", "0"]).output
    assert "no runs recorded" not in shown and "r00" in shown and "r24" in shown
    assert runner.invoke(app, ["runs", "--limit", "-1"]).exit_code == 2


def test_intensity_from_packaged_trace_json() -> None:
    result = runner.invoke(app, ["intensity", "--provider", "trace", "--forecast", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["unit"] == "gCO2/kWh" and out["kind"] == "marginal"
    assert out["now"]["g_per_kwh"] > 0 and len(out["forecast"]) >= 24


def test_intensity_unknown_provider_is_exit_2() -> None:
    rc = _guarded(["intensity", "--provider", "nope"])
    assert rc == 2


def _guarded(argv: list[str]) -> int:
    old = sys.argv
    sys.argv = ["gridshift", *argv]
    try:
        return run_guarded(app)
    finally:
        sys.argv = old


def test_version_and_help() -> None:
    assert runner.invoke(app, ["--version"]).output.startswith("gridshift")
    help_text = runner.invoke(app, ["--help"]).output
    for command in ("run", "runs", "policy", "intensity"):
        assert command in help_text


@pytest.mark.usefixtures("prefect_harness")
def test_real_cli_run_json_prints_exactly_one_object(tmp_path: Path) -> None:
    """A real `gridshift run --json` subprocess against the harness's Prefect server."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "GRIDSHIFT_HOME": str(tmp_path)}
    cmd = [sys.executable, "-c", "from flows.cli import main; main()", "run", str(POLICY), "--json", "--backend", "simulated",
           "--", sys.executable, str(REPO / "examples" / "train_tiny.py"), "--epochs", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)  # exactly one JSON document: anything else fails to parse
    for key in ("energy_j", "duration_s", "carbon_g", "modes", "deferred_s", "backend", "measured"):
        assert key in report
    assert report["measured"] is False and report["backend"] == "simulated"
    assert all({"mode", "start", "end"} <= set(m) for m in report["modes"])
    assert "epoch 2/2" in proc.stderr  # job output streamed into the logs, on stderr
    # the first line says which server, before Prefect's import (its timing: benchmarks/run_overhead.py)
    assert proc.stderr.splitlines()[0] == f"gridshift: using the Prefect server at {env['PREFECT_API_URL']}"
    # every warning on stderr is in the report, for a reader of --json alone
    warned = [line.removeprefix("gridshift: warning: ") for line in proc.stderr.splitlines()
              if line.startswith("gridshift: warning: ")]
    assert warned and set(warned) <= set(report["warnings"]), (warned, report["warnings"])
    listed = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "runs", "--json"],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [report["run_id"]]
    # what it saved, against the baseline it names, and its chart from `gridshift report` (issue 33)
    assert report["saving"]["baseline"].startswith("the nominal start (") and report["saving"]["baseline"].endswith("in speed mode")
    assert report["saving"]["saved_pct"] is not None and json.loads(listed.stdout)[0]["saving"] == report["saving"]
    png = tmp_path / "run.png"
    plotted = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "report", "--plot", str(png)],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert plotted.returncode == 0, plotted.stderr
    from PIL import Image

    with Image.open(png) as image:
        assert image.size[0] >= 400 and image.size[1] >= 250


@pytest.mark.parametrize("argv, code", [([], 0), (["nonsense"], 2), (["run"], 2), (["run", "--bogus", "x.yaml"], 2)])
def test_usage_errors_are_exit_2_without_traceback(argv: list[str], code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert _guarded(argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err


def test_policy_check_warns_when_the_planner_grid_is_coarser_than_the_window(tmp_path: Path) -> None:
    """Issue 32: a 4-minute cron with the default 5-minute slot_s planned every run as one that misses its deadline."""
    import json

    policy = tmp_path / "often.yaml"
    policy.write_text("""
carbon: {provider: static, options: {country: DEU}}
modes:
  speed: {power_limit_fraction: 1.0}
  efficiency: {power_limit_fraction: 0.7, max_slowdown: 0.3}
job:
  name: often
  command: [python, -c, "pass"]
  expected_duration_s: 60
  cron: "*/4 * * * *"
  deadline_s: 240
backend: {name: simulated}
""")
    result = runner.invoke(app, ["policy", "check", str(policy)])
    assert result.exit_code == 0, result.output  # a warning, not an error
    assert (f"{policy}: warning: rules.slot_s (300 s) is coarser than the job's window (240 s from its earliest start "
            "to its deadline)") in result.output
    assert "set rules.slot_s to 180 s or less" in result.output
    as_json = json.loads(runner.invoke(app, ["policy", "check", str(policy), "--json"]).stdout)
    assert len(as_json["files"][0]["warnings"]) == 1
    policy.write_text(policy.read_text() + "rules: {kind: plan, slot_s: 60}\n")
    assert "warning" not in runner.invoke(app, ["policy", "check", str(policy)]).output
