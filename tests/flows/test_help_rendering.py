"""Every command's --help says what the command takes: each option and argument with its whole help
text (nothing cut off at 80 columns), under a usage line that names the command.

What is checked is the content, not how a typer version draws it (``--json <bool>`` or ``--json``,
boxes or plain columns): typer is not pinned to one minor version for its looks.
"""

from __future__ import annotations

import re
from typing import Any

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


def _click_command(path: tuple[str, ...]) -> Any:
    # duck-typed: typer ships its own copy of click in some versions, so click's classes may not match
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def _flat(text: str) -> str:
    """The help as one line of words: box drawing and line wrapping removed."""
    return " ".join(re.sub(r"[│┃╭╮╰╯─━┏┓┗┛]", " ", text).split())


def _words_in_order(needle: str, text: str) -> bool:
    """Every word of ``needle`` appears in ``text`` in order: columns wrapped side by side (a type
    column next to the help column) interleave other words, and an ellipsis would drop some."""
    words = iter(text.split())
    return all(any(w == t for t in words) for w in needle.split())


def test_the_cli_has_its_commands() -> None:
    assert {("run",), ("policy", "check"), ("simulate",), ("profile", "run")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_help_shows_every_option_with_its_whole_help_at_80_columns(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERM": "dumb"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    text = _flat(result.output)
    assert f"Usage: gridshift {' '.join(path)}" in " ".join(text.replace("Usage: root", "Usage: gridshift").split()), text
    for param in _click_command(path).params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "option":
            assert any(opt in text for opt in param.opts), (param.opts, text)
        help_text = getattr(param, "help", None)
        if help_text:
            assert _words_in_order(_flat(help_text), text), (help_text, text)
