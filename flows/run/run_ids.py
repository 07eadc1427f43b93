"""Run ids: sortable by start time, unique across concurrent runs. Light (no Prefect), so the CLI
can name a run's log file before Prefect is imported."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

__all__ = ["new_run_id"]


def new_run_id() -> str:
    """``YYYYmmddTHHMMSS-xxxxxx`` (UTC, six random hex digits)."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
