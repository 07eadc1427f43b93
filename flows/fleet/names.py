"""The fleet's names and times, shared by the fleet and the deployments without importing either.

What both sides must spell the same way: the tag the mark-crashed automation watches, a site's
deployment, its GPU and placing limits. And :func:`utc`, the one door through which Prefect's times
enter gridshift. Nothing here imports Prefect or another gridshift module, so ``flows.deployments``
and ``flows.fleet`` both build on it without importing each other in a circle.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["GPU_LIMIT_PREFIX", "HEARTBEAT_TAG", "PLACING_LIMIT_PREFIX", "gpu_limit_name", "placing_limit_name",
           "site_deployment_name", "utc"]

#: site deployments and placed runs carry it; the mark-crashed automation watches only runs with it
HEARTBEAT_TAG = "gridshift-heartbeat"
GPU_LIMIT_PREFIX = "gridshift-gpus-"
PLACING_LIMIT_PREFIX = "gridshift-placing-"


def site_deployment_name(deployment: str, site: str) -> str:
    """The deployment that runs ``deployment``'s job at ``site`` (on the site's pool and queue)."""
    return f"{deployment}-{site}"


def gpu_limit_name(site: str) -> str:
    """The global concurrency limit that counts the GPUs of ``site``'s node."""
    return f"{GPU_LIMIT_PREFIX}{site}"


def placing_limit_name(site: str) -> str:
    """The global concurrency limit (of 1) that serialises placements onto ``site``."""
    return f"{PLACING_LIMIT_PREFIX}{site}"


def utc(value: datetime) -> datetime:
    """``value`` as a stdlib datetime in UTC (Prefect's pendulum DateTime included); naive values are refused."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{value!r}: a time without a time zone cannot be placed")
    # via the timestamp, not astimezone: a pendulum DateTime stays pendulum (and loses its zone on +timedelta)
    return datetime.fromtimestamp(value.timestamp(), tz=timezone.utc)
