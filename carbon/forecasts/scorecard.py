"""Score the archive: per provider and lead, how far off; per night, how well it served the start choice.

Reads a :class:`carbon.forecasts.archive.ForecastArchive`; the numbers come from :mod:`carbon.forecasts.skill`. Time is an
argument (``now``): only nights fully observed by then are scored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import numpy as np

from carbon.forecasts.archive import ForecastArchive
from carbon.forecasts.skill import Night, StartWindow, night_scores, start_gain_share

__all__ = ["LeadScore", "Scorecard", "scorecard"]

_HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class LeadScore:
    """Errors of one provider's values issued ``lead_h`` hours ahead (forecast minus observed, g/kWh)."""

    lead_h: int
    n: int
    bias_g_per_kwh: float
    mape_pct: float | None


@dataclass(frozen=True)
class Scorecard:
    """One provider in one zone: per-lead errors, and its record on the start decision over past nights."""

    provider: str
    zone: str
    leads: tuple[LeadScore, ...]
    nights: int
    rank_correlation: float | None
    start_gain_share: float | None
    mape_pct: float | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _leads(archive: ForecastArchive, provider: str, zone: str) -> tuple[LeadScore, ...]:
    by: dict[int, list[tuple[float, float]]] = {}
    for row in archive.joined(provider=provider, zone=zone):
        if row.observed_g_per_kwh is None or row.lead_s < 0:
            continue
        by.setdefault(int(round(row.lead_s / 3600.0)), []).append((row.forecast_g_per_kwh, row.observed_g_per_kwh))
    out = []
    for lead in sorted(by):
        f, y = np.array(by[lead]).T
        pos = y > 0
        out.append(LeadScore(lead_h=lead, n=len(f), bias_g_per_kwh=float(np.mean(f - y)),
                             mape_pct=float(100 * np.mean(np.abs(f[pos] - y[pos]) / y[pos])) if pos.any() else None))
    return tuple(out)


def scorecard(archive: ForecastArchive, *, provider: str, zone: str, now: datetime, origin_hour: int,
              window: StartWindow, days: int = 28) -> Scorecard:
    """Score ``provider`` in ``zone``; nights start at ``origin_hour`` UTC, the decision as ``window`` (hourly steps)."""
    last = now.replace(hour=origin_hour, minute=0, second=0, microsecond=0)
    nights = []
    for d in range(days + 1):
        origin = last - timedelta(days=d)
        if origin + window.end * _HOUR > now:
            continue  # not fully observed yet
        said = archive.said(provider=provider, zone=zone, issued_by=origin, at=origin, step=_HOUR, n=window.end)
        seen = archive.seen(zone=zone, at=origin, step=_HOUR, n=window.end, now=now)
        said[0] = seen[0]  # at the decision the value now is observed, not forecast
        nights.append(Night(forecast=said, observed=seen))
    share, n = start_gain_share(nights, window)
    rho, mape, _ = night_scores(nights, window)
    return Scorecard(provider=provider, zone=zone, leads=_leads(archive, provider, zone), nights=n,
                     rank_correlation=rho, start_gain_share=share, mape_pct=mape)
