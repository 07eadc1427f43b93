"""Plan the coming runs of a recurring job: pure, time and forecast are arguments.

Used by ``gridshift serve`` (through :class:`scheduler.service.PlanningService`) and by the
nightly Prefect flow that defers its own start. Each nominal (cron) time whose window is still open
gets a start from :func:`scheduler.decide.decide` (start-time shifting within
``[max(now, nominal + earliest), nominal + deadline - work]``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from carbon.series import IntensitySeries
from scheduler.decide import Decision, decide
from scheduler.policy import Policy
from scheduler.service import PlannedRun, nominal_runs

__all__ = ["plan_start", "plan_runs", "run_key"]


def run_key(policy: Policy, nominal: datetime) -> str:
    """Stable id of one occurrence of the job (job store id and Prefect idempotency key)."""
    return f"{policy.job.name}@{nominal:%Y%m%dT%H%MZ}"


def plan_start(policy: Policy, series: IntensitySeries, *, nominal: datetime, now: datetime) -> Decision:
    """When (and in which mode) the occurrence nominally at ``nominal`` should start, seen at ``now``."""
    job = policy.job
    earliest = max(now, nominal + timedelta(seconds=job.earliest_start_s))
    if job.deadline_s is None:
        return decide(policy, series, now=max(now, nominal), start_at=max(now, nominal))
    deadline = nominal + timedelta(seconds=job.deadline_s)
    reference = min(max(now, nominal), deadline - timedelta(seconds=job.expected_duration_s))
    return decide(policy, series, now=max(reference, earliest), earliest=earliest, deadline=deadline,
                  remaining_work_s=job.expected_duration_s)


def plan_runs(policy: Policy, series: IntensitySeries, *, now: datetime, horizon: timedelta = timedelta(days=1),
              extra: dict[str, Any] | None = None) -> list[PlannedRun]:
    """The runs of ``policy``'s recurring job whose window is open within ``horizon`` of ``now``."""
    job = policy.job
    if job.cron is None:
        return []
    out: list[PlannedRun] = []
    for nominal in nominal_runs(job.cron, now, earliest_start_s=job.earliest_start_s,
                                deadline_s=job.deadline_s or job.expected_duration_s, horizon=horizon):
        d = plan_start(policy, series, nominal=nominal, now=now)
        out.append(PlannedRun(key=run_key(policy, nominal), run_at=d.start_at,
                              kwargs={**(extra or {}), "nominal_start": nominal.isoformat(),
                                      "planned_start": d.start_at.isoformat()},
                              reason=d.reason))
    return out
