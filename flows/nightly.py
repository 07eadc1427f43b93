"""The nightly retraining flow that a Prefect deployment runs: plan, defer through Prefect, train.

The deployment's cron fires at the earliest allowed start of each occurrence (see
:func:`flows.deploy.planning_cron`). That *planning run* reads the forecast, picks the start with
:func:`scheduler.planning.plan_start`, and, when the start is later than now, creates a new flow run
of the same deployment **scheduled at the chosen time** (``run_deployment(..., scheduled_time=...)``)
and ends. Prefect's scheduler and the worker start it then; no worker slot or process sits idle for
hours in between, the deferral is visible in the UI as a Scheduled run, and it survives worker
restarts. The deferred run (``planned_start`` set) trains at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from prefect import flow, get_run_logger

__all__ = ["nightly_retrain"]

#: a start less than this far away is not worth a new flow run: train in this one
_DEFER_MIN_S = 120.0


def _scheduled_time(now: datetime) -> datetime:
    from prefect.runtime import flow_run

    scheduled = flow_run.scheduled_start_time
    if scheduled is None:
        return now
    return datetime.fromisoformat(str(scheduled.isoformat())).astimezone(timezone.utc)


def _deployment_name() -> str | None:
    from prefect.runtime import deployment, flow_run

    if deployment.name is None:
        return None
    return f"{flow_run.flow_name}/{deployment.name}"


@flow(name="gridshift-nightly", log_prints=True, validate_parameters=False)
def nightly_retrain(
    policy_path: str,
    planned_start: str | None = None,
    nominal_start: str | None = None,
    ledger_path: str | None = None,
    run_id: str | None = None,
    resume: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Plan this occurrence and defer it through Prefect, or (when it is time) train under the policy.

    ``run_id`` and ``resume`` come with the next window of a pausable job (see :mod:`flows.windows`).
    """
    from flows.sources import monitor_for
    from flows.training import carbon_aware_training
    from scheduler.planning import plan_start, run_key
    from scheduler.policy_io import load_policy

    logger = get_run_logger()
    policy = load_policy(policy_path)
    now = datetime.now(timezone.utc)
    if planned_start is None:
        fired = _scheduled_time(now)
        nominal = fired - timedelta(seconds=min(policy.job.earliest_start_s, 0.0))
        monitor = monitor_for(policy)
        try:
            reading = monitor.read(now)
        finally:
            monitor.close()
        decision = plan_start(policy, reading.series, nominal=nominal, now=now)
        logger.info("plan for %s: start %s UTC — %s", nominal.isoformat(), f"{decision.start_at:%Y-%m-%d %H:%M}",
                    decision.reason)
        name = _deployment_name()
        if name is not None and (decision.start_at - now).total_seconds() > _DEFER_MIN_S:
            from prefect.deployments import run_deployment

            run = run_deployment(
                name=name,
                parameters={"policy_path": policy_path, "planned_start": decision.start_at.isoformat(),
                            "nominal_start": nominal.isoformat(), "ledger_path": ledger_path},
                scheduled_time=decision.start_at, timeout=0, as_subflow=False,
                idempotency_key=run_key(policy, nominal), tags=["gridshift", "deferred"],
            )
            logger.info("deferred: flow run %s is scheduled for %s UTC", run.id, f"{decision.start_at:%H:%M}")
            return {"deferred_to": decision.start_at.isoformat(), "flow_run_id": str(run.id),
                    "nominal_start": nominal.isoformat(), "reason": decision.reason}
        nominal_start = nominal.isoformat()
        planned_start = decision.start_at.isoformat()  # soon, or no deployment to defer through: wait here
    return carbon_aware_training(policy_path=policy_path, nominal_start=nominal_start, planned_start=planned_start,
                                 ledger_path=ledger_path, run_id=run_id, resume=resume)
