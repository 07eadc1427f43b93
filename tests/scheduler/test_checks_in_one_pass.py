"""Issue 22: structural and semantic errors are reported together, each `file:line:col`; no mistake
hides another, and a job with nothing to run (or a checkpointable callable) is a located error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.errors import PolicyError
from scheduler.policy.types import CHECKPOINTABLE_CALLABLE
from scheduler.policy.checks import NOTHING_TO_RUN
from scheduler.policy.loader import parse_policy

GOOD = """\
carbon:
  provider: static
  options: {country: USA}
  fallbacks:
    - provider: static
      options: {country: DEU}
modes:
  speed: {power_limit_fraction: 1.0}
  efficiency: {power_limit_fraction: 0.6}
job:
  command: [python, -c, pass]
  expected_duration_s: 60
  earliest_start_s: -600
  deadline_s: 3600
  cron: "0 1 * * *"
backend:
  name: simulated
"""

#: issue 22's acceptance: a misspelt key, a bad cron, an unknown backend, a wrong type
FOUR_MISTAKES = (GOOD.replace("earliest_start_s", "earliest_strat_s")
                 .replace('"0 1 * * *"', '"0 1 * * mon-fry"')
                 .replace("name: simulated", "name: simulatd")
                 .replace("expected_duration_s: 60", "expected_duration_s: an hour"))

NO_COMMAND = GOOD.replace("  command: [python, -c, pass]\n", "")


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _errors(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, where="p.yaml")
    return info.value.lines()


def _located(lines: list[str], text: str, expected: list[tuple[str, str]]) -> None:
    assert len(lines) == len(expected), lines
    for needle, message in expected:
        hits = [line for line in lines if message in line]
        assert hits, (message, lines)
        assert hits[0].startswith(f"p.yaml:{_line_of(text, needle)}:"), hits[0]


def test_four_mistakes_are_all_reported_with_positions() -> None:
    _located(_errors(FOUR_MISTAKES), FOUR_MISTAKES, [
        ("earliest_strat_s", "job.earliest_strat_s: unknown key 'earliest_strat_s' (did you mean 'earliest_start_s'?)"),
        ("expected_duration_s", "job.expected_duration_s: Input should be a valid number"),
        ("mon-fry", "job.cron: '0 1 * * mon-fry' is not a cron expression"),
        ("simulatd", "backend.name: unknown backend 'simulatd' (did you mean 'simulated'?)"),
    ])


def test_a_deadline_error_does_not_hide_a_bad_cron() -> None:
    text = (GOOD.replace("deadline_s: 3600", "deadline_s: 30").replace("earliest_start_s: -600", "earliest_start_s: 0")
            .replace('"0 1 * * *"', '"0 1 * * 8"'))
    _located(_errors(text), text, [("deadline_s: 30", "job.deadline_s: deadline_s leaves no room"),
                                   ("0 1 * * 8", "job.cron: '0 1 * * 8' is not a cron expression")])


def test_a_type_error_in_fallbacks_does_not_hide_an_unknown_provider() -> None:
    text = GOOD.replace("provider: static\n  options", "provider: statik\n  options").replace("{country: DEU}", "[DEU]")
    _located(_errors(text), text, [("provider: statik", "carbon.provider: unknown carbon provider 'statik'"),
                                   ("[DEU]", "carbon.fallbacks.0.options: Input should be an object")])


def test_type_errors_do_not_hide_missing_modes_or_command_and_callable() -> None:
    text = (GOOD.replace("  efficiency: {power_limit_fraction: 0.6}\n", "")
            .replace("  expected_duration_s: 60", "  callable: json:dumps\n  expected_duration_s: '60'"))
    _located(_errors(text), text, [("  speed:", "modes: must define 'efficiency'"),
                                   ("callable:", "job.callable: give either command or callable, not both"),
                                   ("expected_duration_s", "job.expected_duration_s: Input should be a valid number")])


def test_a_job_with_nothing_to_run_is_a_located_error() -> None:
    (line,) = _errors(NO_COMMAND)
    assert line == f"p.yaml:{_line_of(NO_COMMAND, 'job:')}:1: job: {NOTHING_TO_RUN}"


def test_a_checkpointable_callable_is_refused_where_it_is_written() -> None:
    text = GOOD.replace("  command: [python, -c, pass]", "  callable: json:dumps\n  checkpointable: true")
    (line,) = _errors(text)
    assert line.startswith(f"p.yaml:{_line_of(text, 'checkpointable')}:19: job.checkpointable: {CHECKPOINTABLE_CALLABLE}")


def test_policy_check_lists_every_mistake_and_exits_2(tmp_path: Path) -> None:
    from flows.cli import app

    four, none = tmp_path / "four.yaml", tmp_path / "none.yaml"
    four.write_text(FOUR_MISTAKES, encoding="utf-8")
    none.write_text(NO_COMMAND, encoding="utf-8")
    result = CliRunner().invoke(app, ["policy", "check", str(four), str(none)])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == [str(four)] * 4 + [str(none)]
    assert all(line.split(":")[1].isdigit() and line.split(":")[2].isdigit() for line in lines)
    out = json.loads(CliRunner().invoke(app, ["policy", "check", "--json", str(four), str(none)]).stdout)
    assert [len(f["errors"]) for f in out["files"]] == [4, 1] and out["exit_code"] == 2
