"""The ``gridshift`` command line. Thin commands; one exit-code table.

Exit codes: 0 ok · 1 the job failed, or a bug · 2 bad input (policy, arguments, trace) ·
3 environment (no GPU, no permission, provider unreachable and no fallback).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from flows.cli._errors import run_guarded

__all__ = ["app", "main"]

#: commands whose cleanup is complete when they return (``gridshift run``: report printed, server
#: stopped, Prefect's log and event workers drained) add themselves here; the process then ends
#: without tearing down Prefect's module graph, which takes seconds on a busy machine
FINISHED_CLEANLY: set[str] = set()


app = typer.Typer(
    name="gridshift",
    help="Carbon-aware scheduling and GPU energy control for recurring training jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"gridshift {version('gridshift')}")
        except PackageNotFoundError:
            typer.echo("gridshift (not installed)")
        raise typer.Exit()


#: the shells whose completion scripts typer writes
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _shell(value: str | None) -> str | None:
    if value is not None and value not in SHELLS:
        raise typer.BadParameter(f"{value!r}: one of {', '.join(SHELLS)}")
    return value


def _show_completion(value: str | None) -> None:
    if _shell(value):
        from typer.completion import get_completion_script

        typer.echo(get_completion_script(prog_name="gridshift", complete_var=COMPLETE_VAR, shell=str(value)))
        raise typer.Exit()


def _install_completion(value: str | None) -> None:
    if _shell(value):
        from typer.completion import install

        shell, path = install(shell=str(value), prog_name="gridshift", complete_var=COMPLETE_VAR)
        typer.echo(f"{shell} completion for gridshift installed in {path}; it takes effect in a new shell")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    show_completion: Optional[str] = typer.Option(None, "--show-completion", metavar="SHELL", callback=_show_completion,
                                                  is_eager=True, expose_value=False,
                                                  help="Print the completion script for SHELL (bash, zsh, fish, powershell), "
                                                       "e.g. `gridshift --show-completion bash > ~/.gridshift-complete.bash`."),
    install_completion: Optional[str] = typer.Option(None, "--install-completion", metavar="SHELL",
                                                     callback=_install_completion, is_eager=True, expose_value=False,
                                                     help="Install completion for SHELL in its start-up file."),
) -> None:
    """gridshift: make GPU training cleaner without making it late."""


#: the environment variable the completion scripts set when they ask gridshift for completions
COMPLETE_VAR = "_GRIDSHIFT_COMPLETE"

# Each command module registers itself on ``app``; one import per room of the CLI.
from flows.cli import policy as _policy  # noqa: E402,F401
from flows.cli import run as _run  # noqa: E402,F401
from flows.cli import intensity as _intensity  # noqa: E402,F401
from flows.cli import bench as _bench  # noqa: E402,F401
from flows.cli import gpu as _gpu  # noqa: E402,F401
from flows.cli import profile as _profile  # noqa: E402,F401
from flows.cli import simulate as _simulate  # noqa: E402,F401
from flows.cli import deploy as _deploy  # noqa: E402,F401
from flows.cli import simulate_sites as _simulate_sites  # noqa: E402,F401


#: ``gridshift --help`` lists the commands in these groups, in this order (a new command must pick one)
HELP_PANELS = {
    "One GPU box": ("run", "runs", "report", "policy", "simulate", "intensity", "prices", "gpu"),
    "Fleet (several nodes on Prefect work pools)": ("deploy", "submit", "serve", "simulate-sites", "curtail"),
    "Research and benchmarks": ("forecasts", "bench", "profile"),
}


def _group_the_help() -> None:
    panel_of = {name: panel for panel, names in HELP_PANELS.items() for name in names}
    order = [name for names in HELP_PANELS.values() for name in names]
    for info in app.registered_commands:
        info.rich_help_panel = panel_of[info.name or (info.callback.__name__ if info.callback else "")]
    for group in app.registered_groups:
        group.rich_help_panel = panel_of[str(group.name)]
    app.registered_commands.sort(key=lambda c: order.index(c.name or (c.callback.__name__ if c.callback else "")))
    app.registered_groups.sort(key=lambda g: order.index(str(g.name)))


_group_the_help()


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    # Python's default shows the source line and path; a user needs the message only.
    print(f"gridshift: warning: {message}", file=file or sys.stderr)


def main() -> None:
    import warnings

    warnings.showwarning = _one_line_warning
    if COMPLETE_VAR in os.environ:  # a shell asking for completions: teach click the shells typer knows
        from typer.completion import completion_init

        completion_init()
    rc = run_guarded(app)
    if FINISHED_CLEANLY:
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # the terminal is gone (closed, SIGHUP): the exit code still says how the run ended
                pass
        os._exit(rc)
    sys.exit(rc)
