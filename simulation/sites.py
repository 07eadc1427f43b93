"""Where and when, replayed: a recurring job over real traces of two or more sites' grids, same period.

Every site's trace is replayed by :func:`simulation.simulate.simulate` (the same job, the same
forecaster, the same receding-horizon planner a run uses), giving per occurrence and per site:

- **fixed**: the home (first-listed) site, nominal start, reference mode;
- **static efficiency**: nominal start, the most frugal mode that meets the deadline, at one site;
- **when-only**: the planner at one site (start and modes, re-planned every ``rules.interval_s``);
- **oracle**: the exact optimum at one site with perfect foresight.

Across sites:

- **where-only**: at the nominal time, the site whose *forecast* is cleanest for a reference-mode run
  starting then (the forecast a user would have had), charged on the real trace;
- **where+when**: at the window's opening, :func:`scheduler.service.placement.place_run` (the product's
  placement: the planner at every site on the forecast issued then) picks the site; the run there
  is that site's when-only run;
- **where+when oracle**: the best site's oracle per occurrence (perfect foresight, both levers): a
  bound no strategy may beat.

The simple alternatives a user could pick instead are fixed, where-only, and static efficiency or
when-only at the single best site chosen with hindsight; where+when is credited only with its
saving over the best of those. Power and speed per mode are modelled (see the figures' source);
the intensities are the real traces.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.errors import PolicyError
from scheduler.service.placement import modes_at_site, place_run
from scheduler.planner import ModeFigures
from scheduler.policy.types import Policy
from carbon.forecasts.builtin import FORECAST_HISTORY
from simulation.sim_forecast import DailyProfileForecaster, GridForecaster, PerfectForecaster
from simulation.simulate import SimulationResult, resample, simulate

__all__ = ["FORECASTS", "SitesComparison", "compare_sites"]

#: how much trace before the period the replay reads, so the forecaster has its history (and a day's margin)
HISTORY = FORECAST_HISTORY + timedelta(days=1)
#: forecasts the comparison can replay with: past data only (the flow's forecaster), or the trace itself
FORECASTS = ("daily-profile", "perfect")


@dataclass(frozen=True)
class SitesComparison:
    """Total grams of CO2 per strategy over ``jobs`` occurrences (all modelled)."""

    jobs: int
    start: datetime
    end: datetime
    home: str
    forecast: str
    fixed_g: float
    where_only_g: float
    static_efficiency_g: dict[str, float]
    when_only_g: dict[str, float]
    where_when_g: float
    oracle_g: float
    site_share: dict[str, float]  # fraction of where+when runs placed at each site
    deadline_misses: int          # of where+when
    energy_source: str

    def summary(self) -> dict[str, Any]:
        simple = {"fixed": self.fixed_g, "where-only": self.where_only_g,
                  **{f"static efficiency at {k}": v for k, v in self.static_efficiency_g.items()},
                  **{f"when-only at {k}": v for k, v in self.when_only_g.items()}}
        best_simple = min(simple, key=simple.__getitem__)
        best_when = min(self.when_only_g, key=self.when_only_g.__getitem__)

        def saving(g: float) -> float:
            return 100.0 * (g - self.where_when_g) / g if g > 0 else 0.0

        return {"jobs": self.jobs, "period_start": self.start.isoformat(), "period_end": self.end.isoformat(),
                "home_site": self.home, "forecast": self.forecast, "fixed_g": self.fixed_g,
                "where_only_g": self.where_only_g, "static_efficiency_g": dict(self.static_efficiency_g),
                "when_only_g": dict(self.when_only_g), "best_when_only_site": best_when,
                "where_when_g": self.where_when_g, "oracle_g": self.oracle_g, "site_share": dict(self.site_share),
                "deadline_misses": self.deadline_misses, "best_simple": best_simple,
                "best_simple_g": simple[best_simple], "saving_vs_best_simple_pct": saving(simple[best_simple]),
                "saving_vs_fixed_pct": saving(self.fixed_g), "saving_vs_where_only_pct": saving(self.where_only_g),
                "saving_vs_best_when_only_pct": saving(self.when_only_g[best_when]),
                "modelled": True, "energy_source": self.energy_source}


def _forecaster(kind: str, step_s: float) -> GridForecaster:
    if kind == "perfect":
        return PerfectForecaster()
    if kind == "daily-profile":
        return DailyProfileForecaster(step_s=step_s)
    raise PolicyError(f"forecast {kind!r}: expected one of {', '.join(FORECASTS)}")


def _grid(series: IntensitySeries, start: datetime, end: datetime, step_s: float) -> tuple[datetime, float, np.ndarray]:
    window = series.window(start, end)
    if len(window) < 2:
        raise PolicyError("the traces share less than two points; nothing to simulate")
    return resample(window, step_s)


def _on_grid(t0: datetime, step: float, values: np.ndarray, zone: str) -> IntensitySeries:
    return IntensitySeries.of((IntensityPoint(t0 + timedelta(seconds=k * step), timedelta(seconds=step), float(v))
                               for k, v in enumerate(values)), zone=zone)


def _median_step_s(series: IntensitySeries) -> float:
    starts = np.array([p.start.timestamp() for p in series.points[:1000]])
    return float(np.median(np.diff(starts))) if len(starts) > 1 else 3600.0


def _forecast_series(forecaster: GridForecaster, values: np.ndarray, t0: datetime, step: float, at_s: float,
                     until_s: float, zone: str) -> IntensitySeries:
    """What ``forecaster`` expected at ``at_s`` (trace seconds) for the steps up to ``until_s``."""
    i = min(int(at_s // step), len(values) - 1)
    n = int(np.ceil((until_s - i * step) / step)) + 1
    ahead = forecaster.forecast(values, i, n)
    return IntensitySeries.of((IntensityPoint(t0 + timedelta(seconds=(i + k) * step), timedelta(seconds=step), float(v))
                               for k, v in enumerate(ahead)), zone=zone)


def compare_sites(policy: Policy, traces: Mapping[str, IntensitySeries], modes: Sequence[ModeFigures], *,
                  forecast: str = "daily-profile", limit: int | None = None,
                  period: tuple[datetime, datetime] | None = None,
                  progress: Callable[[int, int, str], None] | None = None) -> SitesComparison:
    """Replay ``policy``'s recurring job at every site of ``traces`` (site name -> its real trace); see the module docstring.

    ``period`` restricts the replay to ``[start, end)``; ``limit`` to the first occurrences.
    ``progress(done, total, stage)`` hears of each job replayed at each site, then of each placement.
    """
    tell = progress or (lambda done, total, stage: None)
    job = policy.job
    sites = [s for s in policy.sites if s.name in traces]
    if len(sites) < 2:
        raise PolicyError("a sites comparison needs a trace for at least two of the policy's sites")
    if job.cron is None or job.deadline_s is None:
        raise PolicyError("job.cron and job.deadline_s: the comparison replays a recurring job with a deadline")
    start = max(traces[s.name].start for s in sites)
    end = min(traces[s.name].end for s in sites)
    if period is not None:
        start, end = max(start, period[0]), min(end, period[1])
    if limit is not None:  # enough trace for the first ``limit`` windows
        end = min(end, start + timedelta(seconds=max(-job.earliest_start_s, 0.0) + job.deadline_s) + timedelta(days=limit))
    # the forecaster reads the past: replay from up to HISTORY before the period, count the period's windows only
    replay_from = max(max(traces[s.name].start for s in sites), start - HISTORY)
    # one grid for all sites: the coarsest of their steps (a 15-min and a 30-min trace replay at 30 min)
    common_step = max(_median_step_s(traces[s.name]) for s in sites)
    grids = {s.name: _grid(traces[s.name], replay_from, end, common_step) for s in sites}
    t0, step, _ = grids[sites[0].name]
    if any((g[0], g[1], len(g[2])) != (t0, step, len(grids[sites[0].name][2])) for g in grids.values()):
        raise PolicyError("the sites' traces must share one time grid (same start and step); resample them first")
    results: dict[str, SimulationResult] = {}
    for site in sites:
        allowed = modes_at_site(site, modes, job.gpus)
        if policy.rules.clean_mode not in {m.name for m in allowed}:
            raise PolicyError(f"sites: {site.name}: its power cap leaves out the reference mode "
                              f"{policy.rules.clean_mode!r}, which the comparison's baselines run in")
        results[site.name] = simulate(policy, _on_grid(*grids[site.name], site.name), allowed,
                                      _forecaster(forecast, step), forecast_label=forecast,
                                      strategies=("baseline", "static_efficiency", "gridshift", "oracle"),
                                      progress=lambda done, total, at=site.name: tell(done, total, f"site {at}"))
    home = sites[0].name
    lo_s, hi_s = (start - t0).total_seconds(), (end - t0).total_seconds()
    counted = [k for k, j in enumerate(results[home].baseline)
               if j.nominal_s + min(job.earliest_start_s, 0.0) >= lo_s - 1e-6 and j.deadline_s <= hi_s + 1e-6]
    counted = counted[:limit] if limit is not None else counted
    jobs = len(counted)
    reference = next(m for m in modes if m.name == policy.rules.clean_mode)
    fixed = where_only = where_when = oracle = 0.0
    misses = 0
    share = {s.name: 0 for s in sites}
    for placed_jobs, k in enumerate(counted, start=1):
        tell(placed_jobs, len(counted), "placing")
        nominal_s = results[home].baseline[k].nominal_s
        nominal = t0 + timedelta(seconds=nominal_s)
        opens_s = nominal_s + job.earliest_start_s
        deadline_s = nominal_s + job.deadline_s
        fixed += results[home].baseline[k].carbon_g
        # where-only: the site forecast cleanest at the nominal time for a reference-mode run from then
        run_end_s = nominal_s + job.expected_duration_s / reference.speed
        at_nominal = {s.name: _forecast_series(_forecaster(forecast, step), grids[s.name][2], t0, step, nominal_s,
                                               run_end_s, s.name).mean_over(nominal, t0 + timedelta(seconds=run_end_s))
                      for s in sites}
        where_only += results[min(at_nominal, key=lambda n: at_nominal[n] if at_nominal[n] is not None else float("inf"))].baseline[k].carbon_g
        # where+when: the product's placement on the forecast issued at the window's opening
        forecasts = {s.name: _forecast_series(_forecaster(forecast, step), grids[s.name][2], t0, step, opens_s,
                                              deadline_s, s.name) for s in sites}
        opens = t0 + timedelta(seconds=opens_s)
        placed = place_run(policy, forecasts, modes, now=opens, not_before=opens,
                           deadline=t0 + timedelta(seconds=deadline_s), reference_start=nominal)
        outcome = results[placed.site].gridshift[k]
        where_when += outcome.carbon_g
        misses += outcome.late
        share[placed.site] += 1
        oracle += min(results[s.name].oracle[k].carbon_g for s in sites)
    return SitesComparison(
        jobs=jobs, start=start, end=end, home=home, forecast=forecast, fixed_g=fixed, where_only_g=where_only,
        static_efficiency_g={s.name: sum(results[s.name].outcomes["static_efficiency"][k].carbon_g for k in counted)
                             for s in sites},
        when_only_g={s.name: sum(results[s.name].gridshift[k].carbon_g for k in counted) for s in sites},
        where_when_g=where_when, oracle_g=oracle, site_share={k: v / jobs if jobs else 0.0 for k, v in share.items()},
        deadline_misses=misses, energy_source="; ".join(sorted({m.source for m in modes})))
