"""Cron fire times in UTC, for deployments, ``serve`` and the simulator."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from scheduler.errors import PolicyError

__all__ = ["cron_occurrences"]


def cron_occurrences(cron: str, start: datetime, end: datetime) -> list[datetime]:
    """Fire times of ``cron`` (UTC) in ``[start, end)``."""
    from apscheduler.triggers.cron import CronTrigger

    try:
        trigger = CronTrigger.from_crontab(cron, timezone=timezone.utc)
    except ValueError as exc:
        raise PolicyError(f"job.cron: {exc}") from None
    out: list[datetime] = []
    prev = None
    t = start
    while True:
        nxt = trigger.get_next_fire_time(prev, t)
        if nxt is None or nxt >= end:
            return out
        out.append(nxt)
        prev, t = nxt, nxt + timedelta(seconds=1)
