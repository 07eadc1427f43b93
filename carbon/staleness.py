"""Is a signal too old to act on? Judged on the data's own timestamps, never on when it was fetched.

A provider can answer quickly with an old number (a stalled upstream, a cached CDN body), and a
cache file written a minute ago can hold a value from hours ago. So the age of a value is how long
ago its interval *ended*, and a forecast is judged by how much of the horizon it still covers:

- a value is stale when its interval ended more than ``max_staleness`` before ``now``;
- a forecast is stale when it covers nothing from ``now`` on, or when it has lost more than
  ``max_staleness`` of the horizon since it was ``issued``: an issued forecast runs out as time
  passes, and the planner would see a shorter future than the policy asks for. (Providers do not
  say when they issued a forecast, so ``issued`` is when it was fetched. A forecast that was short
  from the start, like a trace near its end, is what the source has, not stale.)

Pure: time is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from carbon.series import IntensityPoint

__all__ = ["stale_reason", "describe_age"]


def describe_age(delta: timedelta) -> str:
    """``delta`` in words: minutes below an hour, else hours with one decimal."""
    s = delta.total_seconds()
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"


def stale_reason(current: IntensityPoint, forecast: Sequence[IntensityPoint], now: datetime, *, issued: datetime,
                 max_staleness: timedelta, horizon: timedelta) -> str | None:
    """Why ``current`` (and ``forecast``, issued at ``issued``) is too old to use at ``now``; None when fresh."""
    limit = describe_age(max_staleness)
    age = now - current.end
    if age > max_staleness:
        return (f"stale data: the newest value's interval ended {describe_age(age)} ago "
                f"({current.end:%Y-%m-%d %H:%M} UTC), beyond the {limit} staleness limit")
    if forecast:
        end = max(p.end for p in forecast)
        if end <= now:
            return (f"stale forecast: it ended at {end:%Y-%m-%d %H:%M} UTC and covers none of the horizon "
                    f"(staleness limit {limit})")
        lost = (now + horizon - end) - max(issued + horizon - end, timedelta(0))
        if lost > max_staleness:
            return (f"stale forecast: issued {issued:%Y-%m-%d %H:%M} UTC, it now ends {describe_age(now + horizon - end)} "
                    f"short of the {describe_age(horizon)} horizon, beyond the {limit} staleness limit")
    return None
