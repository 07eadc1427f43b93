"""Create the nightly retraining deployment for a policy, and trigger deployments by name.

``deploy_policy`` registers :func:`flows.nightly.nightly_retrain` from this source tree on a
*process* work pool (created when missing) with a cron that fires at each occurrence's earliest
allowed start, so the planning run can choose any start in the window and defer through Prefect's
own scheduling (see :mod:`flows.nightly`). Needs a Prefect server (``PREFECT_API_URL``): schedules do
not run on the ephemeral one.

A policy with sites also gets what keeps the fleet honest under load and through crashes: the GPU
and placing global concurrency limits, flow run heartbeats on the site deployments (every
:data:`HEARTBEAT_S`), the automation that marks a run Crashed when they stop for
:data:`CRASH_AFTER_S` (Prefect's own zombie-run recipe; the server runs it), and a recording
deployment that the automation runs for every crashed site run, which writes the ledger row and
the run artifact the dead node never wrote (:func:`flows.deployments.fleet_runs.record_crashed_run`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from uuid import UUID

from flows.fleet.names import HEARTBEAT_TAG, site_deployment_name

if TYPE_CHECKING:  # Prefect is imported when a deployment is made, not when the CLI starts
    from prefect.schedules import Schedule

    from scheduler.policy.types import Policy

__all__ = ["CRASH_AFTER_S", "DeployedPolicy", "HEARTBEAT_S", "HEARTBEAT_TAG", "MARK_CRASHED", "check_source",
           "deploy_policy", "planning_cron", "planning_schedule", "site_deployment_name", "source_problem",
           "trigger_deployment", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[2]
FLOW_ENTRYPOINT = "flows/nightly.py:nightly_retrain"
RECORD_ENTRYPOINT = "flows/deployments/fleet_runs.py:record_crashed_run"

#: seconds between a site run's heartbeats (Prefect's shortest)
HEARTBEAT_S = 30
#: a site run whose heartbeats stopped this long ago is marked Crashed (three missed beats)
CRASH_AFTER_S = 90
#: the one automation (server-wide) that marks heartbeat-less gridshift runs Crashed
MARK_CRASHED = "gridshift: mark site runs crashed when their heartbeats stop"


@dataclass(frozen=True)
class DeployedPolicy:
    deployment_id: UUID
    name: str  # "flow/deployment", what run_deployment takes
    cron: str
    work_pool: str
    sites: dict[str, str] = field(default_factory=dict)  # site name -> its "flow/deployment"
    timezone: str = "UTC"  # the IANA zone Prefect reads the cron in (job.timezone)
    recorder: str | None = None  # "flow/deployment" that records crashed site runs (policies with sites)


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


def source_problem(directory: str | None, policy_path: str | None, cwd: Path) -> tuple[Path, str | None]:
    """The checkout the workers run flows from, and what is wrong with it (None: nothing).

    ``directory`` defaults to ``$GRIDSHIFT_REPO``, else ``cwd``; it must hold ``flows/nightly.py``
    (and ``policy_path``, relative to it, when given).
    """
    given = directory or os.environ.get("GRIDSHIFT_REPO") or ""
    root = Path(given or cwd).expanduser().resolve()
    origin = "GRIDSHIFT_REPO" if given else "the current directory (GRIDSHIFT_REPO is not set)"
    entry = FLOW_ENTRYPOINT.split(":")[0]
    if not (root / entry).is_file():
        return root, (f"{root}: {origin} is not a gridshift checkout (no {entry}); "
                      "set GRIDSHIFT_REPO to the directory the workers run flows from")
    if policy_path and not (root / policy_path).is_file():
        return root, f"{root / policy_path}: the deployment's policy_path does not exist in {origin}"
    return root, None


def check_source(directory: str | None = None, policy_path: str | None = None,
                 deployment: str | None = None) -> dict[str, str]:
    """prefect.yaml's build step: resolve and check the checkout when deploying, not on the worker.

    ``prefect deploy`` stops with one line on stderr and exit status 3 (gridshift's "environment"
    status) when the directory is wrong, instead of every run failing later on the worker, and
    instead of a traceback. ``deployment`` ("flow/name"): say on stderr when ``prefect deploy`` is
    about to replace one, and who made it (``gridshift deploy`` tags its own). Returns
    ``{"directory": abs}`` for the pull step.
    """
    import sys

    root, problem = source_problem(directory, policy_path, Path.cwd())
    if problem is not None:
        print(f"prefect deploy: {problem}", file=sys.stderr)
        raise SystemExit(3)  # SystemExit, not an error: Prefect wraps errors from a step in a traceback
    replaced = _existing_deployment(deployment) if deployment else None
    if replaced is not None:
        print(f"prefect deploy: replacing deployment {replaced}; prefect.yaml wins until the next "
              "`gridshift deploy`", file=sys.stderr)
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
    the cron read in ``job.timezone`` (the calendar :mod:`scheduler.policy.cron` reads for everything else)."""
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
    each site's GPU and placing global concurrency limits, and crash recovery (see the module
    docstring): ``<name>-record-crashed`` on ``work_pool`` and the two automations. ``notify`` hears
    one line per deployment replaced, per limit created or resized and per automation created.
    """
    from flows.deployments.fleet_runs import record_crashed_run
    from flows.fleet.gpus import ensure_limits
    from flows.fleet.names import gpu_limit_name, placing_limit_name
    from flows.fleet.slots import free_lost_slots, lease_storage_note
    from flows.nightly import nightly_retrain
    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy

    policy = load_policy(policy_path)
    if policy.job.cron is None:
        raise PolicyError(f"{policy_path}: job.cron: a deployment needs a recurring job (e.g. '0 1 * * *')")
    source, problem = source_problem(str(source_dir), None, Path.cwd())
    if problem is not None:
        raise PolicyError(problem)
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
        at_site = "site" in parameters
        ids[target] = flow.deploy(
            name=target, work_pool_name=pool, work_queue_name=queue, parameters=parameters,
            schedules=[planning] if scheduled else None,
            build=False, push=False, print_next_steps=False,
            tags=["gridshift", "nightly", "gridshift-deploy", *([HEARTBEAT_TAG] if at_site else [])],
            # a site run beats every HEARTBEAT_S, so a dead node's run is found (MARK_CRASHED)
            job_variables={"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}} if at_site else None,
            # one GPU box: one run at a time; with sites, each node's GPU slots count instead
            concurrency_limit=None if policy.sites else 1,
            description=f"gridshift nightly retraining of {policy.job.name}"
                        + (f" at site {parameters['site']}: runs here train at once, holding {policy.job.gpus} GPU slot(s)"
                           if at_site else
                           f": planning run at the earliest start ({cron} {policy.job.timezone}), deferred start scheduled through "
                           "Prefect; a run started by hand trains now"),
            ignore_warnings=True,
        )
    recorder: str | None = None
    if policy.sites:
        limits = {gpu_limit_name(s.name): s.gpus_per_node for s in policy.sites}
        for line in ensure_limits(limits) + ensure_limits({placing_limit_name(s.name): 1 for s in policy.sites},
                                                          "placement at a time"):
            notify(line)
        free_lost_slots(list(limits), announce=notify)  # slots a restarted server's lost leases left taken
        note = lease_storage_note()
        if note is not None:
            notify(note)
        record_name = f"{dep_name}-record-crashed"
        recorder_id = record_crashed_run.from_source(source=str(source), entrypoint=RECORD_ENTRYPOINT).deploy(
            name=record_name, work_pool_name=work_pool, build=False, push=False, print_next_steps=False,
            parameters={"job": policy.job.name, "policy_path": params["policy_path"]},
            tags=["gridshift", "gridshift-deploy"], ignore_warnings=True,
            description=f"records a crashed site run of {policy.job.name} (ledger row and run artifact); "
                        "run by an automation when a site run is marked Crashed")
        recorder = f"{record_crashed_run.name}/{record_name}"
        site_ids = [ids[site_deployment_name(dep_name, s.name)] for s in policy.sites]
        for line in _ensure_crash_automations(site_ids, recorder_id, f"{recorder} records crashed runs of {dep_name}"):
            notify(line)
    return DeployedPolicy(deployment_id=ids[dep_name], name=f"{nightly_retrain.name}/{dep_name}",
                          cron=cron if schedule else "", work_pool=work_pool,
                          sites={s.name: f"{nightly_retrain.name}/{site_deployment_name(dep_name, s.name)}"
                                 for s in policy.sites}, recorder=recorder,
                          timezone=policy.job.timezone)


def _ensure_crash_automations(site_deployments: list[UUID], recorder: UUID, record_name: str) -> list[str]:
    """Prefect's zombie-run automation for heartbeat-tagged runs, and one that runs ``recorder`` per crashed site run.

    Both are replaced when they exist (by name), so a redeploy picks up new deployment ids.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState, RunDeployment
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    ended = {f"prefect.flow-run.{s}" for s in ("Completed", "Failed", "Cancelled", "Crashed")}
    mark = AutomationCore(
        name=MARK_CRASHED,
        description=f"a flow run tagged {HEARTBEAT_TAG} that sent no heartbeat for {CRASH_AFTER_S} s lost its "
                    "worker or node: it is marked Crashed (made by gridshift deploy)",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"}, expect={"prefect.flow-run.heartbeat", *ended},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification({"prefect.resource.role": "tag",
                                                 "prefect.resource.id": f"prefect.tag.{HEARTBEAT_TAG}"}),
            for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=CRASH_AFTER_S)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, name="Crashed",
                                    message=f"no heartbeat for {CRASH_AFTER_S} s: its worker or node died")])
    record = AutomationCore(
        name=f"gridshift: {record_name}",
        description="writes the ledger row and run artifact of a crashed site run (made by gridshift deploy)",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification({"prefect.resource.role": "deployment",
                                                 "prefect.resource.id": [f"prefect.deployment.{d}"
                                                                         for d in site_deployments]}),
            posture=Posture.Reactive, threshold=1),
        actions=[RunDeployment(source="selected", deployment_id=recorder,
                               # a plain-text template: the v1 shorthand renders through tojson, which a UUID fails
                               parameters={"flow_run_id": {"__prefect_kind": "jinja", "template": "{{ flow_run.id }}"}})])
    lines: list[str] = []
    with get_client(sync_client=True) as client:
        for automation in (mark, record):
            existing = client.read_automations_by_name(automation.name)
            for old in existing:
                client.delete_automation(old.id)
            client.create_automation(automation)
            if not existing:
                lines.append(f"created automation '{automation.name}'")
    return lines


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
