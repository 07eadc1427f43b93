"""Errors raised by the planners.

    PlanError                 base: a planner was given input it cannot work with
    ├── BadTraceFile          a Zeus trace CSV is missing, malformed, or lacks the workload
    ├── BadProfile            a power-limit profile is empty, inconsistent or from another GPU
    ├── SimulationAborted     a trace simulation hit one of Zeus's fatal cases (section 14.11)
    └── BadJobFile            a training job's result file (or gridshift's mode file) is malformed
"""

from __future__ import annotations

__all__ = ["PlanError", "BadTraceFile", "BadProfile", "SimulationAborted", "BadJobFile"]


class PlanError(ValueError):
    """A planner was given input it cannot work with."""


class BadTraceFile(PlanError):
    """A trace file is missing, malformed, or does not hold the workload asked for."""


class BadProfile(PlanError):
    """A power-limit profile is empty, inconsistent, or recorded for different hardware."""


class SimulationAborted(PlanError):
    """The simulated job hit a fatal case: no convergence in recurrence 1, 20 failed tries, or no survivors."""


class BadJobFile(PlanError):
    """A file the job and gridshift share is malformed; ``str()`` is one line ``file: what is wrong``."""
