"""``gridshift deploy POLICY``, ``gridshift submit POLICY`` and ``gridshift serve POLICY...``."""

from __future__ import annotations

import json
import signal
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_ENV, EXIT_INPUT, fail


@app.command()
def deploy(
    policy: Annotated[Path, typer.Argument(help="Policy YAML with a recurring job (job.cron).")],
    pool: Annotated[str, typer.Option(help="Process work pool (created when missing).")] = "gridshift",
    name: Annotated[Optional[str], typer.Option(help="Deployment name (default: the job's name).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    schedule: Annotated[bool, typer.Option("--schedule/--no-schedule", help="Attach the nightly cron (leave it off when `gridshift serve` triggers the runs).")] = True,
) -> None:
    """Create the nightly retraining deployment on a Prefect server (PREFECT_API_URL)."""
    import os

    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy

    try:
        load_policy(policy)
    except PolicyError as exc:
        raise fail(exc, EXIT_INPUT) from None
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            raise fail("deployments need a Prefect server: start one (`prefect server start`) and set PREFECT_API_URL",
                       EXIT_ENV)
    import contextlib
    import sys

    from flows.deployments.deploy import deploy_policy

    notes: list[str] = []

    def notify(line: str) -> None:
        notes.append(line)
        typer.echo(f"gridshift deploy: {line}", err=True)

    try:
        with contextlib.redirect_stdout(sys.stderr):  # Prefect prints its own table; stdout is ours
            dep = deploy_policy(policy, work_pool=pool, name=name, schedule=schedule, notify=notify)
    except PolicyError as exc:
        raise fail(exc, EXIT_INPUT) from None
    except Exception as exc:  # the server refused or is unreachable
        raise fail(f"could not create the deployment: {type(exc).__name__}: {exc}", EXIT_ENV) from None
    out = {"deployment_id": str(dep.deployment_id), "name": dep.name, "cron": dep.cron, "timezone": dep.timezone,
           "work_pool": dep.work_pool, "sites": dep.sites, "crash_recorder": dep.recorder, "notes": notes}
    if json_out:
        typer.echo(json.dumps(out))
    else:
        when = f"planning run at cron '{dep.cron}' {dep.timezone}" if dep.cron else "no schedule (runs come from `gridshift serve`)"
        typer.echo(f"deployment {dep.name} ({dep.deployment_id}): {when} on pool {dep.work_pool}\n"
                   f"train now: prefect deployment run '{dep.name}'\n"
                   f"start a worker: prefect worker start --pool {dep.work_pool}")
        for site, site_dep in dep.sites.items():
            typer.echo(f"site {site}: deployment {site_dep}")
        if dep.recorder:
            typer.echo(f"crashed site runs: recorded by deployment {dep.recorder} on pool {dep.work_pool}")


@app.command()
def submit(
    policy: Annotated[Path, typer.Argument(help="Policy YAML with sites, deployed with `gridshift deploy`.")],
    deployment: Annotated[Optional[str], typer.Option(help="The policy's main deployment 'flow/name' (default: gridshift-nightly/<job name>).")] = None,
    now: Annotated[bool, typer.Option("--now", help="Start at once, at the best site for now (default: plan the start too).")] = False,
    key: Annotated[Optional[str], typer.Option(help="Idempotency key: submitting the same key again creates no second run.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Place one run: choose site and start together, create it as a Scheduled flow run on that site."""
    import contextlib
    import sys

    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy

    try:
        loaded = load_policy(policy)
    except PolicyError as exc:
        raise fail(exc, EXIT_INPUT) from None
    if not loaded.sites:
        raise fail(f"{policy}: sites: the policy lists no sites to place the run on", EXIT_INPUT)
    from flows.fleet.placing import submit_placed_run

    try:
        with contextlib.redirect_stdout(sys.stderr):
            run = submit_placed_run(str(policy.resolve()), deployment=deployment or f"gridshift-nightly/{loaded.job.name}",
                                    start_now=now, key=key)
    except ValueError as exc:
        raise fail(str(exc), EXIT_INPUT) from None
    except Exception as exc:  # server unreachable, deployment missing
        raise fail(f"could not submit the run: {type(exc).__name__}: {exc}", EXIT_ENV) from None
    plan = run.placement.plan
    out = {"flow_run_id": run.flow_run_id, "deployment": run.deployment, "site": run.placement.site,
           "start": plan.start.isoformat(), "finish": plan.finish.isoformat(), "carbon_g": plan.carbon_g,
           "modelled": True, "reasons": list(run.placement.reasons),
           "sites": [{"site": p.site, "start": p.plan.start.isoformat() if p.plan else None,
                      "carbon_g": p.plan.carbon_g if p.plan else None,
                      "forecast_mean_g_per_kwh": p.forecast_mean_g_per_kwh, "reason": p.reason}
                     for p in run.placement.sites]}
    if json_out:
        typer.echo(json.dumps(out))
        return
    typer.echo(f"flow run {run.flow_run_id} on {run.deployment}: start {plan.start:%Y-%m-%d %H:%M} UTC, "
               f"{plan.carbon_g:.1f} g CO2 (modelled)")
    for reason in run.placement.reasons:
        typer.echo(f"  {reason}")


@app.command()
def serve(
    policies: Annotated[list[Path], typer.Argument(help="Policy YAML files (recurring jobs).")],
    deployment: Annotated[Optional[list[str]], typer.Option(help="'flow/deployment' per policy (default: gridshift-nightly/<job name>).")] = None,
    db: Annotated[Optional[Path], typer.Option(help="SQLite store of planned runs (default: $GRIDSHIFT_HOME/serve.sqlite).")] = None,
    poll_s: Annotated[float, typer.Option(help="Re-plan every this many seconds.")] = 900.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="One line per planned or moved run (default: one per policy and day).")] = False,
) -> None:
    """Plan each policy's runs, keep them in a persistent store, trigger the deployments at the chosen times.

    Needs a Prefect server (PREFECT_API_URL) with the deployments (`gridshift deploy POLICY --no-schedule`).
    A run whose trigger fails is retried with backoff until its latest start, then recorded as missed.
    """
    from flows.deployments.serving import PrefectNotReady, check_prefect, prefect_api_url, quiet_prefect_environment

    quiet_prefect_environment()  # before Prefect is imported: no ephemeral server, no telemetry
    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy

    try:
        loaded = [(p, load_policy(p)) for p in policies]
    except PolicyError as exc:
        raise fail(exc, EXIT_INPUT) from None
    for path, pol in loaded:
        if pol.job.cron is None:
            raise fail(f"{path}: job.cron: serve needs a recurring job (e.g. cron: '0 1 * * *')", EXIT_INPUT)
    names = list(deployment or [])
    if names and len(names) != len(loaded):
        raise fail("give one --deployment per policy, or none", EXIT_INPUT)
    targets = names or [f"gridshift-nightly/{pol.job.name}" for _, pol in loaded]
    try:
        check_prefect(prefect_api_url(), targets)
    except PrefectNotReady as exc:
        raise fail(exc, EXIT_ENV) from None

    from flows.deployments.deploy import trigger_deployment
    from scheduler.service.serve import PlanningService, default_store_path

    _free_lost_slots([pol for _, pol in loaded])

    store = db or default_store_path()
    service = PlanningService(db_path=store, plan=serve_plan(loaded, targets), trigger=trigger_deployment,
                              poll_interval_s=poll_s, log=lambda m: typer.echo(f"gridshift serve: {m}", err=True),
                              verbose=verbose)
    stopped_by: list[int] = []

    def _stop(signum: int, _frame: object) -> None:
        stopped_by.append(signum)
        service.stop()

    from backends.safety import stop_signals

    for sig in stop_signals():
        signal.signal(sig, _stop)
    typer.echo(f"gridshift serve: {len(loaded)} policies, store {store}, re-planning every {poll_s:.0f} s", err=True)
    service.run_forever()
    if stopped_by:
        typer.echo(f"gridshift serve: stopped by {signal.Signals(stopped_by[0]).name}", err=True)
        raise typer.Exit(128 + stopped_by[0])


def _free_lost_slots(policies: list[Any]) -> None:
    """At start, free GPU slots that a restarted server's lost leases left taken (policies with sites)."""
    from flows.fleet.names import gpu_limit_name
    from flows.fleet.slots import free_lost_slots

    limits = sorted({gpu_limit_name(s.name) for pol in policies for s in pol.sites})
    if limits:
        try:
            free_lost_slots(limits, announce=lambda m: typer.echo(f"gridshift serve: {m}", err=True))
        except Exception as exc:  # the check runs again on the runs' own waits and releases
            typer.echo(f"gridshift serve: could not check the GPU slots ({type(exc).__name__}: {exc})", err=True)


def serve_plan(loaded: list[tuple[Path, Any]], targets: list[str], monitors: list[Any] | None = None,
               ) -> Callable[[datetime], list[Any]]:
    """``plan(now)`` for the service: each policy's coming runs, with their deployment and latest start.

    ``monitors`` (one per policy) default to the policies' own carbon chains. A policy whose carbon
    signal is down keeps its stored plan (its runs are simply not re-planned).
    """
    from dataclasses import replace

    from flows.sources import monitor_for
    from scheduler.planner.inputs import plan_runs
    from scheduler.service.serve import PlannedRun, latest_start

    if monitors is None:
        monitors = [monitor_for(pol) for _, pol in loaded]

    def plan(now: datetime) -> list[PlannedRun]:
        runs: list[PlannedRun] = []
        for (path, pol), mon, target in zip(loaded, monitors, targets):
            try:
                reading = mon.read(now)
            except Exception as exc:
                typer.echo(f"gridshift serve: {path}: carbon signal unavailable ({exc}); keeping the stored plan", err=True)
                continue
            gate = _gate(mon, pol, reading, now)
            for run in plan_runs(pol, reading.series, now=now, extra={"deployment": target, "policy_path": str(path)},
                                 gate=gate):
                nominal = datetime.fromisoformat(run.kwargs["nominal_start"])
                runs.append(replace(run, latest_start=latest_start(nominal, deadline_s=pol.job.deadline_s,
                                                                     work_s=pol.job.expected_duration_s)))
        return runs

    return plan


def _gate(monitor: Any, policy: Any, reading: Any, now: datetime) -> Callable[[datetime], tuple[Any, str | None]]:
    """Each occurrence's forecast under the do-no-harm gate (:func:`flows.sources.forecast_choice`)."""
    from flows.sources import forecast_choice, signal_reading
    from scheduler.loop.loop import pick_signal
    from scheduler.planner.inputs import policy_figures
    from scheduler.run_spec import resolve_run

    spec, said = resolve_run(policy), signal_reading(reading)
    figures = policy_figures(policy) if spec.planned else []

    def gate(nominal: datetime) -> tuple[Any, str | None]:
        choice = forecast_choice(monitor, spec, figures, reading, nominal=nominal, now=now)
        return pick_signal(said, choice, now), (choice.reason if choice.static else None)

    return gate
