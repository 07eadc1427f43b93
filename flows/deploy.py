"""Create the nightly retraining deployment for a policy, and trigger deployments by name.

``deploy_policy`` registers :func:`flows.nightly.nightly_retrain` from this source tree on a
*process* work pool (created when missing) with a cron that fires at each occurrence's earliest
allowed start, so the planning run can choose any start in the window and defer through Prefect's
own scheduling (see :mod:`flows.nightly`). Needs a Prefect server (``PREFECT_API_URL``): schedules do
not run on the ephemeral one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

__all__ = ["DeployedPolicy", "deploy_policy", "planning_cron", "trigger_deployment", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parent.parent
FLOW_ENTRYPOINT = "flows/nightly.py:nightly_retrain"


@dataclass(frozen=True)
class DeployedPolicy:
    deployment_id: UUID
    name: str  # "flow/deployment", what run_deployment takes
    cron: str
    work_pool: str


def planning_cron(cron: str, earliest_start_s: float) -> str:
    """The cron that fires ``earliest_start_s`` (<= 0) before each occurrence of ``cron``.

    Handles the common daily form ``M H * * *`` (and ``M H`` with any day fields when the shift stays
    on the same day); anything else is returned unchanged (the planning run then starts at the
    nominal time and can only shift later).
    """
    fields = cron.split()
    if len(fields) != 5 or earliest_start_s >= 0 or not (fields[0].isdigit() and fields[1].isdigit()):
        return cron
    minute = int(fields[1]) * 60 + int(fields[0]) + int(earliest_start_s // 60)
    if minute < 0 and fields[2:] != ["*", "*", "*"]:
        return cron
    minute %= 24 * 60
    return " ".join([str(minute % 60), str(minute // 60), *fields[2:]])


def _ensure_process_pool(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
        except ObjectNotFound:
            try:
                client.create_work_pool(WorkPoolCreate(name=name, type="process"))
            except ObjectAlreadyExists:
                pass


def deploy_policy(policy_path: str | Path, *, work_pool: str = "gridshift", name: str | None = None,
                  source_dir: str | Path = REPO_ROOT, schedule: bool = True) -> DeployedPolicy:
    """Create (or update) the nightly deployment of ``policy_path``; returns its id and name.

    ``schedule=False`` leaves the cron off, for when ``gridshift serve`` triggers the runs instead.
    """
    from flows.nightly import nightly_retrain
    from scheduler.errors import PolicyError
    from scheduler.policy_io import load_policy

    policy = load_policy(policy_path)
    if policy.job.cron is None:
        raise PolicyError(f"{policy_path}: job.cron: a deployment needs a recurring job (e.g. '0 1 * * *')")
    source = Path(source_dir).resolve()
    path = Path(policy_path).resolve()
    param_path = str(path.relative_to(source)) if path.is_relative_to(source) else str(path)
    cron = planning_cron(policy.job.cron, policy.job.earliest_start_s)
    dep_name = name or policy.job.name
    _ensure_process_pool(work_pool)
    flow = nightly_retrain.from_source(source=str(source), entrypoint=FLOW_ENTRYPOINT)
    dep_id = flow.deploy(
        name=dep_name, work_pool_name=work_pool, cron=cron if schedule else None, parameters={"policy_path": param_path},
        build=False, push=False, print_next_steps=False, concurrency_limit=1, tags=["gridshift", "nightly"],
        description=f"gridshift nightly retraining of {policy.job.name}: planning run at the earliest start "
                    f"({cron} UTC), deferred start scheduled through Prefect",
        ignore_warnings=True,
    )
    return DeployedPolicy(deployment_id=dep_id, name=f"{nightly_retrain.name}/{dep_name}", cron=cron if schedule else "",
                          work_pool=work_pool)


def trigger_deployment(*, key: str, deployment: str, planned_start: str | None = None,
                       nominal_start: str | None = None, policy_path: str | None = None, **_: Any) -> str:
    """Create a flow run of ``deployment`` now (the `gridshift serve` trigger); ``key`` dedups it."""
    from prefect.deployments import run_deployment

    params: dict[str, Any] = {}
    if policy_path:
        params["policy_path"] = policy_path
    if planned_start:
        params["planned_start"] = planned_start
    if nominal_start:
        params["nominal_start"] = nominal_start
    run = run_deployment(name=deployment, parameters=params, timeout=0, as_subflow=False, idempotency_key=key,
                         scheduled_time=datetime.fromisoformat(planned_start) if planned_start else None)
    return str(run.id)
