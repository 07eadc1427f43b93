"""Every error of a policy file at once, each `file:line:col: path: message`, with "did you mean" for
near misses; and relative paths read from the policy file's folder, wherever gridshift runs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.errors import PolicyError
from scheduler.policy.loader import MAX_ISSUES, load_policy, parse_policy

GOOD = """\
schema_version: 1
carbon:
  provider: trace
  options: {column: hist}
modes:
  speed: {power_limit_fraction: 1.0}
  efficiency: {power_limit_fraction: 0.6, max_slowdown: 0.25}
rules:
  kind: relative
job:
  command: [python, -c, pass]
  expected_duration_s: 60
  cron: "0 1 * * *"
backend:
  name: simulated
"""

FOUR_MISTAKES = (GOOD.replace("max_slowdown", "max_slowdwn")     # a misspelt key
                 .replace("  kind: relative", "  kind: relative\n  clean_mode: sped")   # a misspelt mode
                 .replace('"0 1 * * *"', '"61 1 * * *"')          # a cron that is not one
                 .replace("name: simulated", "name: nvidai"))      # an unknown backend


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _errors(text: str, tmp_path: Path | None = None) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, where="p.yaml", base_dir=tmp_path)
    assert "\n" not in str(info.value)  # str() stays one line: the first error and a count
    return info.value.lines()


def test_good_policy_passes() -> None:
    assert parse_policy(GOOD).backend.name == "simulated"


def test_policy_check_lists_four_mistakes_with_positions_and_exits_2(tmp_path: Path) -> None:
    from flows.cli import app

    bad = tmp_path / "four.yaml"
    bad.write_text(FOUR_MISTAKES, encoding="utf-8")
    result = CliRunner().invoke(app, ["policy", "check", str(bad)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 4, lines
    expected = [("max_slowdwn", "modes.efficiency.max_slowdwn: unknown key 'max_slowdwn' (did you mean 'max_slowdown'?)"),
                ("clean_mode: sped", "rules.clean_mode: names unknown mode 'sped' (did you mean 'speed'?)"),
                ("61 1", "job.cron: '61 1 * * *' is not a cron expression"),
                ("nvidai", "backend.name: unknown backend 'nvidai' (did you mean 'nvidia'?)")]
    for line, (needle, message) in zip(lines, expected):
        assert line.startswith(f"{bad}:{_line_of(FOUR_MISTAKES, needle)}:"), line
        assert message in line, line
    assert sum("did you mean" in line for line in lines) == 3


def test_policy_check_json_lists_the_same_errors(tmp_path: Path) -> None:
    import json

    from flows.cli import app

    bad = tmp_path / "four.yaml"
    bad.write_text(FOUR_MISTAKES, encoding="utf-8")
    result = CliRunner().invoke(app, ["policy", "check", str(bad), str(tmp_path / "missing.yaml"), "--json"])
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    assert out["status"] == "error" and [len(f["errors"]) for f in out["files"]] == [4, 1]
    assert {"file", "line", "column", "path", "message"} == set(out["files"][0]["errors"][0])


@pytest.mark.parametrize("cron", ["61 1 * * *", "every night", "0 1 * *", "0 25 * * *"])
def test_a_bad_cron_is_an_error(cron: str) -> None:
    (line,) = _errors(GOOD.replace('"0 1 * * *"', repr(cron)))
    assert f"p.yaml:{_line_of(GOOD, 'cron')}:9: job.cron: {cron!r} is not a cron expression" in line


@pytest.mark.parametrize("mutation, expect", [
    (("kind: relative", "kind: relativ"), "rules.kind: unknown rules kind 'relativ' (did you mean 'relative'?)"),
    (("provider: trace", "provider: trcae"), "carbon.provider: unknown carbon provider 'trcae' (did you mean 'trace'?)"),
    (("{column: hist}", "{colum: hist}"), "carbon.options.colum: unknown option 'colum' for provider 'trace' (did you mean 'column'?)"),
    (("backend:\n", "backnd:\n"), "backnd: unknown key 'backnd' (did you mean 'backend'?)"),
    (("  efficiency: {", "  efficiency: {power_limit_select: energi, "), "did you mean 'energy'?"),
    (("expected_duration_s: 60", "expected_duraton_s: 60"), "unknown key 'expected_duraton_s' (did you mean 'expected_duration_s'?)"),
])
def test_near_misses_get_a_suggestion(mutation: tuple[str, str], expect: str) -> None:
    text = GOOD.replace(*mutation)
    lines = _errors(text)
    assert any(expect in line for line in lines), lines


def test_a_misspelt_section_does_not_also_report_it_missing() -> None:
    text = GOOD.replace("job:\n", "jobs:\n")
    assert _errors(text) == [f"p.yaml:{_line_of(text, 'jobs:')}:1: jobs: unknown key 'jobs' (did you mean 'job'?)"]


def test_far_misses_get_no_suggestion() -> None:
    (line,) = _errors(GOOD.replace("name: simulated", "name: quantum"))
    assert "unknown backend 'quantum' (known: auto, nvidia, simulated)" in line and "did you mean" not in line


def test_at_most_max_issues_are_listed_and_the_rest_counted() -> None:
    extra = "".join(f"  bogus{i}: 1\n" for i in range(MAX_ISSUES + 5))
    text = GOOD.replace("  name: simulated\n", "  name: simulated\n" + extra)
    with pytest.raises(PolicyError) as info:
        parse_policy(text, where="p.yaml")
    lines = info.value.lines()
    assert len(lines) == MAX_ISSUES + 1 and lines[-1] == "p.yaml: ... and 5 more error(s) not shown"
    assert str(info.value).endswith(f"[and {MAX_ISSUES + 4} more error(s)]")


def test_missing_program_workdir_and_script(tmp_path: Path) -> None:
    lines = _errors(GOOD.replace("[python, -c, pass]", "[no-such-program-gridshift, x]"), tmp_path)
    assert lines == [f"p.yaml:{_line_of(GOOD, 'command')}:13: job.command.0: program 'no-such-program-gridshift' not found on PATH"]
    (line,) = _errors(GOOD.replace("[python, -c, pass]", "[python, train.py]"), tmp_path)
    assert f"job.command.0: script 'train.py' not found in {tmp_path}" in line
    (line,) = _errors(GOOD.replace("[python, -c, pass]", "[./run.sh]"), tmp_path)
    assert f"program './run.sh' not found in {tmp_path}" in line
    (line,) = _errors(GOOD.replace("  cron:", "  workdir: nowhere\n  cron:"), tmp_path)
    assert f"job.workdir: working directory {tmp_path / 'nowhere'} does not exist" in line


def test_a_script_that_is_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    script.chmod(0o644)
    (line,) = _errors(GOOD.replace("[python, -c, pass]", "[./run.sh]"), tmp_path)
    assert "program './run.sh' is not executable" in line
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert parse_policy(GOOD.replace("[python, -c, pass]", "[./run.sh]"), base_dir=tmp_path)


def test_schema_errors_and_file_checks_are_reported_together(tmp_path: Path) -> None:
    text = (GOOD.replace("expected_duration_s: 60", "expected_duration_s: soon").replace("{column: hist}", "{path: gone.csv}")
            .replace("[python, -c, pass]", "[python, gone.py]"))
    lines = _errors(text, tmp_path)
    # each piece is checked on its own: the job's wrong duration hides neither its missing script
    # nor the carbon section's missing file
    assert [line.split(": ")[1] for line in lines] == ["job.expected_duration_s", "carbon.options.path", "job.command.0"]


def test_relative_paths_are_read_from_the_policy_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "other" / "dir"
    (conf / "work").mkdir(parents=True)
    (conf / "trace.csv").write_text("timestamp,g\n2024-01-01T00:00,5\n2024-01-01T01:00,6\n", encoding="utf-8")
    (conf / "work" / "train.py").write_text("", encoding="utf-8")
    text = (GOOD.replace("{column: hist}", "{path: trace.csv, column: g}")
            .replace("[python, -c, pass]", "[python, train.py]").replace("  cron:", "  workdir: work\n  cron:"))
    (conf / "policy.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    policy = load_policy(Path("other/dir/policy.yaml"))
    assert policy.carbon.options["path"] == str(conf / "trace.csv")
    assert policy.job.workdir == conf / "work"
    os.chdir(conf)
    assert load_policy("policy.yaml") == policy


def test_the_retired_poll_interval_key_says_why() -> None:
    (line,) = _errors(GOOD.replace("  options: {column: hist}", "  options: {column: hist}\n  poll_interval_s: 300"))
    assert "carbon.poll_interval_s: carbon.poll_interval_s is no longer read" not in line
    assert "carbon.poll_interval_s: no longer read (there is no background poller" in line
