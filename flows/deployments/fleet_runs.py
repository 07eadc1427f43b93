"""Every node's runs, read back from the Prefect API (the run artifacts), for ``gridshift runs --from prefect``;
and the record of a run whose node died.

The local ledger holds the runs of the machine it is on; the Prefect server holds one artifact per
run from every worker (key ``gridshift-run-<run id>``, see :mod:`flows.run.artifacts`), so this is the
one view of a fleet. Each key is read once, at its latest version. A site run whose node died
writes nothing itself: :func:`record_crashed_run`, run by the automation ``gridshift deploy`` sets
up, writes its ``crashed`` report instead.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from prefect import flow

from flows.run.artifacts import RUN_ARTIFACT_PREFIX, report_from_markdown
from scheduler.report import REPORT_VERSION

__all__ = ["crashed_report", "record_crashed_run", "runs_from_prefect"]

_PAGE = 200


def runs_from_prefect(*, job: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Run reports from the Prefect API, newest start first (one per run id)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey
    from prefect.client.schemas.sorting import ArtifactCollectionSort

    reports: dict[str, dict[str, Any]] = {}
    offset = 0
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_latest_artifacts(
                artifact_filter=ArtifactCollectionFilter(key=ArtifactCollectionFilterKey(like_=RUN_ARTIFACT_PREFIX)),
                sort=ArtifactCollectionSort.CREATED_DESC, limit=_PAGE, offset=offset)
            for artifact in page:
                if not (artifact.key or "").startswith(RUN_ARTIFACT_PREFIX) or not isinstance(artifact.data, str):
                    continue
                report = report_from_markdown(artifact.data)
                if report is not None and (job is None or report.get("job") == job):
                    reports.setdefault(str(report["run_id"]), report)
            if len(page) < _PAGE:
                break
            offset += _PAGE
    rows = sorted(reports.values(), key=lambda r: str(r.get("started_at", "")), reverse=True)
    return rows[:limit] if limit is not None else rows


def crashed_report(*, flow_run_id: str, flow_run_name: str, job: str, policy: str, parameters: dict[str, Any],
                   started: datetime | None, ended: datetime, reason: str) -> dict[str, Any]:
    """The report of a site run whose node died before it could write one (status ``crashed``).

    Nothing was metered by anyone alive, so energy and carbon are 0 and labelled not measured; the
    placement the run carried says where it ran and what it was meant to use.
    """
    begun = started or ended
    placement = parameters.get("placement") or {}
    return {
        "version": REPORT_VERSION, "run_id": f"crashed-{flow_run_id}", "policy": policy, "job": job,
        "status": "crashed", "backend": "none", "measured": False,
        "energy_label": "not measured (the node died)", "nominal_start": parameters.get("nominal_start") or begun.isoformat(),
        "started_at": begun.isoformat(), "ended_at": ended.isoformat(), "deferred_s": 0.0,
        "duration_s": max((ended - begun).total_seconds(), 0.0), "energy_j": 0.0, "carbon_g": 0.0,
        "intensity_g_per_kwh": None, "intensity_kind": "none", "intensity_source": "none", "modes": [], "windows": [],
        "decision_reason": f"crashed: {reason}", "exit_code": None, "error": reason, "warnings": [],
        "carbon_sources": [], "late_s": None,
        "extra": {"site": parameters.get("site"), "flow_run_id": flow_run_id, "flow_run_name": flow_run_name,
                  **({"placement": placement} if placement else {})},
    }


@flow(name="gridshift-record-crashed", log_prints=True, validate_parameters=False)
def record_crashed_run(flow_run_id: str, job: str, policy_path: str, ledger_path: str | None = None) -> dict[str, Any]:
    """Write the ledger row and run artifact of crashed site run ``flow_run_id`` (run by the crash automation).

    The ledger is the one of the node this runs on (the main deployment's pool); the artifact makes
    the crash part of every node's view (``gridshift runs --from prefect``). A run that is not
    Crashed (the automation raced a late state) is left alone.
    """
    from prefect import get_run_logger
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client

    from flows.run.artifacts import artifact_key, report_markdown
    from flows.fleet.gpu_line import forget_place, places_of_run
    from flows.fleet.names import utc
    from scheduler.store.ledger import Ledger

    logger = get_run_logger()
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(flow_run_id))
    if run.state is None or run.state.type.value != "CRASHED":
        logger.info("flow run %s is %s, not Crashed: nothing to record", flow_run_id, run.state_type)
        return {"recorded": False, "flow_run_id": flow_run_id}
    with get_client(sync_client=True) as client:  # its places in the GPU lines (a dead holder's stay otherwise)
        for name in places_of_run(client, flow_run_id):
            forget_place(client, name)
    ended = utc(run.state.timestamp) if run.state.timestamp else datetime.now(timezone.utc)
    report = crashed_report(flow_run_id=flow_run_id, flow_run_name=run.name, job=job, policy=policy_path,
                            parameters=dict(run.parameters or {}), reason=run.state.message or "crashed",
                            started=utc(run.start_time) if run.start_time else None, ended=ended)
    with Ledger(ledger_path) as ledger:
        ledger.record(report)
    create_markdown_artifact(key=artifact_key(report["run_id"]), markdown=report_markdown(report),
                             description=f"gridshift run {report['run_id']} of {job} (crashed)")
    logger.info("recorded crashed run %s (%s): %s", report["run_id"], run.name, report["error"])
    return {"recorded": True, "run_id": report["run_id"], "flow_run_id": flow_run_id}
