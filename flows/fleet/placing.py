"""Place a run of a policy with sites: read every site's forecast and the fleet's bookings, let
:func:`scheduler.service.placement.place_run` choose site and start, and create the flow run there.

The edges around the pure placement: forecasts come from each site's carbon source (the same
monitors a run uses), bookings from Prefect (the gridshift runs that are Scheduled, Pending or
Running on the site deployments, with the placement they carry), and the result is a flow run of
the chosen site's deployment, Scheduled at the chosen start. Used by the cron's planning run
(:mod:`flows.nightly`) and by ``gridshift submit``.

Placements of one fleet cannot race: reading the bookings, planning and creating the flow run
happen while holding one slot of every site's placing limit (``gridshift-placing-<site>``, a
Prefect global concurrency limit of 1 that ``gridshift deploy`` creates), all taken in one request.
Two submits at once therefore place one after the other, and the second sees the first's run.

Times from Prefect are pendulum ``DateTime`` values, which drop their time zone when a ``timedelta`` is
added after ``.astimezone(timezone.utc)``; every time crossing into gridshift goes through
:func:`utc` first, so the planner only ever sees stdlib, UTC-aware datetimes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from carbon.series import IntensitySeries
from flows.fleet.site_lock import SiteHold, hold_sites
from flows.fleet.names import HEARTBEAT_TAG, PLACING_LIMIT_PREFIX, placing_limit_name, site_deployment_name, utc
from scheduler.service.placement import Booking, Placement, place_run
from scheduler.policy.types import Policy
from scheduler.policy.sites import policy_at_site

__all__ = ["PLACING_LIMIT_PREFIX", "SubmittedRun", "booking_of_run", "fleet_bookings", "on_grid", "placed_runs",
           "placing_limit_name", "placing_lock", "plan_placement", "submit_placed_run", "utc"]

#: states of a flow run that holds (or will hold) its node's GPUs
_HOLDING = ["SCHEDULED", "PENDING", "RUNNING"]
#: flow runs read per request
_PAGE = 200

#: how long a placement waits for another placement of the same site to book (each holds it for a read and a create)
PLACING_WAIT_S = 300.0
#: how many times a placement plans again when another booked the GPUs it planned on meanwhile
PLACING_ATTEMPTS = 20


@dataclass(frozen=True)
class SubmittedRun:
    """A placed run: its flow run on the site's deployment, and why it went there."""

    flow_run_id: str
    deployment: str
    placement: Placement


def _site_forecasts(policy: Policy, now: datetime, nominal: datetime) -> tuple[dict[str, IntensitySeries], list[str]]:
    """Each site's forecast under its do-no-harm gate (:func:`flows.sources.forecast_choice`), and the
    sites whose gate let no forecast move the plan (their series is flat)."""
    from flows.sources import forecast_choice, monitor_for, signal_reading
    from scheduler.loop.loop import pick_signal
    from scheduler.planner.grid import as_series
    from scheduler.planner.inputs import policy_figures
    from scheduler.run_spec import resolve_run

    figures = policy_figures(policy)
    out: dict[str, IntensitySeries] = {}
    static: list[str] = []
    for site in policy.sites:
        monitor = monitor_for(policy_at_site(policy, site.name))
        try:
            reading = monitor.read(now)
            choice = forecast_choice(monitor, resolve_run(policy, site=site.name), figures, reading, nominal=nominal,
                                     now=now)
        except Exception:  # a site whose signal is down is left out (place_run says so)
            continue
        finally:
            monitor.close()
        out[site.name] = as_series(pick_signal(signal_reading(reading), choice, now))
        if choice.static:
            static.append(site.name)
    return out, static


def booking_of_run(placement: Mapping[str, Any], state: str, started: datetime | None, now: datetime) -> Booking:
    """The GPUs a placed run holds or will hold, from its ``placement`` parameter and its Prefect state.

    A RUNNING run holds them from when it took its GPUs (``gpus_acquired_at``, which a queued run
    writes into its placement), else from when it really started, for its planned length (a late
    start finishes late). A run not started yet (Scheduled or Pending), or queued and still standing
    in line, holds them from its planned start, or from ``now`` when that has passed (a late run
    starts as soon as a worker takes it or the GPUs free).
    """
    start, finish = utc(datetime.fromisoformat(placement["start"])), utc(datetime.fromisoformat(placement["finish"]))
    length = finish - start
    queued = bool(placement.get("queued", False))
    if state == "RUNNING" and placement.get("gpus_acquired_at"):
        begun = utc(datetime.fromisoformat(placement["gpus_acquired_at"]))
    elif state == "RUNNING" and started is not None and not queued:
        begun = utc(started)
    else:  # not started, or queued and standing in line for its GPUs (it started to wait, not to train)
        begun = max(start, utc(now))
    shift = begun - start  # its booked power moves with it (a late start finishes late)
    power = tuple((utc(datetime.fromisoformat(a)) + shift, utc(datetime.fromisoformat(b)) + shift, float(w))
                  for a, b, w in placement.get("power") or ())
    return Booking(str(placement["site"]), begun, begun + length, int(placement.get("gpus", 1)), queued=queued,
                   power=power)


def placed_runs(site_names: Sequence[str], now: datetime, client: Any = None) -> list[tuple[dict[str, Any], Booking]]:
    """The gridshift flow runs placed on ``site_names`` that have not finished yet (as the API's JSON), each
    with its GPU booking. ``client``: a Prefect sync client to reuse (placement reads through one)."""
    if client is None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as own:
            return placed_runs(site_names, now, own)
    # plain JSON, not FlowRun models: a placer reads every placed run once or twice per placement
    out: list[tuple[dict[str, Any], Booking]] = []
    offset = 0
    while True:
        page = client.request("POST", "/flow_runs/filter", json={
            "flow_runs": {"state": {"type": {"any_": _HOLDING}}, "tags": {"any_": [f"site:{s}" for s in site_names]}},
            "sort": "ID_DESC", "limit": _PAGE, "offset": offset}).json()
        for run in page:
            placed = (run.get("parameters") or {}).get("placement") or {}
            if placed.get("site") in site_names and run.get("state_type"):
                started = datetime.fromisoformat(run["start_time"]) if run.get("start_time") else None
                out.append((run, booking_of_run(placed, run["state_type"], started, now)))
        if len(page) < _PAGE:
            return out
        offset += _PAGE


def fleet_bookings(site_names: Sequence[str], now: datetime, client: Any = None) -> list[Booking]:
    """The GPU bookings of gridshift runs placed on ``site_names`` that have not finished yet."""
    return [booking for _, booking in placed_runs(site_names, now, client)]


@contextmanager
def placing_lock(site_names: Sequence[str], *, wait_s: float = PLACING_WAIT_S, client: Any = None) -> Iterator[SiteHold]:
    """Hold the placing slot of every site in ``site_names`` (one request: all or none, so no deadlock).

    Raises RuntimeError (:class:`flows.fleet.site_lock.SiteLockError`) when a limit is missing or the
    sites stay held for ``wait_s``. ``client``: a Prefect sync client to reuse.
    """
    with hold_sites([placing_limit_name(s) for s in site_names], wait_s=wait_s, client=client) as held:
        yield held


def on_grid(moment: datetime, anchor: datetime, slot_s: float) -> datetime:
    """The first point of the grid ``anchor + k * slot_s`` (k any integer) at or after ``moment``."""
    steps = math.ceil((moment - anchor).total_seconds() / slot_s - 1e-9)
    return anchor + timedelta(seconds=steps * slot_s)


def _grid_anchor(policy: Policy, nominal: datetime) -> datetime:
    """The cron's last occurrence at or before ``nominal`` (``nominal`` itself without a cron, or none in 2 days)."""
    from scheduler.policy.cron import cron_occurrences

    if policy.job.cron is None:
        return nominal
    fired = cron_occurrences(policy.job.cron, nominal - timedelta(days=2), nominal + timedelta(seconds=1),
                             tz=policy.job.timezone)
    return fired[-1] if fired else nominal


def plan_placement(policy: Policy, *, nominal: datetime, now: datetime, start_now: bool = False,
                   bookings: Sequence[Booking] = (), forecasts: dict[str, IntensitySeries] | None = None,
                   static_sites: Sequence[str] = ()) -> Placement:
    """Site and plan for the occurrence nominally at ``nominal`` (``start_now``: the best site to start at once).

    The window is the one :func:`scheduler.planner.inputs.plan_start` gives a run without sites; the mode
    figures are :func:`scheduler.planner.inputs.policy_figures` without a device (placement happens away
    from the nodes). ``start_now`` (a run started by hand) plans as a job without a deadline does:
    from now, the modes chosen, no room to shift the start. Otherwise the planner's slots lie on the
    cron's grid (its occurrences plus ``earliest_start_s``, in steps of ``rules.slot_s``), starting
    at the first grid point not in the past: a planning run that began a few seconds late still
    plans starts at 21:00, 21:15, ..., never at 21:00:07. Without ``forecasts`` each site's is read
    here under its do-no-harm gate; ``static_sites`` (with ``forecasts``): those the gate held to the
    static plan.
    """
    from scheduler.planner.inputs import policy_figures

    job = policy.job
    earliest = nominal + timedelta(seconds=job.earliest_start_s)
    # the planner's slots start at not_before: put it on the cron's grid, not on when planning ran
    not_before = on_grid(max(now, earliest), _grid_anchor(policy, nominal) + (earliest - nominal), policy.rules.slot_s)
    deadline = nominal + timedelta(seconds=job.deadline_s) if job.deadline_s is not None else None
    if start_now or deadline is None:
        not_before, deadline = now, None
    series, static = (forecasts, list(static_sites)) if forecasts is not None else _site_forecasts(policy, now, nominal)
    # the planner lays its slots from the moment it plans at: that is the grid point, when there is one
    return place_run(policy, series, policy_figures(policy), now=not_before, not_before=not_before, deadline=deadline,
                     reference_start=None if deadline is None else max(nominal, not_before), bookings=bookings,
                     static_sites=static)


def submit_placed_run(policy_path: str, *, deployment: str, nominal: datetime | None = None,
                      start_now: bool = False, key: str | None = None, ledger_path: str | None = None,
                      workdir: str | None = None, now: datetime | None = None,
                      attempts: int = PLACING_ATTEMPTS) -> SubmittedRun:
    """Place one run of ``policy_path`` and create its flow run on ``<deployment>-<site>`` at the chosen start.

    ``deployment`` is the policy's main deployment ("flow/name", as ``gridshift deploy`` made it);
    ``key`` (e.g. ``job@nominal``) makes a repeated submission create no second run.

    Plans first on the fleet's bookings as read, holding nothing. Then it holds only the chosen
    site's placing lock, reads the bookings again and plans again on them: when the same site still
    wins, it books there before letting go. When another site now wins (the GPUs it planned on were
    booked meanwhile), it holds that site too if it is free at once and books there; else it lets go
    and waits for that site's lock instead (it never waits while holding one, so no deadlock), up to
    ``attempts`` times. So placements onto different sites run side by side, and a site is held for
    one read, one plan and one create.
    """
    from scheduler.policy.loader import load_policy

    policy = load_policy(policy_path)
    sites = [s.name for s in policy.sites]
    first = utc(now) if now is not None else datetime.now(timezone.utc)
    forecasts, static = _site_forecasts(policy, first, utc(nominal) if nominal is not None else first)

    def plan(at: datetime, bookings: Sequence[Booking]) -> Placement:
        return plan_placement(policy, nominal=utc(nominal) if nominal is not None else at, now=at,
                              start_now=start_now, bookings=bookings, forecasts=forecasts, static_sites=static)

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:  # one client for the whole placement: set-ups cost CPU
        at = max(first, datetime.now(timezone.utc))
        placed = plan(at, fleet_bookings(sites, at, client))
        targets: dict[str, tuple[str, Any]] = {}
        for _ in range(attempts):
            _deployment(client, deployment, placed.site, targets)  # read before holding the site
            with ExitStack() as stack:
                held = stack.enter_context(placing_lock([placed.site], client=client))
                mine = {placed.site}
                # "now" is when this placement holds the site: a run that waited is not planned in the past
                at = max(first, datetime.now(timezone.utc))
                placed = plan(at, fleet_bookings(sites, at, client))  # every site, in the one read
                if placed.site not in mine and _hold_if_free(stack, placed.site, client):
                    # another site won and was free to hold as well: plan once more holding both, then book
                    mine.add(placed.site)
                    at = max(first, datetime.now(timezone.utc))
                    placed = plan(at, fleet_bookings(sites, at, client))
                if held.safe and placed.site in mine:
                    return _create_placed_run(client, policy, policy_path, placed,
                                              deployment=_deployment(client, deployment, placed.site, targets),
                                              key=key,
                                              nominal=utc(nominal) if nominal is not None else at, now=at,
                                              ledger_path=ledger_path, workdir=workdir)
    raise RuntimeError(f"{policy.job.name}: the fleet's bookings changed under {attempts} placements in a row; "
                       "submit again")


def _hold_if_free(stack: ExitStack, site: str, client: Any) -> bool:
    """Hold ``site``'s placing lock too, if it is free now: a placer holding one site never waits for another."""
    from flows.fleet.site_lock import SiteLockError

    try:
        stack.enter_context(placing_lock([site], wait_s=0.0, client=client))
    except SiteLockError:
        return False
    return True


def _deployment(client: Any, deployment: str, site: str, known: dict[str, tuple[str, Any]]) -> tuple[str, Any]:
    """``site``'s deployment of ``deployment`` as (name, id), read once per placement into ``known``."""
    if site not in known:
        target = site_deployment_name(deployment, site)
        known[site] = (target, client.read_deployment_by_name(target).id)
    return known[site]


def _power_booking(policy: Policy, placed: Placement) -> dict[str, Any]:
    """What a placed run books of its site's power cap: its power per segment, the cap, and its GPUs'
    share of the cap (what it keeps to outside its booking: :func:`flows.cap_watch.booked_windows`)."""
    from scheduler.policy.sites import site_named

    site = site_named(policy, placed.site)
    if site.power_cap_w is None:
        return {}
    return {"power": [[a.isoformat(), b.isoformat(), round(w, 3)] for a, b, w in placed.power],
            "power_cap_w": site.power_cap_w, "power_share_w": site.power_cap_w * policy.job.gpus / site.gpus_per_node}


def _create_placed_run(client: Any, policy: Policy, policy_path: str, placed: Placement, *, deployment: tuple[str, Any],
                       key: str | None, nominal: datetime, now: datetime, ledger_path: str | None,
                       workdir: str | None) -> SubmittedRun:
    """The placed run as a flow run of the site's deployment (``(name, id)``), under the site's placing lock.

    A run queued behind busy GPUs is created to start now: it stands in the site's line
    (:mod:`flows.fleet.gpu_line`) with its process up, and takes a GPU the moment one frees, whatever
    its booked start (the expected finish of the runs before it) says. A run timed for a clean hour
    waits Scheduled until then, holding nothing.
    """
    from prefect.states import Scheduled

    plan = placed.plan
    run = client.create_flow_run_from_deployment(
        deployment[1], idempotency_key=key,
        state=Scheduled(scheduled_time=now if placed.queued else max(plan.start, now)),
        tags=["gridshift", "placed", f"site:{placed.site}", HEARTBEAT_TAG],
        parameters={"policy_path": policy_path, "plan": False, "nominal_start": nominal.isoformat(),
                    "planned_start": plan.start.isoformat(), "ledger_path": ledger_path, "workdir": workdir,
                    "site": placed.site,
                    "placement": {"site": placed.site, "start": plan.start.isoformat(),
                                  "finish": plan.finish.isoformat(), "gpus": policy.job.gpus,
                                  "placed_at": now.isoformat(), "queued": placed.queued,
                                  "carbon_g": round(plan.carbon_g, 4),
                                  **_power_booking(policy, placed),
                                  "reasons": list(placed.reasons)}})
    return SubmittedRun(flow_run_id=str(run.id), deployment=deployment[0], placement=placed)
