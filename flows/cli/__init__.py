"""The ``gridshift`` command line. Thin commands; one exit-code table.

Exit codes: 0 ok · 1 the job failed, or a bug · 2 bad input (policy, arguments, trace) ·
3 environment (no GPU, no permission, provider unreachable and no fallback).
"""

from __future__ import annotations

import sys

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


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """gridshift: make GPU training cleaner without making it late."""


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


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    # Python's default shows the source line and path; a user needs the message only.
    print(f"gridshift: warning: {message}", file=file or sys.stderr)


def main() -> None:
    import warnings

    warnings.showwarning = _one_line_warning
    rc = run_guarded(app)
    if FINISHED_CLEANLY:
        import logging
        import os

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # the terminal is gone (closed, SIGHUP): the exit code still says how the run ended
                pass
        os._exit(rc)
    sys.exit(rc)
