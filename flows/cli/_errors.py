"""The one place where errors become exit codes and one-line messages.

With ``--json`` on the command line, every failure also prints exactly one JSON object on stdout
(``{"status": "error", "exit_code": N, "error": "...", "errors": [...]}``; policy errors add
``issues`` with file, line, column, path and message), so a script reading stdout always gets JSON.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import Any, Sequence

import typer

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_INPUT", "EXIT_ENV", "echo", "exit_code_for", "exit_code_for_type", "fail",
           "report_error", "run_guarded"]

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_ENV = 0, 1, 2, 3

# set by run_guarded from the command line, so failures raised before a command has parsed its
# options (usage errors) answer in JSON too
_json_errors = False


def _wants_json(argv: Sequence[str]) -> bool:
    ours = list(argv[: list(argv).index("--")]) if "--" in argv else list(argv)  # after '--' is the job's
    return "--json" in ours


def echo(text: str, *, err: bool = False) -> None:
    """``typer.echo``, except that a terminal that is gone (EIO: it was closed, the run got SIGHUP) or
    a reader that left (EPIPE) costs the output, never the exit code or what is still to be done:
    that stream goes to /dev/null from then on, so later writes and the final flush succeed."""
    stream = sys.stderr if err else sys.stdout
    try:
        typer.echo(text, file=stream)
        stream.flush()
    except OSError as exc:
        if exc.errno not in (errno.EIO, errno.EPIPE):
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


def report_error(exc: BaseException | str, code: int) -> None:
    """Print an error: one line per error on stderr, and with ``--json`` one JSON object on stdout."""
    from scheduler.errors import PolicyError

    lines = exc.lines() if isinstance(exc, PolicyError) else [str(exc)]
    for text in lines:
        echo(text if text.startswith("gridshift") else f"gridshift: error: {text}", err=True)
    if _json_errors:
        out: dict[str, Any] = {"status": "error", "exit_code": code, "error": str(exc), "errors": lines}
        if isinstance(exc, PolicyError) and exc.issues:
            out["issues"] = [i.to_json() for i in exc.issues]
        if isinstance(exc, BaseException):
            out["error_type"] = type(exc).__name__
        echo(json.dumps(out, sort_keys=True))


def exit_code_for(exc: BaseException) -> int:
    """The exit code for an error: 2 bad input, 3 environment, 1 anything else (job failure or bug)."""
    return exit_code_for_type(type(exc))


def exit_code_for_type(cls: type[BaseException]) -> int:
    """:func:`exit_code_for` by class (a run's report records its error's class, not the error)."""
    from backends.errors import BackendError, UnknownBackend
    from carbon.errors import BadTrace, CarbonError, UnknownZone
    from carbon.providers.registry import UnknownProvider
    from flows.run.preflight import BadRunInput, EnvironmentNotReady
    from plans.dvfs.errors import PlanFileError, PlanInputError, ProfileError
    from plans.errors import BadProfile, BadTraceFile
    from scheduler.errors import LedgerError, PolicyError

    # listed one by one: a bare LookupError/ValueError would turn internal KeyError/IndexError bugs
    # into "bad input"
    bad_input = (PolicyError, BadTrace, UnknownBackend, UnknownProvider, UnknownZone, PlanFileError, PlanInputError,
                 ProfileError, BadTraceFile, BadProfile, BadRunInput)
    if issubclass(cls, bad_input):
        return EXIT_INPUT
    # every backend error (no device, no permission, device lost, unsupported, journal) and every
    # carbon source failure is the environment; so is a server (Prefect's) that does not answer
    # an httpx error exists only once httpx is imported: importing it to compare costs a pre-flight
    # refusal a fifth of its time
    httpx = sys.modules.get("httpx")
    transport = (httpx.TransportError,) if httpx is not None else ()
    if issubclass(cls, (CarbonError, BackendError, LedgerError, EnvironmentNotReady, *transport)):
        return EXIT_ENV
    return EXIT_FAILED


def fail(exc: BaseException | str, code: int | None = None) -> "typer.Exit":
    """Print the error (see :func:`report_error`) and return the Exit to raise."""
    rc = code if code is not None else exit_code_for(exc) if isinstance(exc, BaseException) else EXIT_FAILED
    report_error(exc, rc)
    return typer.Exit(rc)


def run_guarded(app: Any, argv: Sequence[str] | None = None) -> int:
    """Run the typer app on ``argv`` (default: the process's arguments); anything unexpected is one
    line and exit 1, never a traceback."""
    global _json_errors
    args = list(sys.argv[1:] if argv is None else argv)
    _json_errors = _wants_json(args)
    try:
        rc = app(args=args, standalone_mode=False)  # click returns (not raises) Exit codes in this mode
        return rc if isinstance(rc, int) else EXIT_OK
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        report_error("gridshift: interrupted", 130)
        return 130
    except _click_error() as exc:  # usage errors from typer's click
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `gridshift`: help was printed
            return EXIT_OK
        if _json_errors:
            report_error(f"usage: {exc.format_message()}", EXIT_INPUT)
        else:
            exc.show()
        return EXIT_INPUT
    except Exception as exc:  # a bug: say so in one line; GRIDSHIFT_DEBUG=1 shows the traceback
        if os.environ.get("GRIDSHIFT_DEBUG"):
            raise
        code = exit_code_for(exc)
        report_error(f"gridshift: internal error: {type(exc).__name__}: {exc}" if code == EXIT_FAILED else exc, code)
        return code
    finally:
        _json_errors = False


def _click_error() -> type[Exception]:
    # typer vendors click and does not re-export the base of its usage errors: reach it through one
    # that it does export (BadParameter -> UsageError -> ClickException)
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
