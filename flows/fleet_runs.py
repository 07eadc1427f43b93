"""Every node's runs, read back from the Prefect API (the run artifacts), for ``gridshift runs --from prefect``.

The local ledger holds the runs of the machine it is on; the Prefect server holds one artifact per
run from every worker (key ``gridshift-run-<run id>``, see :mod:`flows.artifacts`), so this is the
one view of a fleet. Each key is read once, at its latest version.
"""

from __future__ import annotations

from typing import Any

from flows.artifacts import RUN_ARTIFACT_PREFIX, report_from_markdown

__all__ = ["runs_from_prefect"]

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
