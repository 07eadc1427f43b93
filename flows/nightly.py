"""The nightly retraining flow that a Prefect deployment runs: train now, or plan and defer through Prefect.

Two kinds of run, told apart by the ``plan`` parameter:

* **a training run** (``plan=False``, the default): what ``prefect deployment run``, the UI's "Run"
  button and every deferred run are. It trains at once: Prefect started it, so its own scheduled
  time has come (a deferred run moved earlier in the UI simply trains earlier, and decides its modes
  for the moment it really starts). Nothing in it sleeps for its start, so it never holds a worker
  or a concurrency slot while waiting for it (a site run whose GPUs an overrunning run still holds
  waits for them in Prefect's limit: :mod:`flows.fleet.gpus`).
* **a planning run** (``plan=True``): what the deployment's cron creates (its schedule carries
  ``parameters: {plan: true}``, see :func:`flows.deployments.deploy.deploy_policy`). It reads the forecast,
  picks the start with :func:`scheduler.planner.inputs.plan_start` and, when the start is later than now,
  creates a flow run of the same deployment **scheduled at the chosen time**
  (``run_deployment(..., scheduled_time=...)``) and ends. The deferral is a Scheduled flow run in
  Prefect until its time: visible and movable in the UI, it survives worker restarts, and no worker
  slot or process sits idle for hours. Outside a deployment (a plain call) there is nothing to defer
  through, so the planning run waits for the start itself.

The training flow runs *inside* this flow run (its body, not a subflow), so its logs, tasks and
report artifact are in the run the user triggered.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
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


def _enter_workdir(workdir: str | None) -> None:
    """Run from the directory the deployment was made from (relative paths in the policy mean that)."""
    if not workdir:
        return
    from scheduler.errors import PolicyError

    if not Path(workdir).is_dir():
        raise PolicyError(f"{workdir}: the deployment's working directory does not exist on this node "
                          f"({os.uname().nodename}); deploy from a path every worker node has")
    os.chdir(workdir)


@flow(name="gridshift-nightly", log_prints=True, validate_parameters=False)
def nightly_retrain(
    policy_path: str,
    plan: bool = False,
    nominal_start: str | None = None,
    ledger_path: str | None = None,
    workdir: str | None = None,
    planned_start: str | None = None,
    site: str | None = None,
    run_id: str | None = None,
    resume: dict[str, Any] | None = None,
    placement: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train now under the policy, or (``plan=True``) plan this occurrence and defer it through Prefect.

    ``nominal_start`` (ISO-8601) is the occurrence's nominal time; a training run without one counts
    its deadline from now. ``planned_start`` is informational (what the planner chose): a training
    run never waits for it, since Prefect starts the run at its scheduled time. ``site`` (one of the
    policy's sites; set by the per-site deployments): the run holds ``job.gpus`` of that node's GPU
    slots while it trains and pins those GPUs; when an overrunning run still holds them it waits for
    them in Prefect's global concurrency limit (the same flow run, see :mod:`flows.fleet.gpus`), in line
    (:mod:`flows.fleet.gpu_line`); a run queued behind busy GPUs starts at once and waits there, so it takes
    a GPU the moment one frees.
    ``run_id`` and ``resume`` come with the next window of a pausable job (see :mod:`flows.job.windows`).
    ``placement`` (informational) is where and when the planner put the run, and why; it goes into the
    report. A policy with sites started without one is placed first: a planning run picks site and
    start, a run by hand the best site to start at once.
    """
    from flows.training import carbon_aware_training

    _enter_workdir(workdir)
    if site is None and _has_sites(policy_path) and _deployment_name() is not None:
        return _place(policy_path, start_now=not plan, ledger_path=ledger_path, workdir=workdir)
    if plan:
        deferred = _plan_and_defer(policy_path, ledger_path=ledger_path, workdir=workdir)
        if "deferred_to" in deferred:
            return deferred
        nominal_start, planned_start = deferred["nominal_start"], deferred["planned_start"]
        # soon, or no deployment to defer through: this run waits for the start itself
        return carbon_aware_training.fn(policy_path=policy_path, nominal_start=nominal_start,
                                        planned_start=planned_start, ledger_path=ledger_path)
    if planned_start:
        get_run_logger().info("planned start was %s UTC; training now", planned_start[:16].replace("T", " "))
    if site is None:
        return carbon_aware_training.fn(policy_path=policy_path, nominal_start=nominal_start, ledger_path=ledger_path,
                                        start_now=True, run_id=run_id, resume=resume)
    return _train_on_site(policy_path, site, nominal_start=nominal_start, ledger_path=ledger_path,
                          placement=placement, run_id=run_id, resume=resume)


def _has_sites(policy_path: str) -> bool:
    from scheduler.policy.loader import load_policy

    return bool(load_policy(policy_path).sites)


def _place(policy_path: str, *, start_now: bool, ledger_path: str | None, workdir: str | None) -> dict[str, Any]:
    """Choose site and start (and modes) together, and create the run on that site's deployment."""
    from flows.fleet.placing import submit_placed_run
    from scheduler.planner.inputs import occurrence_for, run_key
    from scheduler.policy.loader import load_policy

    logger = get_run_logger()
    name = _deployment_name()
    assert name is not None
    now = datetime.now(timezone.utc)
    policy = load_policy(policy_path)
    nominal = now if start_now else occurrence_for(policy.job, _scheduled_time(now))
    submitted = submit_placed_run(policy_path, deployment=name, nominal=nominal, start_now=start_now,
                                  key=None if start_now else run_key(policy, nominal), ledger_path=ledger_path,
                                  workdir=workdir, now=now)
    for reason in submitted.placement.reasons:
        logger.info("placement: %s", reason)
    plan = submitted.placement.plan
    logger.info("placed: flow run %s on %s at %s UTC", submitted.flow_run_id, submitted.deployment,
                f"{plan.start:%Y-%m-%d %H:%M}")
    return {"placed_on": submitted.placement.site, "deferred_to": plan.start.isoformat(),
            "flow_run_id": submitted.flow_run_id, "nominal_start": nominal.isoformat(),
            "reasons": list(submitted.placement.reasons)}


#: how long a run waits in Prefect for GPU slots an overrunning run still holds before it fails: a
#: placed run's slots are booked, so a wait this long means the node is stuck, not merely late
GPU_WAIT_S = 3600.0


def _train_on_site(policy_path: str, site: str, *, nominal_start: str | None, ledger_path: str | None,
                   placement: dict[str, Any] | None, run_id: str | None,
                   resume: dict[str, Any] | None) -> dict[str, Any]:
    from flows.fleet.gpus import hold_gpus, pin_environment
    from flows.fleet.orphans import stop_when_orphaned
    from flows.training import carbon_aware_training
    from scheduler.store.ledger import gridshift_home
    from scheduler.policy.loader import load_policy
    from scheduler.policy.sites import site_named

    from prefect.runtime import flow_run

    policy = load_policy(policy_path)
    node = site_named(policy, site)
    me = flow_run.get_id()
    with stop_when_orphaned(get_run_logger().warning), \
            hold_gpus(site, policy.job.gpus, node.gpus_per_node, lock_dir=gridshift_home() / "gpu-locks",
                      wait_s=_gpu_wait_s(placement), flow_run_id=me, announce=get_run_logger().info) as held:
        get_run_logger().info("holding GPU(s) %s of %s (%s)", ",".join(map(str, held.devices)), site, held.limit)
        if placement and placement.get("queued") and me is not None:
            placement = _booked_from(me, placement, held.acquired_at)
        with pin_environment(held.devices):
            return carbon_aware_training.fn(policy_path=policy_path, nominal_start=nominal_start,
                                            ledger_path=ledger_path, start_now=True, site=site,
                                            report_extra={**held.as_report(),
                                                          **({"placement": placement} if placement else {})},
                                            run_id=run_id, resume=resume)


def _gpu_wait_s(placement: dict[str, Any] | None) -> float:
    """How long the run may stand in line: GPU_WAIT_S past its booked start (a queued run starts waiting at once)."""
    if not placement or not placement.get("start"):
        return GPU_WAIT_S
    booked = datetime.fromisoformat(placement["start"])
    return GPU_WAIT_S + max((booked - datetime.now(timezone.utc)).total_seconds(), 0.0)


def _booked_from(flow_run_id: str, placement: dict[str, Any], acquired: datetime) -> dict[str, Any]:
    """A queued run that has its GPUs books them from now on: written into its ``placement`` for the placers."""
    from uuid import UUID

    from prefect.client.orchestration import get_client

    updated = {**placement, "gpus_acquired_at": acquired.isoformat()}
    try:
        with get_client(sync_client=True) as client:  # only this run writes its own parameters while it runs
            run = client.read_flow_run(UUID(flow_run_id))
            client.update_flow_run(run.id, parameters={**(run.parameters or {}), "placement": updated})
    except Exception as exc:  # the placers then book it from its planned start (or now), not from when it began
        get_run_logger().warning("could not record when this run took its GPUs (%s: %s)", type(exc).__name__, exc)
    return updated


def _plan_and_defer(policy_path: str, *, ledger_path: str | None, workdir: str | None) -> dict[str, Any]:
    """Plan the occurrence this run fired for; defer it as a Scheduled flow run when the start is far."""
    from flows.sources import forecast_choice, monitor_for, price_reader_for, read_price_signal, signal_reading
    from scheduler.loop.loop import pick_signal
    from scheduler.planner.inputs import occurrence_for, plan_start, policy_figures, run_key
    from scheduler.policy.loader import load_policy
    from scheduler.run_spec import resolve_run

    logger = get_run_logger()
    policy = load_policy(policy_path)
    now = datetime.now(timezone.utc)
    nominal = occurrence_for(policy.job, _scheduled_time(now))
    monitor = monitor_for(policy)
    figures = policy_figures(policy)
    try:
        reading = monitor.read(now)
        choice = forecast_choice(monitor, resolve_run(policy), figures, reading, nominal=nominal, now=now)
    finally:
        monitor.close()
    signal = pick_signal(signal_reading(reading), choice, now)
    price, prices = None, price_reader_for(policy.price)
    if prices is not None:  # the published day-ahead prices: a priced objective plans its start on them
        try:
            price = read_price_signal(prices, now)[0]
        except Exception as exc:  # the plan then says it planned on carbon alone
            logger.warning("prices unavailable: %s", exc)
        finally:
            prices.close()
    decision = plan_start(policy, signal, nominal=nominal, now=now, figures=figures,
                          static=choice.reason if choice.static else None, price=price)
    logger.info("plan for %s: start %s UTC — %s", nominal.isoformat(), f"{decision.start_at:%Y-%m-%d %H:%M}",
                decision.reason)
    name = _deployment_name()
    out: dict[str, Any] = {"nominal_start": nominal.isoformat(), "planned_start": decision.start_at.isoformat(),
                           "reason": decision.reason}
    if choice.reason:  # the forecast this plan stood on (the do-no-harm gate's choice), in one sentence
        out["forecast"] = choice.reason
        logger.info("forecast: %s", choice.reason)
    if name is None or (decision.start_at - now).total_seconds() <= _DEFER_MIN_S:
        return out
    from prefect.deployments import run_deployment

    run = run_deployment(
        name=name,
        parameters={"policy_path": policy_path, "plan": False, "nominal_start": nominal.isoformat(),
                    "planned_start": decision.start_at.isoformat(), "ledger_path": ledger_path, "workdir": workdir},
        scheduled_time=decision.start_at, timeout=0, as_subflow=False,
        idempotency_key=run_key(policy, nominal), tags=["gridshift", "deferred"],
    )
    logger.info("deferred: flow run %s is scheduled for %s UTC", run.id, f"{decision.start_at:%H:%M}")
    return {**out, "deferred_to": decision.start_at.isoformat(), "flow_run_id": str(run.id)}
