"""The gate's record read from the forecast archive: what each forecast said before past nights, and what came.

For the night at ``nominal`` the record holds the last :data:`scheduler.loop.gate.RECORD_NIGHTS`
nights at the same time of day whose whole window (to the deadline) was over by ``now``: each
forecast as the archive had it by that night's earliest start (its newest issue for every hour:
:meth:`carbon.forecasts.archive.ForecastArchive.said`) against the intensities observed since
(:meth:`~carbon.forecasts.archive.ForecastArchive.seen`), each night scored by
:meth:`scheduler.loop.gate.NightPlanner.gain`, the function the simulator's replay uses. Hourly,
as the archive keeps forecasts. A night with an hour not observed is left out; a forecast that
said nothing for a night is not scored on it. Under a priced objective each night is scored on the
objective, with the prices ``price_of`` gives for it (published at its decision, and those that
held); a night without them is left out.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Callable, Sequence

import numpy as np

from carbon.forecasts.archive import ForecastArchive
from scheduler.loop.gate import RECORD_NIGHTS, ForecastRecord, NightPlanner
from scheduler.planner.grid import GridSignal, Signal

__all__ = ["NightPrices", "archive_records"]

#: a night's prices for the gate: (origin, hours) -> (the prices published at the origin, those that held), or None
NightPrices = Callable[[datetime, int], "tuple[Signal, GridSignal] | None"]

_HOUR = timedelta(hours=1)


def archive_records(archive: ForecastArchive, planner: NightPlanner, *, labels: Sequence[str], zone: str,
                    nominal: datetime, now: datetime, nights: int = RECORD_NIGHTS,
                    price_of: NightPrices | None = None) -> list[ForecastRecord]:
    """Each forecast in ``labels`` scored on the last ``nights`` finished nights before ``nominal`` (oldest first)."""
    job = planner.spec.job
    if job.deadline_s is None:
        return [ForecastRecord(label, ()) for label in labels]
    span = timedelta(seconds=job.deadline_s - min(job.earliest_start_s, 0.0))
    n = int(math.ceil(span / _HOUR)) + 1
    gains: dict[str, list[float]] = {label: [] for label in labels}
    found = 0
    for d in range(1, nights + 8):  # a few nights more, for those the archive missed
        night = nominal - timedelta(days=d)
        origin = night + timedelta(seconds=job.earliest_start_s)
        if night + timedelta(seconds=job.deadline_s) > now:
            continue  # not over yet
        seen = archive.seen(zone=zone, at=origin, step=_HOUR, n=n, now=now)
        if np.isnan(seen).any():
            continue
        observed = GridSignal(seen, 3600.0, 0.0, epoch=origin)
        prices = price_of(origin, n) if price_of is not None and planner.objective.priced else None
        if planner.objective.priced and prices is None:
            continue  # a priced objective is scored on the night's prices
        for label in labels:
            said = archive.said(provider=label, zone=zone, issued_by=origin, at=origin, step=_HOUR, n=n)
            if np.isnan(said[1:]).all():
                continue  # it said nothing before this night
            said[0] = seen[0]  # at the decision the value now is observed, not forecast
            gain = planner.gain(GridSignal(_carried(said), 3600.0, 0.0, epoch=origin), observed, nominal=night,
                                price=prices[0] if prices else None, observed_price=prices[1] if prices else None)
            if gain is not None:
                gains[label].insert(0, gain)
        found += 1
        if found >= nights:
            break
    return [ForecastRecord(label, tuple(g)) for label, g in gains.items()]


def _carried(values: np.ndarray) -> np.ndarray:
    """Hours an issue did not cover hold the hour before (the planner's reading of a short forecast)."""
    out = values.copy()
    for k in range(1, len(out)):
        if np.isnan(out[k]):
            out[k] = out[k - 1]
    return out
