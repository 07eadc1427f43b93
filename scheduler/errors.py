"""Errors raised by the scheduler room.

    SchedulerError
    ├── PolicyError       a policy file is unreadable or invalid; str() is "file:line:col: path: message"
    └── LedgerError       the run ledger cannot be opened or written
"""

from __future__ import annotations

__all__ = ["SchedulerError", "PolicyError", "LedgerError"]


class SchedulerError(Exception):
    """Base class."""


class PolicyError(SchedulerError):
    """An invalid policy file. ``str(err)`` is one line: ``file:line:col: path: message``."""

    def __init__(self, message: str, *, path: str = "", line: int = 0, column: int = 0, more: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.column = column
        self.more = more


class LedgerError(SchedulerError):
    """The ledger database could not be used."""
