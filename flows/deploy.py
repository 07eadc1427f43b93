"""Create the nightly retraining deployment for a policy, and trigger deployments by name.

``deploy_policy`` registers :func:`flows.nightly.nightly_retrain` from this source tree on a
*process* work pool (created when missing) with a cron that fires at each occurrence's earliest
allowed start, so the planning run can choose any start in the window and defer through Prefect's
own scheduling (see :mod:`flows.nightly`). Needs a Prefect server (``PREFECT_API_URL``): schedules do
not run on the ephemeral one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from uuid import UUID

if TYPE_CHECKING:  # Prefect is imported when a deployment is made, not when the CLI starts
    from prefect.schedules import Schedule

    from scheduler.policy import Policy

__all__ = ["DeployedPolicy", "check_source", "deploy_policy", "planning_cron", "planning_schedule", "site_deployment_name",
           "trigger_deployment", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parent.parent
FLOW_ENTRYPOINT = "flows/nightly.py:nightly_retrain"


@dataclass(frozen=True)
class DeployedPolicy:
    deployment_id: UUID
    name: str  # "flow/deployment", what run_deployment takes
    cron: str
    work_pool: str
    sites: dict[str, str] = field(default_factory=dict)  # site name -> its "flow/deployment"
    timezone: str = "UTC"  # the IANA zone Prefect reads the cron in (job.timezone)


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


def _existing_deployment(full_name: str) -> str | None:
    """One line describing the deployment of that name on the server, or None when there is none."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            dep = client.read_deployment_by_name(full_name)
        except ObjectNotFound:
            return None
    made_by = "gridshift deploy" if "gridshift-deploy" in (dep.tags or []) else "prefect deploy (prefect.yaml) or another tool"
    params = dep.parameters or {}
    return (f"{full_name} (id {dep.id}, made by {made_by}, policy {params.get('policy_path', '?')}, "
            f"pool {dep.work_pool_name})")


def check_source(directory: str | None = None, policy_path: str | None = None) -> dict[str, str]:
    """The checkout the workers run flows from, resolved and checked when deploying (a Prefect build step).

    prefect.yaml calls this as a build step, so ``prefect deploy`` fails with one line when the
    directory is wrong, instead of every run failing later on the worker. ``directory`` defaults to
    ``$GRIDSHIFT_REPO``, else the directory ``prefect deploy`` runs in; it must hold
    ``flows/nightly.py`` (and ``policy_path``, relative to it, when given). Returns ``{"directory": abs}``.
    """
    from scheduler.errors import PolicyError

    given = directory or os.environ.get("GRIDSHIFT_REPO") or ""
    root = Path(given or os.getcwd()).expanduser().resolve()
    origin = "GRIDSHIFT_REPO" if given else "the current directory (GRIDSHIFT_REPO is not set)"
    if not (root / FLOW_ENTRYPOINT.split(":")[0]).is_file():
        raise PolicyError(f"{root}: {origin} is not a gridshift checkout (no {FLOW_ENTRYPOINT.split(':')[0]}); "
                          "set GRIDSHIFT_REPO to the directory the workers run flows from")
    if policy_path and not (root / policy_path).is_file():
        raise PolicyError(f"{root / policy_path}: the deployment's policy_path does not exist in {origin}")
    return {"directory": str(root)}


def _parameters_for(policy_path: Path, source: Path) -> dict[str, Any]:
    """Paths the worker can resolve: repository-relative inside the checkout, else absolute plus the directory
    to run from (a non-editable install's source is site-packages, where relative paths mean nothing)."""
    path = policy_path.resolve()
    if path.is_relative_to(source) and (source / "pyproject.toml").exists():
        return {"policy_path": str(path.relative_to(source))}
    return {"policy_path": str(path), "workdir": str(Path.cwd().resolve())}


def planning_schedule(policy: Policy) -> Schedule:
    """The deployment's schedule: planning runs (``plan: true``) at each occurrence's earliest start,
    the cron read in ``job.timezone`` (the calendar :mod:`scheduler.cron` reads for everything else)."""
    from prefect.schedules import Cron

    from scheduler.errors import PolicyError

    if policy.job.cron is None:
        raise PolicyError("job.cron: a deployment needs a recurring job (e.g. '0 1 * * *')")
    return Cron(planning_cron(policy.job.cron, policy.job.earliest_start_s), timezone=policy.job.timezone,
                parameters={"plan": True})


def deploy_policy(policy_path: str | Path, *, work_pool: str = "gridshift", name: str | None = None,
                  source_dir: str | Path = REPO_ROOT, schedule: bool = True,
                  notify: Callable[[str], None] = lambda _line: None) -> DeployedPolicy:
    """Create (or update) the nightly deployment of ``policy_path``; returns its id and name.

    ``schedule=False`` leaves the cron off, for when ``gridshift serve`` triggers the runs instead.
    The cron creates *planning* runs (``plan: true``); a run started by hand trains at once. A policy
    with sites also gets one deployment per site, ``<name>-<site>`` on the site's pool (and queue),
    and each site's GPU global concurrency limit. ``notify`` hears one line per deployment replaced
    and per limit created or resized.
    """
    from flows.gpus import ensure_gpu_limits
    from flows.nightly import nightly_retrain
    from scheduler.errors import PolicyError
    from scheduler.policy_io import load_policy

    policy = load_policy(policy_path)
    if policy.job.cron is None:
        raise PolicyError(f"{policy_path}: job.cron: a deployment needs a recurring job (e.g. '0 1 * * *')")
    source = Path(source_dir).resolve()
    check_source(str(source))
    params = _parameters_for(Path(policy_path), source)
    planning = planning_schedule(policy)
    cron = planning.cron
    dep_name = name or policy.job.name
    flow = nightly_retrain.from_source(source=str(source), entrypoint=FLOW_ENTRYPOINT)
    targets: list[tuple[str, str, str | None, dict[str, Any], bool]] = [(dep_name, work_pool, None, params, schedule)]
    targets += [(site_deployment_name(dep_name, s.name), s.work_pool, s.work_queue, {**params, "site": s.name}, False)
                for s in policy.sites]
    ids: dict[str, UUID] = {}
    for target, pool, queue, parameters, scheduled in targets:
        full = f"{nightly_retrain.name}/{target}"
        replaced = _existing_deployment(full)
        if replaced is not None:
            notify(f"replacing deployment {replaced}")
        _ensure_process_pool(pool)
        ids[target] = flow.deploy(
            name=target, work_pool_name=pool, work_queue_name=queue, parameters=parameters,
            schedules=[planning] if scheduled else None,
            build=False, push=False, print_next_steps=False, tags=["gridshift", "nightly", "gridshift-deploy"],
            # one GPU box: one run at a time; with sites, each node's GPU slots count instead
            concurrency_limit=None if policy.sites else 1,
            description=f"gridshift nightly retraining of {policy.job.name}"
                        + (f" at site {parameters['site']}: runs here train at once, holding {policy.job.gpus} GPU slot(s)"
                           if "site" in parameters else
                           f": planning run at the earliest start ({cron} {policy.job.timezone}), deferred start scheduled through "
                           "Prefect; a run started by hand trains now"),
            ignore_warnings=True,
        )
    for line in ensure_gpu_limits({s.name: s.gpus_per_node for s in policy.sites}):
        notify(line)
    return DeployedPolicy(deployment_id=ids[dep_name], name=f"{nightly_retrain.name}/{dep_name}",
                          cron=cron if schedule else "", work_pool=work_pool,
                          sites={s.name: f"{nightly_retrain.name}/{site_deployment_name(dep_name, s.name)}"
                                 for s in policy.sites}, timezone=policy.job.timezone)


def site_deployment_name(deployment: str, site: str) -> str:
    """The deployment that runs ``deployment``'s job at ``site`` (on the site's pool and queue)."""
    return f"{deployment}-{site}"


def trigger_deployment(*, key: str, deployment: str, planned_start: str | None = None,
                       nominal_start: str | None = None, policy_path: str | None = None, **_: Any) -> str:
    """Create a flow run of ``deployment`` now (the `gridshift serve` trigger); ``key`` dedups it."""
    from prefect.deployments import run_deployment

    params: dict[str, Any] = {}
    if policy_path:  # serve's own working directory means nothing to the worker
        params["policy_path"] = str(Path(policy_path).resolve())
    if planned_start:
        params["planned_start"] = planned_start
    if nominal_start:
        params["nominal_start"] = nominal_start
    run = run_deployment(name=deployment, parameters=params, timeout=0, as_subflow=False, idempotency_key=key,
                         scheduled_time=datetime.fromisoformat(planned_start) if planned_start else None)
    return str(run.id)
