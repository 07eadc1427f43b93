"""The one place where errors become exit codes and one-line messages."""

from __future__ import annotations

import sys
from typing import Any

import typer

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_INPUT", "EXIT_ENV", "exit_code_for", "exit_code_for_type", "fail", "run_guarded"]

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_ENV = 0, 1, 2, 3


def exit_code_for(exc: BaseException) -> int:
    """The exit code for an error: 2 bad input, 3 environment, 1 anything else (job failure or bug)."""
    return exit_code_for_type(type(exc))


def exit_code_for_type(cls: type[BaseException]) -> int:
    """:func:`exit_code_for` by class (a run's report records its error's class, not the error)."""
    from backends.errors import BackendError, UnknownBackend
    from carbon.errors import BadTrace, CarbonError
    from carbon.providers.registry import UnknownProvider
    from plans.dvfs.errors import PlanFileError, PlanInputError, ProfileError
    from plans.errors import BadProfile, BadTraceFile
    from scheduler.errors import LedgerError, PolicyError

    # listed one by one: a bare LookupError/ValueError would turn internal KeyError/IndexError bugs
    # into "bad input"
    bad_input = (PolicyError, BadTrace, UnknownBackend, UnknownProvider, PlanFileError, PlanInputError, ProfileError,
                 BadTraceFile, BadProfile)
    if issubclass(cls, bad_input):
        return EXIT_INPUT
    # every backend error (no device, no permission, device lost, unsupported, journal) and every
    # carbon source failure is the environment
    if issubclass(cls, (CarbonError, BackendError, LedgerError)):
        return EXIT_ENV
    return EXIT_FAILED


def fail(exc: BaseException | str, code: int | None = None) -> "typer.Exit":
    """Print one line to stderr and return the Exit to raise."""
    text = str(exc)
    print(f"gridshift: error: {text}" if not text.startswith("gridshift") else text, file=sys.stderr)
    return typer.Exit(code if code is not None else exit_code_for(exc) if isinstance(exc, BaseException) else EXIT_FAILED)


def run_guarded(app: Any) -> int:
    """Run the typer app; anything unexpected is one line and exit 1, never a traceback."""
    try:
        rc = app(standalone_mode=False)  # click returns (not raises) Exit codes in this mode
        return rc if isinstance(rc, int) else EXIT_OK
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("gridshift: interrupted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # usage errors from typer's own (vendored) click
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `gridshift`: help was printed
            return EXIT_OK
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print(f"gridshift: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except Exception as exc:  # a bug: say so in one line; GRIDSHIFT_DEBUG=1 shows the traceback
        import os

        if os.environ.get("GRIDSHIFT_DEBUG"):
            raise
        code = exit_code_for(exc)
        prefix = "gridshift: internal error" if code == EXIT_FAILED else "gridshift: error"
        print(f"{prefix}: {type(exc).__name__}: {exc}" if code == EXIT_FAILED else f"{prefix}: {exc}", file=sys.stderr)
        return code
