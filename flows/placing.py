"""Place a run of a policy with sites: read every site's forecast and the fleet's bookings, let
:func:`scheduler.placement.place_run` choose site and start, and create the flow run there.

The edges around the pure placement: forecasts come from each site's carbon source (the same
monitors a run uses), bookings from Prefect (the gridshift runs that are Scheduled, Pending or
Running on the site deployments, with the placement they carry), and the result is a flow run of
the chosen site's deployment, Scheduled at the chosen start. Used by the cron's planning run
(:mod:`flows.nightly`) and by ``gridshift submit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Sequence

from carbon.series import IntensitySeries
from scheduler.placement import Booking, Placement, place_run
from scheduler.policy import Policy
from scheduler.sites import policy_at_site

__all__ = ["SubmittedRun", "fleet_bookings", "plan_placement", "submit_placed_run"]

#: states of a flow run that holds (or will hold) its node's GPUs
_HOLDING = ["SCHEDULED", "PENDING", "RUNNING"]


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


def fleet_bookings(site_names: Sequence[str]) -> list[Booking]:
    """The GPU bookings of gridshift runs placed on ``site_names`` that have not finished yet."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType, FlowRunFilterTags

    bookings: list[Booking] = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=_HOLDING)),
            tags=FlowRunFilterTags(all_=["gridshift"])), limit=200)
    for run in runs:
        placed = (run.parameters or {}).get("placement") or {}
        if placed.get("site") not in site_names:
            continue
        start = datetime.fromisoformat(placed["start"])
        finish = datetime.fromisoformat(placed["finish"])
        if run.start_time is not None and run.state_type is not None and run.state_type.value == "RUNNING":
            begun = run.start_time.astimezone(timezone.utc)
            finish, start = begun + (finish - start), begun  # a late start finishes late
        bookings.append(Booking(placed["site"], start, finish, int(placed.get("gpus", 1))))
    return bookings


def plan_placement(policy: Policy, *, nominal: datetime, now: datetime, start_now: bool = False,
                   bookings: Sequence[Booking] = (), forecasts: dict[str, IntensitySeries] | None = None) -> Placement:
    """Site and plan for the occurrence nominally at ``nominal`` (``start_now``: the best site to start at once).

    The window is the one :func:`scheduler.planning.plan_start` gives a run without sites; the mode
    figures are :func:`scheduler.planning.policy_figures` without a device (placement happens away
    from the nodes). ``start_now`` (a run started by hand) plans as a job without a deadline does:
    from now, the modes chosen, no room to shift the start.
    """
    from scheduler.planning import policy_figures

    job = policy.job
    not_before = max(now, nominal + timedelta(seconds=job.earliest_start_s))
    deadline = nominal + timedelta(seconds=job.deadline_s) if job.deadline_s is not None else None
    if start_now or deadline is None:
        not_before, deadline = now, None
    return place_run(policy, forecasts if forecasts is not None else _site_forecasts(policy, now),
                     policy_figures(policy), now=now, not_before=not_before, deadline=deadline,
                     reference_start=None if deadline is None else max(nominal, not_before), bookings=bookings)


def submit_placed_run(policy_path: str, *, deployment: str, nominal: datetime | None = None,
                      start_now: bool = False, key: str | None = None, ledger_path: str | None = None,
                      workdir: str | None = None, now: datetime | None = None) -> SubmittedRun:
    """Place one run of ``policy_path`` and create its flow run on ``<deployment>-<site>`` at the chosen start.

    ``deployment`` is the policy's main deployment ("flow/name", as ``gridshift deploy`` made it);
    ``key`` (e.g. ``job@nominal``) makes a repeated submission create no second run.
    """
    from prefect.deployments import run_deployment

    from flows.deploy import site_deployment_name
    from scheduler.policy_io import load_policy

    policy = load_policy(policy_path)
    now = now or datetime.now(timezone.utc)
    nominal = nominal or now
    placed = plan_placement(policy, nominal=nominal, now=now, start_now=start_now,
                            bookings=fleet_bookings([s.name for s in policy.sites]))
    target = site_deployment_name(deployment, placed.site)
    plan = placed.plan
    run = run_deployment(
        name=target, timeout=0, as_subflow=False, idempotency_key=key, scheduled_time=max(plan.start, now),
        tags=["gridshift", "placed", f"site:{placed.site}"],
        parameters={"policy_path": policy_path, "plan": False, "nominal_start": nominal.isoformat(),
                    "planned_start": plan.start.isoformat(), "ledger_path": ledger_path, "workdir": workdir,
                    "site": placed.site,
                    "placement": {"site": placed.site, "start": plan.start.isoformat(),
                                  "finish": plan.finish.isoformat(), "gpus": policy.job.gpus,
                                  "carbon_g": round(plan.carbon_g, 4), "reasons": list(placed.reasons)}},
    )
    return SubmittedRun(flow_run_id=str(run.id), deployment=target, placement=placed)
