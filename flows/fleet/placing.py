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
from flows.fleet.names import HEARTBEAT_TAG, PLACING_LIMIT_PREFIX, placing_limit_name, site_deployment_name, utc
from scheduler.service.placement import Booking, Placement, place_run
from scheduler.policy.types import Policy
from scheduler.policy.sites import policy_at_site

__all__ = ["PLACING_LIMIT_PREFIX", "SubmittedRun", "booking_of_run", "fleet_bookings", "on_grid", "placed_runs",
           "placing_limit_name", "placing_lock", "plan_placement", "submit_placed_run", "utc"]

#: states of a flow run that holds (or will hold) its node's GPUs
_HOLDING = ["SCHEDULED", "PENDING", "RUNNING"]

#: how long a placement waits for another placement of the same site to book (each holds it for a read and a create)
PLACING_WAIT_S = 300.0
#: how many times a placement plans again when another booked the GPUs it planned on meanwhile
PLACING_ATTEMPTS = 20
#: Prefect's shortest lease; a placer that dies mid-placement blocks the sites no longer than this
_PLACING_LEASE_S = 60.0


@dataclass(frozen=True)
class SubmittedRun:
    """A placed run: its flow run on the site's deployment, and why it went there."""

    flow_run_id: str
    deployment: str
    placement: Placement


def _site_forecasts(policy: Policy, now: datetime) -> dict[str, IntensitySeries]:
    from flows.sources import monitor_for

    out: dict[str, IntensitySeries] = {}
    for site in policy.sites:
        monitor = monitor_for(policy_at_site(policy, site.name))
        try:
            out[site.name] = monitor.read(now).series
        except Exception:  # a site whose signal is down is left out (place_run says so)
            continue
        finally:
            monitor.close()
    return out


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
    return Booking(str(placement["site"]), begun, begun + length, int(placement.get("gpus", 1)), queued=queued)


def placed_runs(site_names: Sequence[str], now: datetime) -> list[tuple[Any, Booking]]:
    """The gridshift flow runs placed on ``site_names`` that have not finished yet, each with its GPU booking."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType, FlowRunFilterTags

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=_HOLDING)),
            tags=FlowRunFilterTags(all_=["gridshift"])), limit=200)
    out: list[tuple[Any, Booking]] = []
    for run in runs:
        placed = (run.parameters or {}).get("placement") or {}
        if placed.get("site") in site_names and run.state_type is not None:
            out.append((run, booking_of_run(placed, run.state_type.value, run.start_time, now)))
    return out


def fleet_bookings(site_names: Sequence[str], now: datetime) -> list[Booking]:
    """The GPU bookings of gridshift runs placed on ``site_names`` that have not finished yet."""
    return [booking for _, booking in placed_runs(site_names, now)]


@contextmanager
def placing_lock(site_names: Sequence[str], *, wait_s: float = PLACING_WAIT_S) -> Iterator[None]:
    """Hold the placing slot of every site in ``site_names`` (one request: all or none, so no deadlock)."""
    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError

    from flows.fleet.gpus import take_slots

    names = [placing_limit_name(s) for s in sorted(site_names)]
    with ExitStack() as stack:
        try:
            held = take_slots(names, 1, wait_s=wait_s, lease_s=_PLACING_LEASE_S, stack=stack)
        except ConcurrencySlotAcquisitionError as exc:  # strict: a fleet deployed before the limits existed
            raise RuntimeError(f"{exc}; run `gridshift deploy` for this policy again to create them") from None
        if not held:
            raise RuntimeError(f"{', '.join(names)}: another placement held the sites for {wait_s:.0f} s")
        yield


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
                   bookings: Sequence[Booking] = (), forecasts: dict[str, IntensitySeries] | None = None) -> Placement:
    """Site and plan for the occurrence nominally at ``nominal`` (``start_now``: the best site to start at once).

    The window is the one :func:`scheduler.planner.inputs.plan_start` gives a run without sites; the mode
    figures are :func:`scheduler.planner.inputs.policy_figures` without a device (placement happens away
    from the nodes). ``start_now`` (a run started by hand) plans as a job without a deadline does:
    from now, the modes chosen, no room to shift the start. Otherwise the planner's slots lie on the
    cron's grid (its occurrences plus ``earliest_start_s``, in steps of ``rules.slot_s``), starting
    at the first grid point not in the past: a planning run that began a few seconds late still
    plans starts at 21:00, 21:15, ..., never at 21:00:07.
    """
    from scheduler.planner.inputs import policy_figures

    job = policy.job
    earliest = nominal + timedelta(seconds=job.earliest_start_s)
    # the planner's slots start at not_before: put it on the cron's grid, not on when planning ran
    not_before = on_grid(max(now, earliest), _grid_anchor(policy, nominal) + (earliest - nominal), policy.rules.slot_s)
    deadline = nominal + timedelta(seconds=job.deadline_s) if job.deadline_s is not None else None
    if start_now or deadline is None:
        not_before, deadline = now, None
    # the planner lays its slots from the moment it plans at: that is the grid point, when there is one
    return place_run(policy, forecasts if forecasts is not None else _site_forecasts(policy, now),
                     policy_figures(policy), now=not_before, not_before=not_before, deadline=deadline,
                     reference_start=None if deadline is None else max(nominal, not_before), bookings=bookings)


def submit_placed_run(policy_path: str, *, deployment: str, nominal: datetime | None = None,
                      start_now: bool = False, key: str | None = None, ledger_path: str | None = None,
                      workdir: str | None = None, now: datetime | None = None,
                      attempts: int = PLACING_ATTEMPTS) -> SubmittedRun:
    """Place one run of ``policy_path`` and create its flow run on ``<deployment>-<site>`` at the chosen start.

    ``deployment`` is the policy's main deployment ("flow/name", as ``gridshift deploy`` made it);
    ``key`` (e.g. ``job@nominal``) makes a repeated submission create no second run.

    Plans outside any lock, on the bookings as read, then holds only the chosen site's placing lock
    to read that site's bookings again and book: when the plan no longer fits them (another placement
    took the GPUs meanwhile, :func:`scheduler.service.placement.plan_still_fits`), it plans again on the
    fresh bookings, up to ``attempts`` times. So placements onto different sites run side by side, and
    a site is held only for one read and one create.
    """
    from scheduler.policy.loader import load_policy
    from scheduler.policy.sites import site_named
    from scheduler.service.placement import plan_still_fits

    policy = load_policy(policy_path)
    sites = [s.name for s in policy.sites]
    first = utc(now) if now is not None else datetime.now(timezone.utc)
    forecasts = _site_forecasts(policy, first)
    for _ in range(attempts):
        # "now" is when this attempt read the fleet: a run that waited is not planned in the past
        now = max(first, datetime.now(timezone.utc))
        placed = plan_placement(policy, nominal=utc(nominal) if nominal is not None else now, now=now,
                                start_now=start_now, bookings=fleet_bookings(sites, now), forecasts=forecasts)
        with placing_lock([placed.site]):
            booked_at = max(first, datetime.now(timezone.utc))
            fresh = fleet_bookings([placed.site], booked_at)
            if plan_still_fits(site_named(policy, placed.site), policy.job.gpus, placed, fresh, now=booked_at,
                               arrival_order=start_now or policy.job.deadline_s is None):
                return _create_placed_run(policy, policy_path, placed, deployment=deployment, key=key,
                                          nominal=utc(nominal) if nominal is not None else now, now=booked_at,
                                          ledger_path=ledger_path, workdir=workdir)
    raise RuntimeError(f"{policy.job.name}: the fleet's bookings changed under {attempts} placements in a row; "
                       "submit again")


def _create_placed_run(policy: Policy, policy_path: str, placed: Placement, *, deployment: str, key: str | None,
                       nominal: datetime, now: datetime, ledger_path: str | None,
                       workdir: str | None) -> SubmittedRun:
    """The placed run as a flow run of the site's deployment (under the site's placing lock).

    A run queued behind busy GPUs is created to start now: it stands in the site's line
    (:mod:`flows.fleet.gpu_line`) with its process up, and takes a GPU the moment one frees, whatever
    its booked start (the expected finish of the runs before it) says. A run timed for a clean hour
    waits Scheduled until then, holding nothing.
    """
    from prefect.deployments import run_deployment

    target = site_deployment_name(deployment, placed.site)
    plan = placed.plan
    run = run_deployment(
        name=target, timeout=0, as_subflow=False, idempotency_key=key,
        scheduled_time=now if placed.queued else max(plan.start, now),
        tags=["gridshift", "placed", f"site:{placed.site}", HEARTBEAT_TAG],
        parameters={"policy_path": policy_path, "plan": False, "nominal_start": nominal.isoformat(),
                    "planned_start": plan.start.isoformat(), "ledger_path": ledger_path, "workdir": workdir,
                    "site": placed.site,
                    "placement": {"site": placed.site, "start": plan.start.isoformat(),
                                  "finish": plan.finish.isoformat(), "gpus": policy.job.gpus,
                                  "placed_at": now.isoformat(), "queued": placed.queued,
                                  "carbon_g": round(plan.carbon_g, 4),
                                  "reasons": list(placed.reasons)}},
    )
    return SubmittedRun(flow_run_id=str(run.id), deployment=target, placement=placed)
