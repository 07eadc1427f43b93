"""Small things a person trips on (issue 33): a misspelt mode, a missing file, an immediate start, a policy's
own time zone, shell completion, the commands grouped in --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import HELP_PANELS, app
from flows.report.human import start_words

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()

POLICY = """schema_version: 1
carbon: {provider: static, options: {g_per_kwh: 300}}
modes:
  speed: {power_limit_fraction: 1.0}
  MODE: {power_limit_fraction: 0.6}
job: {name: x, command: [echo, hi], expected_duration_s: 5, cron: "0 1 * * *", timezone: Europe/Berlin}
"""


def test_a_misspelt_required_mode_is_named_as_such(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY.replace("MODE", "efficency"))
    out = runner.invoke(app, ["policy", "check", str(policy)])
    assert out.exit_code == 2
    assert "must define 'efficiency' ('efficency' looks like a misspelling of 'efficiency')" in out.output
    policy.write_text(POLICY.replace("MODE", "eco"))  # nothing near: no guess
    assert "misspelling" not in runner.invoke(app, ["policy", "check", str(policy)]).output


def test_a_missing_file_has_no_line_0(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    out = runner.invoke(app, ["policy", "check", str(missing)])
    assert out.exit_code == 2 and out.output.strip() == f"{missing}: policy file not found"
    as_json = json.loads(runner.invoke(app, ["policy", "check", str(missing), "--json"]).output)
    assert as_json["files"][0]["errors"][0]["line"] is None


@pytest.mark.parametrize(("deferred_s", "words"), [
    (1.3, "at once"), (-0.5, "at once"), (59, "at once"),
    (7500, "deferred 2 h 05 min from the nominal start 01:00 UTC"),
    (300, "deferred 5 min from the nominal start 01:00 UTC"), (-1800, "30 min before the nominal start 01:00 UTC"),
])
def test_an_immediate_start_is_not_called_deferred(deferred_s: float, words: str) -> None:
    assert start_words({"deferred_s": deferred_s, "nominal_start": "2026-03-02T01:00:00+00:00"}) == words


def test_next_runs_in_the_policys_time_zone_beside_utc(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY.replace("MODE", "efficiency"))
    out = runner.invoke(app, ["policy", "check", str(policy)])
    assert out.exit_code == 0, out.output
    runs = out.output.splitlines()[1]
    assert "01:00 CET (00:00 UTC)" in runs or "01:00 CEST (23:00 UTC)" in runs, runs
    listed = json.loads(runner.invoke(app, ["policy", "check", str(policy), "--json"]).output)["files"][0]
    assert all(local[11:16] == "01:00" and local[-6:] in ("+01:00", "+02:00") for local in listed["next_runs_local"])


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_the_shells_script(shell: str) -> None:
    out = runner.invoke(app, ["--show-completion", shell])
    assert out.exit_code == 0 and "_GRIDSHIFT_COMPLETE" in out.output


def test_completion_completes_and_a_bad_shell_is_a_usage_error() -> None:
    assert runner.invoke(app, ["--show-completion", "tcsh"]).exit_code == 2
    env = {**os.environ, "_GRIDSHIFT_COMPLETE": "complete_bash", "COMP_WORDS": "gridshift rep", "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'gridshift'; from flows.cli import main; main()"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0 and done.stdout.split() == ["report"], (done.stdout, done.stderr)


def test_help_groups_every_command() -> None:
    grouped = {name for names in HELP_PANELS.values() for name in names}
    registered = {c.name or c.callback.__name__ for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert registered == grouped  # a new command must pick its group
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "120"}).output
    positions = [text.index(panel.split(" (")[0]) for panel in HELP_PANELS]
    assert positions == sorted(positions), text
    assert text.index("run ") < text.index("deploy ") < text.index("bench ")
