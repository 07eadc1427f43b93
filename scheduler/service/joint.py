"""Several runs at one capped site, planned together when one after another would miss a deadline. Pure.

Placement books runs one at a time (:func:`scheduler.service.placement.place_run`): each is planned in
the site's power cap less what the runs before it booked. That greedy order can miss a deadline a
joint plan meets: the first run takes the clean hours at full power, and the next, due soon, finds
too little headroom left. :func:`plan_together` re-plans the runs not started yet, in this order:

1. the order they came in (what placement did);
2. earliest deadline first, then least slack first (the runs with the least room to move go first);
3. from the better of those, "squeaky wheel" rounds: the first run that misses moves to the front;
4. frugal: in those two orders, each run planned for the least energy (on a flat forecast), so it
   leaves the most headroom to the next; the last run still plans for carbon;
5. a fair split: each run planned in its GPUs' share of the cap, the rest of the site's runs taking
   theirs (always within the cap; it meets every deadline that fits in a share);
6. the exact answer (:mod:`scheduler.service.joint_exact`, a MILP): if any plan meets every deadline,
   its power per run and slot is reserved, and each run is planned inside the cap less the others'
   reservations, which leaves room for its own; if the planner cannot follow it (its minimum dwell),
   the exact plan with one mode per run and the site's changeover after each run.

Every candidate is the product's placement run per run (the same planner, the same headroom); the
first with no miss in that order wins (the least carbon among the orders of step 2 when several have
none), else the one with the fewest misses. ``tests/fleet/test_site_cap.py`` checks it against an
exact MILP of the joint problem (``benchmarks/exact_site_cap.py``) on small cases.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Mapping, Sequence

from carbon.series import IntensitySeries
from scheduler.planner import ModeFigures, RunPlan
from scheduler.service.placement import Booking, forecast_mean_g_per_kwh, place_run
from scheduler.policy.types import Policy

__all__ = ["CapRun", "JointPlan", "one_site", "plan_in_order", "plan_together"]


@dataclass(frozen=True)
class CapRun:
    """One run to place at the site: its policy (the site's only), forecast, work and window."""

    key: str
    policy: Policy
    series: IntensitySeries
    work_s: float
    not_before: datetime
    deadline: datetime
    reference_start: datetime | None = None


@dataclass(frozen=True)
class JointPlan:
    """A plan per run (in the runs' own order), and how it was found."""

    plans: tuple[RunPlan, ...]
    bookings: tuple[Booking, ...]
    how: str

    @property
    def misses(self) -> int:
        return sum(not p.feasible for p in self.plans)

    carbon: tuple[float, ...] = ()  # each plan's grams on its run's own forecast

    @property
    def carbon_g(self) -> float:
        return sum(self.carbon) if self.carbon else sum(p.carbon_g for p in self.plans)


Reservation = tuple[tuple[datetime, datetime, float], ...]


def _held(run: CapRun, power: Reservation, site: str) -> Booking:
    """Another run's reservation (its fair share, or the exact plan's power), as a booking."""
    return Booking(site, run.not_before, run.deadline, run.policy.job.gpus, power=power)


def _flat(series: IntensitySeries) -> IntensitySeries:
    """``series`` at its mean everywhere: the planner on it spends the least energy."""
    mean = sum(p.g_per_kwh for p in series) / max(len(series), 1)
    return IntensitySeries.of((replace(p, g_per_kwh=mean) for p in series), zone=series.zone)


def _grams(plan: RunPlan, series: IntensitySeries) -> float:
    """The plan's carbon on ``series`` (its segments' energy at the series' mean over each)."""
    return sum(s.energy_j / 3.6e6 * (forecast_mean_g_per_kwh(series, [(s.start, s.end)]) or 0.0) for s in plan.segments)


def plan_in_order(runs: Sequence[CapRun], order: Sequence[int], modes: Sequence[ModeFigures], *, now: datetime,
                  fixed: Sequence[Booking] = (), reserve: Mapping[int, Reservation] | None = None,
                  frugal: bool = False, how: str = "") -> JointPlan:
    """Place ``runs`` at their one site one after another in ``order``; each books its plan's power.

    ``reserve`` (run index -> its power per span): plan each run as if every run not placed yet took
    its reservation (a fair share, or the exact plan's). ``frugal``: every run but the last planned
    for the least energy."""
    site = runs[0].policy.sites[0]
    bookings = list(fixed)
    plans: dict[int, RunPlan] = {}
    for k, i in enumerate(order):
        r = runs[i]
        held = bookings
        if reserve is not None:
            held = bookings + [_held(runs[j], reserve[j], site.name) for j in order[k + 1:]]
        series = _flat(r.series) if frugal and k + 1 < len(order) else r.series
        placed = place_run(r.policy, {site.name: series}, modes, now=now, not_before=r.not_before,
                           deadline=r.deadline, work_s=r.work_s, reference_start=r.reference_start, bookings=held)
        plans[i] = placed.plan
        for start, end in placed.plan.windows():
            power = tuple(p for p in placed.power if start <= p[0] < end)
            bookings.append(Booking(site.name, start, end, r.policy.job.gpus, power=power))
    return JointPlan(tuple(plans[i] for i in range(len(runs))), tuple(bookings[len(fixed):]), how,
                     tuple(_grams(plans[i], runs[i].series) for i in range(len(runs))))


def _slack_s(run: CapRun, modes: Sequence[ModeFigures]) -> float:
    fastest = max(m.speed for m in modes)
    return (run.deadline - run.not_before).total_seconds() - run.work_s / fastest


def _better(a: JointPlan, b: JointPlan | None) -> bool:
    return b is None or (a.misses, a.carbon_g) < (b.misses, b.carbon_g)


def plan_together(runs: Sequence[CapRun], modes: Sequence[ModeFigures], *, now: datetime,
                  fixed: Sequence[Booking] = (), rounds: int | None = None) -> JointPlan:
    """The runs planned together at their site (see the module docstring); ``fixed``: runs started already."""
    n = len(runs)
    arrival = plan_in_order(runs, range(n), modes, now=now, fixed=fixed, how="in the order they came")
    if arrival.misses == 0 or n < 2:
        return arrival
    best: JointPlan | None = None
    for how, order in (("earliest deadline first", sorted(range(n), key=lambda i: (runs[i].deadline, i))),
                       ("least slack first", sorted(range(n), key=lambda i: (_slack_s(runs[i], modes), i)))):
        cand = plan_in_order(runs, order, modes, now=now, fixed=fixed, how=how)
        if _better(cand, best):
            best, start = cand, list(order)
    assert best is not None
    order = start
    for _ in range(rounds if rounds is not None else 2 * n):
        if best.misses == 0:
            return best
        late = next(i for i in order if not best.plans[i].feasible)
        order = [late] + [i for i in order if i != late]
        cand = plan_in_order(runs, order, modes, now=now, fixed=fixed, how="the late run first (squeaky wheel)")
        if _better(cand, best):
            best = cand
    if best.misses == 0:
        return best
    for how, order in (("frugal, earliest deadline first", sorted(range(n), key=lambda i: (runs[i].deadline, i))),
                       ("frugal, least slack first", sorted(range(n), key=lambda i: (_slack_s(runs[i], modes), i)))):
        cand = plan_in_order(runs, order, modes, now=now, fixed=fixed, frugal=True, how=how)
        if _better(cand, best):
            best = cand
        if best.misses == 0:
            return best
    site = runs[0].policy.sites[0]
    edf = sorted(range(n), key=lambda i: (runs[i].deadline, i))
    if site.power_cap_w is not None:
        total = sum(r.policy.job.gpus for r in runs)
        shares = {i: ((runs[i].not_before, runs[i].deadline, site.power_cap_w * runs[i].policy.job.gpus / total),)
                  for i in range(n)}
        fair = plan_in_order(runs, edf, modes, now=now, fixed=fixed, reserve=shares, how="a fair split of the cap by GPUs")
        if _better(fair, best):
            best = fair
        if best.misses:
            best = _exact(runs, modes, now=now, fixed=fixed, order=edf, best=best)
    return best if _better(best, arrival) else arrival


def _exact(runs: Sequence[CapRun], modes: Sequence[ModeFigures], *, now: datetime, fixed: Sequence[Booking],
           order: Sequence[int], best: JointPlan) -> JointPlan:
    """Step 6: the runs planned inside the others' reservations from the exact joint plan, if there is one."""
    from scheduler.planner.grid import slot_intensity
    from scheduler.service.joint_exact import reservations
    from scheduler.service.placement import site_headroom

    site, slot = runs[0].policy.sites[0], runs[0].policy.rules.slot_s
    room = site_headroom(site, fixed)
    if room is None:
        return best
    horizon = max(int((r.deadline - now).total_seconds() // slot) for r in runs)
    # the deadline the planner plans for: the policy's margin before the run's deadline
    due = [r.deadline - timedelta(seconds=getattr(r.policy.rules, "deadline_margin_s", 0.0)) for r in runs]
    windows = [(r.not_before, d, r.work_s, r.policy.job.gpus) for r, d in zip(runs, due)]
    weights = slot_intensity(runs[0].series, now, slot, max(horizon, 1))
    # first the least constrained joint plan; where the planner cannot follow it (the MILP switches modes
    # every slot, the planner keeps a minimum dwell), one mode per run with the changeover after each
    for how, steady in (("", False), (", one mode per run", True)):
        reserved = reservations(windows, modes, room, now=now, slot_s=slot,
                                gpus_free=site.gpus_per_node - sum(b.gpus for b in fixed), weights=weights,
                                time_limit_s=10.0, steady=steady, changeover=steady and site.changeover_s > 0)
        if reserved is None:
            continue
        cand = plan_in_order(runs, order, modes, now=now, fixed=fixed, reserve=dict(enumerate(reserved)),
                             how=f"inside the exact joint plan's reservations (MILP{how})")
        if _better(cand, best):
            best = cand
        if best.misses == 0:
            break
    return best


def one_site(policy: Policy, site: str) -> Policy:
    """``policy`` with only the site ``site`` (what a run placed there is planned with)."""
    return policy.model_copy(update={"sites": tuple(s for s in policy.sites if s.name == site)})

