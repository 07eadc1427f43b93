"""The policy's questions to the planner: pure, time and forecast are arguments.

:func:`plan_policy_job` turns a policy plus the run's state (work left, not-before, deadline, the
mode running now) into one :func:`scheduler.planner.plan_run` call, through the same
:func:`scheduler.planner.deciders.plan_work` the running flow's decider calls, so ``gridshift
deploy``/``serve``, placement and the nightly flow plan with the objective, the constraints and the
no-deadline rule of the run itself.

:func:`plan_start` answers "when should the occurrence nominally at ``nominal`` start": the start of
the planner's plan on the forecast the do-no-harm gate chose (:mod:`scheduler.loop.gate`), or the
cron start when it chose none (threshold policies, ``rules.kind: absolute|relative``, keep the
start-time shifting of :func:`scheduler.planner.thresholds.decide`). :func:`plan_runs` lists the
coming occurrences of a recurring job for ``gridshift serve``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Sequence

from carbon.series import IntensitySeries
from scheduler.planner.grid import Signal, as_series
from scheduler.planner.thresholds import Decision, decide
from scheduler.planner.deciders import plan_work, without_prices
from scheduler.run_spec import objective_of, resolve_run, rule_constraints
from scheduler.planner import ModeFigures, PlanConstraints, RunPlan
from scheduler.planner.power_cap import PowerCap
from scheduler.policy.cron import next_runs
from scheduler.policy.types import JobSpec, PlanRule, Policy
from scheduler.service.serve import PlannedRun, nominal_runs

__all__ = ["StartChoice", "occurrence_for", "plan_start", "plan_runs", "plan_policy_job", "plan_constraints",
           "plans_with_planner", "policy_figures", "run_key"]


def run_key(policy: Policy, nominal: datetime) -> str:
    """Stable id of one occurrence of the job (job store id and Prefect idempotency key)."""
    return f"{policy.job.name}@{nominal:%Y%m%dT%H%MZ}"


def occurrence_for(job: JobSpec, fired: datetime) -> datetime:
    """The nominal time a planning run that fired at ``fired`` plans for: the first occurrence of
    ``job.cron`` (in ``job.timezone``) at or after it.

    The deployment fires at the earliest start, a wall-clock shift of the cron
    (``flows.deployments.deploy.planning_cron``), or at the cron itself when no shift fits the day; on a day the
    clocks change, or with the cron unshifted, ``fired - earliest_start_s`` would name another time.
    Without a cron (a run started by hand from a one-off policy) it is ``fired - earliest_start_s``.
    """
    if job.cron is None:
        return fired - timedelta(seconds=min(job.earliest_start_s, 0.0))
    return next_runs(job.cron, fired, 1, tz=job.timezone)[0]


def plans_with_planner(policy: Policy) -> bool:
    """True unless the policy explicitly chose a threshold rule (``rules.kind: absolute|relative``)."""
    return isinstance(policy.rules, PlanRule)


def plan_constraints(policy: Policy) -> PlanConstraints:
    """The planner's constraints for a planning policy: one place, for the flow, deploy, serve and simulate."""
    return rule_constraints(policy.rules, reports_progress=policy.job.reports_progress,
                            expected_duration_s=policy.job.expected_duration_s)


def plan_policy_job(
    policy: Policy,
    series: Signal,
    figures: Sequence[ModeFigures],
    *,
    now: datetime,
    work_s: float,
    not_before: datetime,
    deadline: datetime | None,
    pausable: bool | None = None,
    running_mode: str | None = None,
    running_since: datetime | None = None,
    resuming: bool = False,
    start_now: bool = False,
    reference_start: datetime | None = None,
    pace_measured: bool = True,
    price: Signal | None = None,
    power_cap: PowerCap | None = None,
) -> RunPlan:
    """The planner's plan for ``work_s`` reference seconds of the policy's job, seen at ``now``.

    ``pausable`` defaults to ``job.checkpointable``. A job without a deadline starts at once
    (:class:`scheduler.policy.JobSpec`): it is planned against the finish of its slowest mode from
    ``not_before``, so the planner chooses its modes but has no room to shift it. ``start_now``: the
    start is not the planner's to choose (a flow run whose start has come: the start was chosen by
    deploy/serve, or the user ran it now); it plans the modes from ``now`` on, as if the job were
    already running with its dwell served. ``reference_start``: the start a user would pick (the
    cron time); the plan leaves it only for more than ``rules.min_gain`` of forecast gain.
    ``pace_measured=False``: the run has seen no progress report, so the margin is kept as time
    before the deadline even where ``job.reports_progress`` would allow a pace reserve. ``price``: the
    prices published by ``now`` (:func:`scheduler.planner.objective.price_signal`); a priced objective needs them.
    ``power_cap``: the run's power headroom over time (a site's cap less the other runs' bookings).
    """
    constraints = plan_constraints(policy)  # refuses threshold rules
    assert isinstance(policy.rules, PlanRule)
    objective, note = without_prices(objective_of(policy), price)
    plan = plan_work(series, figures, rules=policy.rules, constraints=constraints, objective=objective, price=price,
                     pausable=policy.job.checkpointable if pausable is None else pausable,
                     resume_overhead_s=policy.job.resume_overhead_s, now=now, work_s=work_s, not_before=not_before,
                     deadline=deadline, running_mode=running_mode, running_since=running_since, resuming=resuming,
                     start_now=start_now, reference_start=reference_start, pace_measured=pace_measured,
                     power_cap=power_cap)
    return replace(plan, reasons=(*plan.reasons, note)) if note else plan


@dataclass(frozen=True)
class StartChoice:
    """When an occurrence should start (and in which mode), and why in plain words."""

    start_at: datetime
    mode: str
    reason: str
    plan: RunPlan | None = None  # None for threshold policies


def policy_figures(policy: Policy, *, backend: Any = None, profile: Any = None,
                   policy_path: str | None = None, all_limits: bool = False) -> list[ModeFigures]:
    """The planner's mode figures for ``policy`` (:func:`scheduler.planner.mode_figures.figures_for_policy`).

    ``backend`` gives the device (its capabilities) and, when it has a model (``operating_point``),
    the last-resort figures; a backend without one (real hardware measures, it does not predict)
    leaves that to the simulated GPU model, and the figures' source says so. ``profile``: a measured
    power-limit profile (a stored ``PowerProfile`` or what :func:`read_limit_profile` accepts);
    ``all_limits`` adds each of its measured limits as a candidate mode (``limit_<W>w``), where the
    default keeps to the policy's own modes.
    """
    return resolve_run(policy, policy_path=policy_path).mode_figures(backend=backend, profile=profile,
                                                                      all_limits=all_limits)


def plan_start(policy: Policy, series: Signal, *, nominal: datetime, now: datetime,
               figures: Sequence[ModeFigures] | None = None, static: str | None = None,
               price: Signal | None = None) -> StartChoice:
    """When (and in which mode) the occurrence nominally at ``nominal`` should start, seen at ``now``.

    The job may start from ``max(now, nominal + earliest_start_s)`` and must end by ``nominal +
    deadline_s``. ``figures`` default to :func:`policy_figures` (the GPU model's, without a device).
    ``series`` is the forecast the do-no-harm gate chose (:func:`scheduler.loop.gate.choose_forecast`);
    ``static`` (the gate's reason) when it chose none: then the cron start is kept and the run plans
    its modes on no forecast (the static plan). ``price``: the prices published by ``now``; under a
    priced objective (``objective.carbon_price``) the static plan still moves the start to the cheap
    hours (prices are known, not forecast), on ``series`` (then a flat carbon signal).
    """
    job = policy.job
    earliest = max(now, nominal + timedelta(seconds=job.earliest_start_s))
    deadline = nominal + timedelta(seconds=job.deadline_s) if job.deadline_s is not None else None
    if not plans_with_planner(policy):
        d = _threshold_start(policy, as_series(series), nominal=nominal, now=now, earliest=earliest, deadline=deadline)
        return StartChoice(start_at=d.start_at, mode=d.mode, reason=d.reason)
    priced = policy.objective.carbon_price is not None and price is not None
    if static is not None and not priced:
        return StartChoice(start_at=max(nominal, earliest), mode=policy.rules.clean_mode,
                           reason=f"the cron start is kept: {static}; the run plans its modes on no forecast")
    if deadline is None:
        earliest = max(now, nominal)
    plan = plan_policy_job(policy, series, figures if figures is not None else policy_figures(policy), now=now,
                           work_s=job.expected_duration_s, not_before=earliest, deadline=deadline,
                           reference_start=max(nominal, earliest), price=price)
    first_mode = plan.segments[0].mode if plan.segments else policy.rules.clean_mode
    reason = plan.reason if static is None else f"carbon: {static}; planned on the published prices: {plan.reason}"
    return StartChoice(start_at=max(plan.start, earliest), mode=first_mode, reason=reason, plan=plan)


def _threshold_start(policy: Policy, series: IntensitySeries, *, nominal: datetime, now: datetime, earliest: datetime,
                     deadline: datetime | None) -> Decision:
    job = policy.job
    if deadline is None:
        return decide(policy, series, now=max(now, nominal), start_at=max(now, nominal))
    reference = min(max(now, nominal), deadline - timedelta(seconds=job.expected_duration_s))
    return decide(policy, series, now=max(reference, earliest), earliest=earliest, deadline=deadline,
                  remaining_work_s=job.expected_duration_s)


def plan_runs(policy: Policy, series: Signal, *, now: datetime, horizon: timedelta = timedelta(days=1),
              extra: dict[str, Any] | None = None, figures: Sequence[ModeFigures] | None = None,
              gate: Callable[[datetime], tuple[Signal, str | None]] | None = None,
              price: Signal | None = None) -> list[PlannedRun]:
    """The runs of ``policy``'s recurring job whose window is open within ``horizon`` of ``now``.

    ``gate(nominal)``: the forecast the do-no-harm gate lets that occurrence plan on and, when it
    lets none, its reason (see :func:`plan_start`); without it every occurrence plans on ``series``.
    """
    job = policy.job
    if job.cron is None:
        return []
    if figures is None and plans_with_planner(policy):
        figures = policy_figures(policy)
    out: list[PlannedRun] = []
    for nominal in nominal_runs(job.cron, now, earliest_start_s=job.earliest_start_s,
                                deadline_s=job.deadline_s or job.expected_duration_s, horizon=horizon, tz=job.timezone):
        signal, static = gate(nominal) if gate is not None else (series, None)
        d = plan_start(policy, signal, nominal=nominal, now=now, figures=figures, static=static, price=price)
        out.append(PlannedRun(key=run_key(policy, nominal), run_at=d.start_at,
                              kwargs={**(extra or {}), "nominal_start": nominal.isoformat(),
                                      "planned_start": d.start_at.isoformat()},
                              reason=d.reason))
    return out
