"""Side-by-side baselines (section 12): the oracle and the default configuration, per recurrence.

Both use the *expected* epochs of a size (mean ``target_epoch`` over the runs that reached within
``max_epochs``), which only a baseline may read: policies never see it.
"""

from __future__ import annotations

import math

from plans.zeus_trace.job_table import TraceJob

__all__ = ["expected_epochs", "expected_cost", "oracle", "default_cost"]


def expected_epochs(trace: TraceJob, b: int) -> float | None:
    """Mean epochs to target over the runs at ``b`` that reached within max_epochs (None: not eligible)."""
    ok = [t for t in trace.target_epochs.get(b, ()) if t is not None and t <= trace.job.max_epochs]
    return sum(ok) / len(ok) if ok else None


def expected_cost(trace: TraceJob, b: int, p: int, *, eta: float) -> float:
    ep = expected_epochs(trace, b)
    if ep is None:
        return math.inf
    return ep * (eta * trace.energy_per_epoch_j(b, p) + (1.0 - eta) * trace.max_power_w * trace.time_per_epoch_s[b][p])


def oracle(trace: TraceJob, *, eta: float) -> tuple[float, int, int]:
    """(cost per recurrence, b, p) of the cheapest eligible configuration."""
    best = (math.inf, -1, -1)
    for b in trace.batch_sizes:
        if b not in trace.target_epochs:
            continue
        for p in trace.power_limits_w[b]:
            c = expected_cost(trace, b, p, eta=eta)
            if c < best[0]:
                best = (c, b, p)
    return best


def default_cost(trace: TraceJob, *, eta: float) -> float:
    """Expected cost per recurrence at (b0, highest limit of b0)."""
    b0 = trace.default_b
    return expected_cost(trace, b0, max(trace.power_limits_w[b0]), eta=eta)
