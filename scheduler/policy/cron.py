"""``job.cron`` read the way Prefect reads it: the one calendar of deployments, ``serve``, the
simulator, placement and ``policy check``.

A deployment's schedule is Prefect's ``CronSchedule``, so every other reader must give the same
dates. Prefect 3.9 evaluates cron with the croniter 6.0.0 it vendors (standard cron: day of week 0
and 7 are Sunday, names, ranges, lists and steps; a day of month and a day of week both given fire
on either), on wall-clock times in the schedule's IANA time zone, a wall time that does not exist
(spring forward) or exists twice (fall back) resolved as its first instant. This module uses the
same croniter release (pinned in ``pyproject.toml``) the same way, without importing Prefect, and
``tests/scheduler/test_cron.py`` compares its dates with Prefect's own ``CronSchedule``.

APScheduler's ``CronTrigger`` is not used: its day of week 0 is Monday and it refuses 7, so it reads
``0 1 * * 1-5`` as Tuesday to Saturday where Prefect reads Monday to Friday.
"""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta, timezone
from itertools import takewhile
from typing import Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler.errors import PolicyError

__all__ = ["NEXT_RUNS", "cron_occurrences", "cron_problem", "next_runs", "timezone_problem"]

#: how many coming runs ``policy check`` shows
NEXT_RUNS = 5

_CRON_HELP = "five fields: minute hour day-of-month month day-of-week (0 or 7 = Sunday), e.g. '0 1 * * 1-5'"


def cron_problem(cron: str) -> str | None:
    """Why ``cron`` is not a cron expression Prefect schedules, or None.

    Five fields only (croniter would also take a seconds and a year field, which ``planning_cron``
    and the docs do not know); croniter's random and hashed forms (``R``, ``H``) are refused, as
    Prefect refuses them.
    """
    from croniter import CroniterBadDateError, croniter

    fields = cron.split()
    if len(fields) != 5:
        return f"{cron!r} is not a cron expression: {len(fields)} field(s) ({_CRON_HELP})"
    if any(f.casefold() in ("r", "h") for f in fields) or not croniter.is_valid(cron):
        return f"{cron!r} is not a cron expression ({_CRON_HELP})"
    try:  # valid but impossible ('0 0 30 2 *'): Prefect would accept it and never run the job
        croniter(cron, datetime(2000, 1, 1), day_or=True).get_next(datetime)
    except CroniterBadDateError:
        return f"{cron!r} never fires (no date matches it)"
    return None


def timezone_problem(name: str) -> str | None:
    """Why ``name`` is not an IANA time zone (``Europe/London``, ``UTC``), or None."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name!r} (an IANA name such as 'UTC', 'Europe/London' or 'America/New_York')"
    return None


#: more than any clock change (1 h in most zones, 30 min on Lord Howe, 2 h at most in history)
_CLOCK_CHANGE = timedelta(hours=3)


def _fire_times(cron: str, start: datetime, tz: str) -> Iterator[datetime]:
    """Fire times (UTC), in order, at or after ``start``, as Prefect's ``CronSchedule.get_dates``
    gives them: the cron's wall-clock times in ``tz``, each at its first instant."""
    from croniter import croniter

    if message := cron_problem(cron):
        raise PolicyError(f"job.cron: {message}")
    if message := timezone_problem(tz):
        raise PolicyError(f"job.timezone: {message}")
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    zone = ZoneInfo(tz)
    # fold=0 puts a wall time the spring change skips at the gap's length later (Prefect's
    # "compatible"), after real wall times that follow it: the instants are in order only up to a
    # clock change. So the walk starts one clock change early and an instant is given out once no
    # later wall time can come before it.
    wall = start.astimezone(zone).replace(tzinfo=None) - _CLOCK_CHANGE
    walls = croniter(cron, wall, day_or=True)
    waiting: list[datetime] = []
    last: datetime | None = None
    while True:
        at = walls.get_next(datetime).replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
        heapq.heappush(waiting, at)
        while waiting and waiting[0] <= at - _CLOCK_CHANGE:
            first = heapq.heappop(waiting)
            if first >= start and first != last:  # two wall times can land on one instant
                last = first
                yield first


def cron_occurrences(cron: str, start: datetime, end: datetime, *, tz: str = "UTC") -> list[datetime]:
    """Fire times of ``cron`` in time zone ``tz`` within ``[start, end)``, as UTC datetimes.

    Raises :class:`PolicyError` for a cron expression or time zone that is not one.
    """
    return list(takewhile(lambda at: at < end, _fire_times(cron, start, tz)))


def next_runs(cron: str, now: datetime, n: int = NEXT_RUNS, *, tz: str = "UTC") -> list[datetime]:
    """The next ``n`` fire times of ``cron`` in ``tz`` at or after ``now``, as UTC datetimes."""
    times = _fire_times(cron, now, tz)
    return [next(times) for _ in range(n)]
