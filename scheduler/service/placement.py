"""Where and when together: the planner run once per site, the best plan wins. Pure.

For each site the planner, asked the policy's question (:func:`scheduler.planner.inputs.plan_policy_job`:
the policy's objective, constraints, ``min_gain`` and no-deadline rule, as for a run without sites),
plans the job on that site's forecast, only at times the site's node has the GPUs free, and under
the site's power cap: ``bookings`` are the runs already placed (start, end, GPUs, and the power they
booked per segment); times where they leave fewer than the job's GPUs free are priced out of the
site's forecast, so the planner plans around them (and, where it cannot, the start moves past them),
and the site's ``power_cap_w`` less their booked power is the job's headroom in every slot
(:func:`site_headroom`, kept by the planner: :mod:`scheduler.planner.power_cap`). The placed run
books its own power per segment (:func:`booked_power`) for the next. The plans are then compared on the
planner's own objective (carbon + price of time); a feasible plan beats an infeasible one, the
sooner start, then price break ties, then the order of the sites in the policy. Without a deadline
(a run meant to start now) the sooner start comes first and carbon second. The result says why, with each site's plan
and the forecast it was made on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Mapping, Sequence

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.planner import ModeFigures, Objective, RunPlan
from scheduler.planner.inputs import plan_policy_job
from scheduler.planner.power_cap import CapWindow, PowerCap
from scheduler.policy.types import Policy, Site

__all__ = ["Booking", "SitePlan", "Placement", "booked_power", "has_room", "modes_at_site", "place_run",
           "objective_value", "forecast_mean_g_per_kwh", "site_headroom"]


@dataclass(frozen=True)
class Booking:
    """GPUs of one site's node taken from ``start`` to ``end`` by a run already placed."""

    site: str
    start: datetime
    end: datetime
    gpus: int
    #: placed to start as soon as the node had GPUs free, and waiting in line for them: a later
    #: run meant to start now does not start on this node before it (arrival order)
    queued: bool = False
    #: the GPU power it booked, (start, end, W) per segment; empty: not known (a run placed before
    #: power was booked), counted as its GPUs' share of the site's cap throughout
    power: tuple[tuple[datetime, datetime, float], ...] = ()


@dataclass(frozen=True)
class SitePlan:
    """The best plan at one site (None when no mode is allowed there), and what it was based on."""

    site: str
    plan: RunPlan | None
    forecast_mean_g_per_kwh: float | None  # over the planned run windows
    waited_for_gpus: bool                  # the node was full at a better time
    reason: str


@dataclass(frozen=True)
class Placement:
    """The chosen site and plan, every site's plan, and one sentence per choice."""

    site: str
    plan: RunPlan
    sites: tuple[SitePlan, ...]
    reasons: tuple[str, ...]
    #: a run meant to start now that waits for the chosen node's GPUs (see :attr:`Booking.queued`)
    queued: bool = False
    #: the GPU power the chosen plan books, (start, end, W) per segment (:func:`booked_power`)
    power: tuple[tuple[datetime, datetime, float], ...] = ()


def objective_value(plan: RunPlan, now: datetime, objective: Objective) -> float:
    """The planner's objective for ``plan``: grams of CO2 plus the price of the hours until it finishes."""
    hours = max((plan.finish - now).total_seconds(), 0.0) / 3600.0
    return plan.carbon_g + objective.time_value_g_per_h * hours


def forecast_mean_g_per_kwh(series: IntensitySeries, windows: Sequence[tuple[datetime, datetime]]) -> float | None:
    """Time-weighted mean of ``series`` over ``windows`` (None when the series covers none of them)."""
    total_s = weighted = 0.0
    for start, end in windows:
        for p in series:
            lo, hi = max(start, p.start), min(end, p.start + p.duration)
            if hi > lo:
                s = (hi - lo).total_seconds()
                total_s += s
                weighted += s * p.g_per_kwh
    return weighted / total_s if total_s > 0 else None


def modes_at_site(site: Site, modes: Sequence[ModeFigures], gpus: int) -> list[ModeFigures]:
    """The modes a job may use at ``site`` at all (none drawing more than its whole power cap)."""
    if site.power_cap_w is None:
        return list(modes)
    return [m for m in modes if m.power_w <= site.power_cap_w + 1e-9]


def booked_power(plan: RunPlan, modes: Sequence[ModeFigures]) -> tuple[tuple[datetime, datetime, float], ...]:
    """The power a placed run books: (start, end, W) per segment of its plan, from its modes' figures."""
    power = {m.name: m.power_w for m in modes}
    return tuple((s.start, s.end, power[s.mode]) for s in plan.segments if s.mode in power)


def site_headroom(site: Site, bookings: Sequence[Booking]) -> PowerCap | None:
    """``site``'s power cap less the power the runs placed there booked, over time (None: no cap).

    A booking without its power counts its GPUs' share of the cap throughout; booked segments count
    from their start to their end, the last one plus the site's changeover (a run that starts a little late)."""
    cap = site.power_cap_w
    if cap is None:
        return None
    pad = timedelta(seconds=site.changeover_s)
    pieces: list[tuple[datetime, datetime, float]] = []
    for b in bookings:
        if b.site != site.name:
            continue
        if b.power:
            # the changeover follows the run's end only (a piece that ends where the next begins is not padded:
            # that would count the run twice at every mode change)
            last = max(e for _, e, _ in b.power)
            pieces += [(a, e + pad if e >= last else e, w) for a, e, w in b.power]
        else:
            pieces.append((b.start, b.end + pad, cap * b.gpus / site.gpus_per_node))
    windows = [CapWindow(cap, f"site {site.name}'s power cap of {cap:.0f} W")]
    edges = sorted({t for a, e, _ in pieces for t in (a, e)})
    for lo, hi in zip(edges, edges[1:]):
        used = sum(w for a, e, w in pieces if a <= lo < e)
        if used > 0:
            windows.append(CapWindow(max(cap - used, 0.0), f"site {site.name}'s power cap of {cap:.0f} W less "
                                     f"{used:.0f} W booked by the runs placed there", lo, hi))
    return PowerCap(tuple(windows))


def _node_bookings(site: Site, bookings: Sequence[Booking]) -> list[Booking]:
    # a booking lasts the site's changeover past its planned finish: a run that started a little late
    # (worker pick-up, process start) must not find the next run's GPUs still taken
    pad = timedelta(seconds=site.changeover_s)
    return [replace(b, end=b.end + pad) for b in bookings if b.site == site.name]


def _full_intervals(site: Site, gpus: int, mine: Sequence[Booking]) -> list[tuple[datetime, datetime]]:
    """Where the node has fewer than ``gpus`` GPUs free (a sweep over the bookings' edges)."""
    edges = sorted({t for b in mine for t in (b.start, b.end)})
    out: list[tuple[datetime, datetime]] = []
    for lo, hi in zip(edges, edges[1:]):
        if sum(b.gpus for b in mine if b.start <= lo < b.end) + gpus > site.gpus_per_node:
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return out


def has_room(site: Site, gpus: int, bookings: Sequence[Booking], start: datetime, end: datetime) -> bool:
    """Whether ``site``'s node has ``gpus`` GPUs free through ``[start, end)`` beside ``bookings`` (changeover included)."""
    return not any(lo < end and start < hi for lo, hi in _full_intervals(site, gpus, _node_bookings(site, bookings)))


def _conflict(plan: RunPlan, full: Sequence[tuple[datetime, datetime]]) -> datetime | None:
    """The end of the first full interval the plan runs into, or None when it fits."""
    for start, end in plan.windows():
        for lo, hi in full:
            if lo < end and start < hi:
                return hi
    return None


#: intensity given to times the node is full, so the planner avoids them whenever it can (g/kWh)
_FULL_G_PER_KWH = 1e6


def _masked(series: IntensitySeries, full: Sequence[tuple[datetime, datetime]]) -> IntensitySeries:
    """``series`` with the full intervals priced out (split at their edges; extended past the series' end)."""
    if not full:
        return series
    points: list[IntensityPoint] = []
    for p in series:
        cuts = sorted({p.start, p.end, *(t for lo, hi in full for t in (lo, hi) if p.start < t < p.end)})
        for lo, hi in zip(cuts, cuts[1:]):
            inside = any(a <= lo and hi <= b for a, b in full)
            points.append(replace(p, start=lo, duration=hi - lo, g_per_kwh=_FULL_G_PER_KWH if inside else p.g_per_kwh))
    last = series.points[-1] if series.points else None
    for lo, hi in full:
        if last is not None and hi > last.end:
            begin = max(lo, last.end)
            points.append(replace(last, start=begin, duration=hi - begin, g_per_kwh=_FULL_G_PER_KWH))
    points.sort(key=lambda q: q.start)
    if last is not None and full[-1][1] >= last.end:  # past the masks, the last real value carries on
        points.append(replace(last, start=max(full[-1][1], last.end), duration=last.duration))
    return IntensitySeries.of(points, zone=series.zone)


@dataclass(frozen=True)
class _Ask:
    """The question put to the planner at every site (the same for all of them)."""

    policy: Policy
    work_s: float
    not_before: datetime
    deadline: datetime | None
    reference_start: datetime | None
    now: datetime

    def plan(self, series: IntensitySeries, modes: Sequence[ModeFigures], not_before: datetime,
             cap: PowerCap | None = None) -> RunPlan:
        return plan_policy_job(self.policy, series, modes, now=self.now, work_s=self.work_s, not_before=not_before,
                               deadline=self.deadline, reference_start=self.reference_start, power_cap=cap)


def _plan_at_site(site: Site, series: IntensitySeries, ask: _Ask, modes: Sequence[ModeFigures],
                  bookings: Sequence[Booking], *, static: bool = False) -> SitePlan:
    gpus = ask.policy.job.gpus
    allowed = modes_at_site(site, modes, gpus)
    if not allowed:
        return SitePlan(site.name, None, None, False,
                        f"{site.name}: no mode fits its power cap of {site.power_cap_w:g} W")
    full = _full_intervals(site, gpus, _node_bookings(site, bookings))
    headroom = site_headroom(site, bookings)
    masked = _masked(series, full)
    not_before = ask.not_before
    if static and ask.reference_start is not None:  # the static plan: the cron start (the gate let no forecast move it)
        not_before = max(not_before, ask.reference_start)
    if ask.deadline is None:  # meant to start now: behind the runs already waiting in line for this node
        not_before = max([not_before] + [b.start for b in bookings if b.site == site.name and b.queued])
    plan = ask.plan(masked, allowed, not_before, headroom)
    for _ in range(len(full) + 1):  # unavoidable (e.g. the deadline needs a full stretch): start after it
        free_at = _conflict(plan, full)
        if free_at is None:
            break
        not_before = max(free_at, not_before)
        plan = ask.plan(masked, allowed, not_before, headroom)
    waited = any(lo < plan.finish for lo, _ in full)
    mean = forecast_mean_g_per_kwh(series, plan.windows())
    forecast = f"{mean:.0f} g/kWh forecast over the run" if mean is not None else "no forecast over the run"
    busy = ", ".join(f"{lo:%H:%M}-{hi:%H:%M}" for lo, hi in full if lo < plan.finish)
    why = (f"{site.name}: start {plan.start:%Y-%m-%d %H:%M} UTC, {plan.carbon_g:.1f} g CO2 ({forecast})"
           + (f"; its GPUs are taken {busy} UTC" if waited else "")
           + _headroom_words(site, headroom, plan)
           + ("" if plan.feasible else "; misses the deadline"))
    return SitePlan(site.name, plan, mean, waited, why)


def _headroom_words(site: Site, headroom: PowerCap | None, plan: RunPlan) -> str:
    """``; headroom 510-1200 W of its 1200 W cap over the run`` (nothing without a cap)."""
    if headroom is None or not plan.segments:
        return ""
    lows = [headroom.over(s.start, s.end) for s in plan.segments]
    least, most = min(lows), max(lows)
    span = f"{least:.0f} W" if abs(most - least) < 0.5 else f"{least:.0f}-{most:.0f} W"
    return f"; headroom {span} of its {site.power_cap_w:.0f} W power cap over the run"


def place_run(policy: Policy, series_by_site: Mapping[str, IntensitySeries], modes: Sequence[ModeFigures], *,
              now: datetime, not_before: datetime, deadline: datetime | None, work_s: float | None = None,
              reference_start: datetime | None = None, bookings: Sequence[Booking] = (),
              static_sites: Sequence[str] = ()) -> Placement:
    """Choose the site of ``policy.sites`` and the plan (start and modes) for its job together; see the module docstring.

    ``work_s`` defaults to ``job.expected_duration_s``; ``not_before``, ``deadline`` and
    ``reference_start`` are as for :func:`scheduler.planner.inputs.plan_policy_job`. ``series_by_site``
    holds each site's forecast; a site without one is left out (and said so). ``static_sites``: sites
    whose do-no-harm gate let no forecast move the plan (their series is flat): they start at
    ``reference_start``. Raises ValueError when no site can run the job at all.
    """
    sites = policy.sites
    ask = _Ask(policy, policy.job.expected_duration_s if work_s is None else work_s, not_before, deadline,
               reference_start, now)
    objective = Objective(time_value_g_per_h=policy.objective.time_value_g_per_h)
    plans: list[SitePlan] = []
    for site in sites:
        if site.name not in series_by_site:
            plans.append(SitePlan(site.name, None, None, False, f"{site.name}: no carbon forecast, left out"))
            continue
        plans.append(_plan_at_site(site, series_by_site[site.name], ask, modes, bookings,
                                   static=site.name in static_sites))
    price = {s.name: s.price_per_gpu_h for s in sites}
    order = {s.name: i for i, s in enumerate(sites)}
    usable = [p for p in plans if p.plan is not None]
    if not usable:
        raise ValueError("no site can run the job: " + "; ".join(p.reason for p in plans))

    def rank(p: SitePlan) -> tuple[bool, float, float, float, int]:
        assert p.plan is not None
        value = round(objective_value(p.plan, now, objective), 6)
        # without a deadline the run is meant to start now: the site whose GPUs free up first wins, so
        # no run waits for a busy node while another has a GPU free; with one, carbon decides first
        soonest = (p.plan.start - now).total_seconds()
        first, second = (soonest, value) if deadline is None else (value, soonest)
        return (not p.plan.feasible, first, second, price[p.site] if price[p.site] is not None else 0.0, order[p.site])

    best = min(usable, key=rank)
    assert best.plan is not None
    reasons = [f"site {best.site} chosen with start {best.plan.start:%Y-%m-%d %H:%M} UTC"]
    others = [p for p in usable if p is not best]
    if others:
        runner_up = min(others, key=rank)
        assert runner_up.plan is not None
        saved = runner_up.plan.carbon_g - best.plan.carbon_g
        sooner_s = (runner_up.plan.start - best.plan.start).total_seconds()
        if deadline is None and sooner_s > 0:
            reasons[0] += f": starts {sooner_s:.0f} s sooner than at {runner_up.site}, whose GPUs are taken until then"
        elif saved > 0:
            reasons[0] += f": {saved:.1f} g CO2 less than the best plan at {runner_up.site}"
        else:
            reasons[0] += f": as clean as {runner_up.site} and cheaper or listed first"
    reasons += [p.reason for p in plans]
    return Placement(site=best.site, plan=best.plan, sites=tuple(plans), reasons=tuple(reasons),
                     queued=deadline is None and best.plan.start > not_before, power=booked_power(best.plan, modes))

