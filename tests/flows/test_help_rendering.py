"""Every command's --help reads cleanly at 80 columns: no `<bool>` flag types, no `{policy}` usage
placeholders, nothing cut off with an ellipsis."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from flows.cli import app


def _command_paths(group: typer.Typer, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [(*prefix, c.name or (c.callback.__name__ if c.callback else "")) for c in group.registered_commands]
    for sub in group.registered_groups:
        paths += _command_paths(sub.typer_instance, (*prefix, sub.name or ""))
    return paths


COMMANDS = _command_paths(app)


def test_the_cli_has_its_commands() -> None:
    assert {("run",), ("policy", "check"), ("simulate",), ("profile", "run")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_help_renders_cleanly_at_80_columns(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERM": "dumb"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    text = result.output
    assert "<bool>" not in text and "…" not in text, text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage
    assert all(len(line) <= 80 for line in text.splitlines()), text
