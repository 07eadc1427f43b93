"""A pausable job's windows across flow runs: the state carried from one window to the next.

Under a deployment, a planned pause of a checkpointable job ends the flow run, and the next window
is a flow run of the same deployment scheduled at the window's start (as a deferred start is): no
worker waits through the pause, the window is visible and movable in Prefect's UI, and it survives
worker restarts. That flow run gets the same ``run_id`` and a ``resume`` parameter made by
:func:`resume_state`: the windows, mode spans and work done so far, so the final report covers
every window, and the ledger row of the run (keyed by ``run_id``) is replaced by it.

The job's checkpoint lives in :func:`checkpoint_dir` (``GRIDSHIFT_CHECKPOINT_DIR``), stable across
windows of one run.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from flows.supervise import SupervisedRun
from plans.integrations.protocol import CHECKPOINT_DIR_ENV
from scheduler.store.ledger import gridshift_home
from scheduler.loop.loop import DEFER_PAUSES_OVER_S
from scheduler.report import ModeSpan, RunWindow

__all__ = ["CHECKPOINT_DIR_ENV", "DEFER_MIN_S", "RESUME_STATE_VERSION", "checkpoint_dir", "defer_next_window",
           "flow_run_deployment", "next_window_parameters", "resume_state", "resumed_run"]

#: a wait shorter than this is not worth a new flow run: the run waits for it itself
DEFER_MIN_S = DEFER_PAUSES_OVER_S  # the loop's own threshold, so the simulator defers the same pauses
RESUME_STATE_VERSION = 1


def checkpoint_dir(run_id: str) -> Path:
    """``$GRIDSHIFT_HOME/checkpoints/<run id>``: kept after the run, since it may hold the model."""
    return gridshift_home() / "checkpoints" / run_id


def resume_state(run: SupervisedRun) -> dict[str, Any]:
    """What the next window's flow run needs to carry on and report the whole run (JSON)."""
    return {
        "version": RESUME_STATE_VERSION,
        "work_done_s": run.work_done_s,
        "windows": [w.to_json() for w in run.windows],
        "spans": [s.to_json() for s in run.spans],
        "warnings": list(run.warnings),
        "sources": list(run.sources),
        "reason": run.reason,
        "extra": {k: v for k, v in run.extra.items() if k in ("plan", "mode_figures", "clock_plan", "power_limit_auto")},
    }


def resumed_run(state: dict[str, Any] | None) -> SupervisedRun:
    """A :class:`SupervisedRun` that goes on from ``state`` (a fresh one for None)."""
    if not state:
        return SupervisedRun()
    version = state.get("version")
    if version != RESUME_STATE_VERSION:
        raise ValueError(f"resume state version {version!r} is not {RESUME_STATE_VERSION}: "
                         "it was written by another gridshift version")
    return SupervisedRun(
        spans=[ModeSpan.from_json(s) for s in state.get("spans", [])],
        windows=[RunWindow.from_json(w) for w in state.get("windows", [])],
        warnings=list(state.get("warnings", [])),
        sources=list(state.get("sources", [])),
        extra=dict(state.get("extra", {})),
        reason=str(state.get("reason", "")),
        work_done_s=float(state.get("work_done_s", 0.0)),
    )


def flow_run_deployment() -> str | None:
    """The id of the deployment this flow run belongs to, or None (a plain ``gridshift run``)."""
    from prefect.context import FlowRunContext

    # the engine's own copy of the flow run: ``prefect.runtime.deployment.id`` reads the flow run
    # from the API again (one round trip, and Prefect's loop thread started, on every run)
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None or ctx.flow_run.deployment_id is None:
        return None
    return str(ctx.flow_run.deployment_id)


def next_window_parameters(current: dict[str, Any], accepted: set[str], run: SupervisedRun, *, run_id: str,
                           nominal: datetime) -> dict[str, Any]:
    """Parameters of the next window's flow run: this run's ``current`` ones with ``run_id``,
    ``nominal_start``, ``planned_start`` and ``resume`` set (and ``plan: false`` where the flow plans
    on ``plan: true``), limited to ``accepted`` (the deployment's flow's parameters; all when empty)."""
    assert run.next_window is not None
    params = {k: v for k, v in current.items() if v is not None}
    params.update(run_id=run_id, nominal_start=nominal.isoformat(), planned_start=run.next_window.isoformat(),
                  resume=resume_state(run))
    if "plan" in accepted:
        params["plan"] = False  # the next window trains; it does not plan an occurrence again
    return {k: v for k, v in params.items() if k in accepted} if accepted else params


def defer_next_window(run: SupervisedRun, *, run_id: str, nominal: datetime) -> dict[str, Any]:
    """Create the flow run of the next window: the same deployment, scheduled at ``run.next_window``,
    with :func:`next_window_parameters`. Idempotent per window: a retried flow run adds no second one."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.runtime import flow_run

    assert run.next_window is not None
    deployment_id = flow_run_deployment()
    if deployment_id is None:
        raise RuntimeError("not in a deployment's flow run: there is nothing to schedule the next window through")
    with get_client(sync_client=True) as client:
        schema = client.read_deployment(UUID(deployment_id)).parameter_openapi_schema or {}
    params = next_window_parameters(dict(flow_run.parameters or {}), set(schema.get("properties", {})), run,
                                    run_id=run_id, nominal=nominal)
    window = len(run.windows) + 1
    created = run_deployment(name=UUID(deployment_id), parameters=params, scheduled_time=run.next_window, timeout=0,
                             as_subflow=False, idempotency_key=f"{run_id}#window{window}",
                             tags=["gridshift", "window"])
    return {"at": run.next_window.isoformat(), "flow_run_id": str(created.id), "window": window}
