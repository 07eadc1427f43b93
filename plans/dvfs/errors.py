"""Errors raised by DVFS planning (profiles, models, plans, plan files, the executor).

    DvfsError                 base of every error here
    ├── ProfileError          a kernel profile file is missing, unreadable, malformed or a newer version
    ├── PlanInputError        bad arguments to the model or the planner (shapes, NaN, negative budgets)
    ├── PlanFileError         a clock plan file is missing, malformed, a newer version, or not for this GPU
    └── ExecutorError         the runtime executor was misused (started twice, used after close)

``ProfileError``, ``PlanInputError`` and ``PlanFileError`` are bad input (the CLI exits 2).
"""

from __future__ import annotations

__all__ = ["DvfsError", "ProfileError", "PlanInputError", "PlanFileError", "ExecutorError"]


class DvfsError(Exception):
    """Base class of DVFS planning errors."""


class ProfileError(DvfsError, ValueError):
    """A kernel profile file cannot be used: missing, not JSON, failing validation, or too new."""


class PlanInputError(DvfsError, ValueError):
    """The model or planner was given inconsistent or non-finite input."""


class PlanFileError(DvfsError, ValueError):
    """A clock plan file cannot be used: missing, malformed, too new, or made for another GPU."""


class ExecutorError(DvfsError, RuntimeError):
    """The clock-plan executor was used out of order (e.g. after ``close``)."""
