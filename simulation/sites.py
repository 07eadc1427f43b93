"""Where and when, replayed: a recurring job over real traces of two or more sites' grids, same period.

For every cron occurrence whose whole window lies inside every site's trace, four strategies run the
same job (``expected_duration_s`` of work in reference-mode seconds) and are charged exactly on the
real traces:

- **fixed**: the first-listed (home) site, start at the nominal time, reference mode;
- **where-only**: the site that is cleanest for a run starting at the nominal time, reference mode;
- **when-only**: one site, start and modes from the exact planner inside the window (printed for
  every site; the *best* single site is the simple alternative that where+when is credited against);
- **where+when**: :func:`scheduler.placement.place_run`, the planner at every site, best plan wins.

All strategies see the same perfect forecast (the trace itself), so the comparison isolates the
levers, not forecast skill; with perfect foresight where+when can never lose to the others (it
chooses among their plans), and a negative saving would be a bug. Power and speed per mode come
from a :class:`simulation.simulate.ModeModel`, so every figure is **modelled**.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from carbon.series import IntensitySeries
from scheduler.cron import cron_occurrences
from scheduler.errors import PolicyError
from scheduler.placement import place_run
from scheduler.planner import ModeFigures, PlanConstraints, PlanJob, RunPlan, plan_run
from scheduler.policy import Policy
from simulation.simulate import ModeModel

__all__ = ["SitesComparison", "compare_sites", "mode_figures_of"]


def mode_figures_of(model: ModeModel) -> list[ModeFigures]:
    """The planner's mode figures from a simulator mode model (speed is the inverse of the time factor)."""
    return [ModeFigures(name=name, power_w=model.power_w[name], speed=1.0 / model.slowdown[name], source=model.source,
                        measured=not model.modelled) for name in model.power_w]


@dataclass(frozen=True)
class SitesComparison:
    """Total grams of CO2 per strategy over ``jobs`` occurrences (all modelled)."""

    jobs: int
    start: datetime
    end: datetime
    home: str
    fixed_g: float
    where_only_g: float
    when_only_g: dict[str, float]
    where_when_g: float
    site_share: dict[str, float]  # fraction of where+when runs placed at each site

    @property
    def best_when_only(self) -> str:
        return min(self.when_only_g, key=self.when_only_g.__getitem__)

    def summary(self) -> dict[str, Any]:
        best = self.best_when_only

        def saving(g: float) -> float:
            return 100.0 * (g - self.where_when_g) / g if g > 0 else 0.0

        return {"jobs": self.jobs, "period_start": self.start.isoformat(), "period_end": self.end.isoformat(),
                "home_site": self.home, "fixed_g": self.fixed_g, "where_only_g": self.where_only_g,
                "when_only_g": dict(self.when_only_g), "best_when_only_site": best,
                "where_when_g": self.where_when_g, "site_share": dict(self.site_share),
                "saving_vs_fixed_pct": saving(self.fixed_g), "saving_vs_where_only_pct": saving(self.where_only_g),
                "saving_vs_best_when_only_pct": saving(self.when_only_g[best]),
                "modelled": True, "forecast": "perfect (the trace itself) for every strategy"}


def _fixed_start(series: IntensitySeries, job: PlanJob, reference: ModeFigures, now: datetime,
                 slot_s: float) -> RunPlan:
    """The reference mode from the nominal start: the planner with no room to move."""
    tight = PlanJob(work_s=job.work_s, not_before=job.not_before,
                    deadline=job.not_before + timedelta(seconds=job.work_s / reference.speed))
    return plan_run(series, tight, [reference], now=now, constraints=PlanConstraints(slot_s=slot_s))


def compare_sites(policy: Policy, traces: Mapping[str, IntensitySeries], model: ModeModel, *,
                  slot_s: float | None = None, limit: int | None = None, period: tuple[datetime, datetime] | None = None,
                  ) -> SitesComparison:
    """Replay ``policy``'s recurring job at every site of ``traces`` (site name -> its real trace).

    ``period`` restricts the occurrences to those whose window lies in ``[start, end)``.
    """
    job = policy.job
    sites = [s for s in policy.sites if s.name in traces]
    if len(sites) < 2:
        raise PolicyError("a sites comparison needs a trace for at least two of the policy's sites")
    if job.cron is None or job.deadline_s is None:
        raise PolicyError("job.cron and job.deadline_s: the comparison replays a recurring job with a deadline")
    modes = mode_figures_of(model)
    reference = next(m for m in modes if m.name == policy.rules.clean_mode)
    slot = float(slot_s if slot_s is not None else getattr(policy.rules, "slot_s", 300.0))
    start = max(traces[s.name].start for s in sites)
    end = min(traces[s.name].end for s in sites)
    if period is not None:
        start, end = max(start, period[0]), min(end, period[1])
    first = start - timedelta(seconds=min(job.earliest_start_s, 0.0))
    nominals = [n for n in cron_occurrences(job.cron, first, end - timedelta(seconds=job.deadline_s))]
    if limit is not None:
        nominals = nominals[:limit]
    fixed = where_only = where_when = 0.0
    when_only = {s.name: 0.0 for s in sites}
    share = {s.name: 0 for s in sites}
    for nominal in nominals:
        opens = nominal + timedelta(seconds=job.earliest_start_s)
        plan_job = PlanJob(work_s=job.expected_duration_s, not_before=opens, deadline=nominal + timedelta(seconds=job.deadline_s))
        at_nominal = PlanJob(work_s=job.expected_duration_s, not_before=nominal, deadline=plan_job.deadline)
        now = min(opens, nominal)
        nominal_costs = {s.name: _fixed_start(traces[s.name], at_nominal, reference, now, slot).carbon_g for s in sites}
        fixed += nominal_costs[sites[0].name]
        where_only += min(nominal_costs.values())
        placed = place_run(sites, {s.name: traces[s.name] for s in sites}, plan_job, modes, gpus=job.gpus, now=now,
                           constraints=PlanConstraints(slot_s=slot))
        for p in placed.sites:
            if p.plan is not None:
                when_only[p.site] += p.plan.carbon_g
        where_when += placed.plan.carbon_g
        share[placed.site] += 1
    n = len(nominals)
    return SitesComparison(jobs=n, start=start, end=end, home=sites[0].name, fixed_g=fixed, where_only_g=where_only,
                           when_only_g=when_only, where_when_g=where_when,
                           site_share={k: v / n if n else 0.0 for k, v in share.items()})

