"""Several runs a night at one power-capped site, over a real trace: the cap held, deadlines, carbon.

Each night (an occurrence of the policy's cron) ``runs`` copies of the job arrive when their window
opens, one after another, at one site whose ``power_cap_w`` is below their summed speed-mode power.
Every plan is made on the forecast issued at the opening (the trace itself with ``forecast="perfect"``,
else the flow's daily-profile forecaster on past data) and run as planned; carbon is charged on the
real trace. Strategies, per night:

- **uncapped**: each run planned alone, as if there were no cap (what the cap costs; its slots over
  the cap are counted, not prevented);
- **one after another**: placement as it books runs, each in the cap less the runs before it;
- **gridshift**: that, then :func:`scheduler.service.joint.plan_together` where it misses a deadline;
- **exact** (``exact=True``, a MILP per night: ``benchmarks/exact_site_cap.py``-style, here the
  product's own :mod:`scheduler.service.joint_exact` for feasibility): whether a plan meeting every
  deadline exists at all, so a miss is counted as gridshift's only where one does.

``events`` (grid events at the site, :class:`carbon.events.GridEvent`) lower the site's cap while they
last, for every strategy but "uncapped": a cap of W gives W; a reduction of P % gives the site's cap
less P %. They are modelled as known when the night's window opens (an event announced ahead, as
OpenADR capacity events and ERCOT's emergency days were); a run answering one announced mid-run is
``gridshift run``'s (``flows/cap_watch.py``). The cap each slot is checked against is the lowest in force.

Power and speed per mode are the figures given (modelled unless a measured profile gave them); the
intensities are the real trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from carbon.series import IntensitySeries
from scheduler.errors import PolicyError
from scheduler.planner import ModeFigures, RunPlan
from scheduler.planner.power_cap import PowerCap
from scheduler.policy.cron import cron_occurrences
from scheduler.policy.types import Policy
from scheduler.service.joint import CapRun, JointPlan, one_site, plan_in_order, plan_together
from scheduler.service.placement import Booking, forecast_mean_g_per_kwh, site_headroom

if TYPE_CHECKING:  # pragma: no cover
    from carbon.events import GridEvent

__all__ = ["SiteCapResult", "simulate_site_cap"]

STRATEGIES = ("uncapped", "one after another", "gridshift")


@dataclass
class SiteCapResult:
    """Totals per strategy over the nights (modelled power, real intensities)."""

    site: str
    cap_w: float
    runs: int
    nights: int = 0
    carbon_g: dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STRATEGIES})
    misses: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STRATEGIES})
    slots_over_cap: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STRATEGIES})
    slots: int = 0
    joint_used: dict[str, int] = field(default_factory=dict)   # how gridshift's joint plans were found
    exact_feasible_nights: int | None = None                   # nights where a plan meets every deadline
    misses_where_feasible: int | None = None                   # gridshift's misses on those nights
    exact_unknown_nights: int = 0                              # nights the solver could not decide in time
    max_power_w: float = 0.0                                   # gridshift's highest summed power in a slot
    event_nights: int = 0                                      # nights an event touched
    event_slots: int = 0                                       # slots under an event's lower cap
    energy_source: str = ""

    def summary(self) -> dict[str, Any]:
        return {"site": self.site, "cap_w": self.cap_w, "runs_per_night": self.runs, "nights": self.nights,
                "carbon_g": dict(self.carbon_g), "misses": dict(self.misses),
                "slots_over_cap": dict(self.slots_over_cap), "slots": self.slots,
                "cap_held_in_every_slot": self.slots_over_cap["gridshift"] == 0,
                "max_power_w": self.max_power_w, "joint_plans": dict(self.joint_used),
                "exact_feasible_nights": self.exact_feasible_nights,
                "misses_where_feasible": self.misses_where_feasible, "exact_unknown_nights": self.exact_unknown_nights,
                "event_nights": self.event_nights, "event_slots": self.event_slots,
                "modelled": True,
                "energy_source": self.energy_source}


def _slot_power(plans: Sequence[RunPlan], power: dict[str, float], start: datetime, slot_s: float, n: int) -> np.ndarray:
    """Summed power in each slot (the highest moment of it: any segment touching it counts in full)."""
    out = np.zeros(n)
    for plan in plans:
        for s in plan.segments:
            a = int((s.start - start).total_seconds() // slot_s)
            b = int(np.ceil((s.end - start).total_seconds() / slot_s - 1e-9))
            out[max(a, 0):min(b, n)] += power.get(s.mode, 0.0)
    return out


def _grams(plans: Sequence[RunPlan], truth: IntensitySeries) -> float:
    return sum(s.energy_j / 3.6e6 * (forecast_mean_g_per_kwh(truth, [(s.start, s.end)]) or 0.0)
               for p in plans for s in p.segments)


def _event_bookings(events: Sequence["GridEvent"], site: str, cap: float, opens: datetime,
                    deadline: datetime) -> list[Booking]:
    """The events in force in ``[opens, deadline)``, each as power booked at the site (the cap less the
    event's), so the placement and the exact plan see the headroom the event leaves."""
    out = []
    for e in events:
        if e.scope not in ("machine", f"site:{site}") or not (e.start < deadline and (e.end is None or opens < e.end)):
            continue
        limit = e.cap_w if e.cap_w is not None else cap * (1 - (e.reduce_pct or 0.0) / 100)
        a, b = max(e.start, opens), min(e.end or deadline, deadline)
        if limit < cap:
            out.append(Booking(site, a, b, 0, power=((a, b, cap - limit),)))
    return out


def simulate_site_cap(policy: Policy, site: str, truth: IntensitySeries, modes: Sequence[ModeFigures], *,
                      runs: int, events: Sequence["GridEvent"] = (),
                      forecast: Callable[[datetime, datetime], IntensitySeries] | None = None,
                      limit: int | None = None, exact: bool = False,
                      progress: Callable[[int, int, str], None] | None = None) -> SiteCapResult:
    """Replay ``runs`` copies of ``policy``'s job a night at ``site`` over ``truth`` (see the module docstring).

    ``forecast(at, until)``: the forecast issued at ``at`` (default: the truth, perfect foresight).
    ``modes``: the policy's figures and, for the cap, the power limits between them (``only_under_cap``).
    """
    pol = one_site(policy, site)
    if not pol.sites or pol.sites[0].power_cap_w is None:
        raise PolicyError(f"sites: {site} needs a power_cap_w for a capped-site simulation")
    job = pol.job
    if job.cron is None or job.deadline_s is None:
        raise PolicyError("job.cron and job.deadline_s: the simulation replays a recurring job with a deadline")
    cap, slot = float(pol.sites[0].power_cap_w), pol.rules.slot_s
    seen = forecast or (lambda at, until: truth)
    nominals = [t for t in cron_occurrences(job.cron, truth.start - timedelta(seconds=job.earliest_start_s),
                                            truth.end - timedelta(seconds=job.deadline_s), tz=job.timezone)]
    nominals = nominals[:limit] if limit is not None else nominals
    out = SiteCapResult(site=site, cap_w=cap, runs=runs, energy_source="; ".join(sorted({m.source for m in modes})))
    if exact:
        out.exact_feasible_nights, out.misses_where_feasible = 0, 0
    power = {m.name: m.power_w for m in modes}
    uncapped = pol.model_copy(update={"sites": (pol.sites[0].model_copy(update={"power_cap_w": None}),)})
    for k, nominal in enumerate(nominals, start=1):
        if progress is not None:
            progress(k, len(nominals), "nights")
        opens = nominal + timedelta(seconds=job.earliest_start_s)
        deadline = nominal + timedelta(seconds=job.deadline_s)
        series = seen(opens, deadline)
        held = _event_bookings(events, site, cap, opens, deadline)
        asks = [CapRun(f"run{i}", pol, series, job.expected_duration_s, opens, deadline, nominal) for i in range(runs)]
        alone = [CapRun(a.key, uncapped, series, a.work_s, opens, deadline, nominal) for a in asks]
        plans: dict[str, JointPlan] = {
            "uncapped": JointPlan(tuple(plan_in_order([a], [0], modes, now=opens).plans[0] for a in alone), (), "alone"),
            "one after another": plan_in_order(asks, range(runs), modes, now=opens, fixed=held,
                                               how="in the order they came"),
        }
        plans["gridshift"] = plan_together(asks, modes, now=opens, fixed=held)
        out.joint_used[plans["gridshift"].how] = out.joint_used.get(plans["gridshift"].how, 0) + 1
        n = int(np.ceil((deadline - opens).total_seconds() / slot)) + 1
        # the cap in force in each slot: the lowest of the site's and the events' (changeover not counted)
        limit = np.minimum(cap, (site_headroom(pol.sites[0].model_copy(update={"changeover_s": 0}), held)
                                 or PowerCap()).slot_headroom(opens, slot, n))
        out.event_nights += bool(held)
        out.event_slots += int(np.sum(limit < cap - 1e-6))
        for name, jp in plans.items():
            load = _slot_power(jp.plans, power, opens, slot, n)
            out.carbon_g[name] += _grams(jp.plans, truth)
            out.misses[name] += jp.misses
            out.slots_over_cap[name] += int(np.sum(load > limit + 1e-6))
            if name == "gridshift":
                out.max_power_w = max(out.max_power_w, float(load.max()))
        out.slots += n
        out.nights += 1
        if exact:
            from scheduler.service.joint_exact import plan_exists

            due = deadline - timedelta(seconds=getattr(pol.rules, "deadline_margin_s", 0.0))  # what the planner plans for
            found = plan_exists([(opens, due, job.expected_duration_s, job.gpus)] * runs, modes,
                                site_headroom(pol.sites[0], held) or PowerCap(), now=opens, slot_s=slot,
                                gpus_free=pol.sites[0].gpus_per_node)
            if found is None:
                out.exact_unknown_nights += 1
            elif found:
                assert out.exact_feasible_nights is not None and out.misses_where_feasible is not None
                out.exact_feasible_nights += 1
                out.misses_where_feasible += plans["gridshift"].misses
    return out
