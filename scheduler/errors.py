"""Errors raised by the scheduler room.

    SchedulerError
    ├── PolicyError       a policy file is unreadable or invalid; str() is "file:line:col: path: message"
    └── LedgerError       the run ledger cannot be opened or written
"""

from __future__ import annotations

from typing import Any

__all__ = ["SchedulerError", "PolicyError", "LedgerError"]


class SchedulerError(Exception):
    """Base class."""


class PolicyError(SchedulerError):
    """An invalid policy file. ``str(err)`` is one line: ``file:line:col: path: message``, the first
    error, with ``[and N more error(s)]`` when there are more. ``issues`` holds every error listed
    (each a ``scheduler.policy.loader.PolicyIssue``; ``hidden`` counts those past the listing limit);
    :meth:`lines` gives one line per error, for ``policy check`` and ``run``."""

    def __init__(self, message: str, *, path: str = "", line: int | None = 0, column: int | None = 0, more: int = 0,
                 issues: tuple[Any, ...] = (), hidden: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.column = column
        self.more = more
        self.issues = issues
        self.hidden = hidden

    def lines(self) -> list[str]:
        """One line per error (the message itself when no issues were attached)."""
        out = [str(i) for i in self.issues] or [str(self)]
        if self.hidden:
            out.append(f"{self.path}: ... and {self.hidden} more error(s) not shown")
        return out


class LedgerError(SchedulerError):
    """The ledger database could not be used."""
