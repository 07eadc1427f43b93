"""``gridshift run POLICY [-- CMD ...]`` and ``gridshift runs``."""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_FAILED, exit_code_for_type, fail


def _quiet_prefect_defaults() -> None:
    """Offline-friendly Prefect defaults; users' explicit settings win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")


def _terminate_as_exception(signum: int, _frame: Any) -> None:
    # Turn SIGTERM into an exception so every `finally` (settings restore, report) runs.
    raise SystemExit(128 + signum)


#: exit code of a run stopped by SIGINT / SIGTERM (128 + signal number, as shells report it)
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM


def _exit_code_of(report: dict[str, Any]) -> int:
    """The exit code for a recorded failed run, from the class of the error that failed it."""
    module, _, qualname = str(report.get("extra", {}).get("error_type", "")).partition(":")
    if (module, qualname) == ("builtins", "SystemExit"):  # the signal handlers raise SystemExit(128 + signum)
        return EXIT_TERMINATED
    if (module, qualname) == ("builtins", "KeyboardInterrupt"):
        return EXIT_INTERRUPTED
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError, ValueError):  # no type recorded (a failed job) or gone since
        return EXIT_FAILED
    return exit_code_for_type(cls) if isinstance(cls, type) and issubclass(cls, BaseException) else EXIT_FAILED


def _human(report: dict[str, Any]) -> str:
    label = "measured" if report["measured"] else "SIMULATED - modelled, not measured"
    lines = [
        f"gridshift run {report['run_id']}: {report['status']}",
        f"  job        {report['job']} (backend {report['backend']})",
        f"  decision   {report['modes'][0]['mode'] + ' mode: ' if report['modes'] else ''}{report['decision_reason']}",
        f"  start      {report['started_at'][:19].replace('T', ' ')} UTC (deferred {report['deferred_s']:.0f} s)",
        f"  duration   {report['duration_s']:.1f} s",
        f"  energy     {report['energy_j']:.1f} J ({label})",
        f"  carbon     {report['carbon_g']:.4f} g CO2eq",
        f"  intensity  {report['intensity_g_per_kwh']:.0f} gCO2/kWh ({report['intensity_kind']}, {report['intensity_source']})",
    ]
    if len(report["modes"]) > 1:
        lines.append("  modes      " + " -> ".join(f"{m['mode']}@{m['start'][11:19]}" for m in report["modes"]))
    extra = report.get("extra", {})
    if "power_limit_auto" in extra:
        lines.append(f"  power      {extra['power_limit_auto']['reason']}")
    if "clock_plan" in extra:
        plan = extra["clock_plan"]
        lines.append(f"  clock plan {plan['file']} (modelled: {plan['predicted_energy_saving_pct']:.1f}% less energy, "
                     f"{plan['predicted_slowdown_pct']:+.1f}% time; run in-process by PlanExecutor)")
    for w in report.get("warnings", []):
        lines.append(f"  warning    {w}")
    if report.get("error"):
        lines.append(f"  error      {report['error']}")
    return "\n".join(lines)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def run(
    policy: Annotated[Path, typer.Argument(help="Policy YAML file.")],
    command: Annotated[Optional[list[str]], typer.Argument(help="Training command after `--` (overrides the policy's job).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout; logs go to stderr.")] = False,
    backend: Annotated[Optional[str], typer.Option(help="Override the policy's backend (auto, nvidia, simulated, ...).")] = None,
) -> None:
    """Run the job under POLICY through a Prefect flow and report energy, time and carbon."""
    from flows.preflight import PreflightError, preflight_run
    from scheduler.errors import PolicyError
    from scheduler.ledger import Ledger

    try:
        preflight_run(policy, command=command, backend=backend)  # bad input, unusable machine: before Prefect starts
    except (PolicyError, PreflightError) as exc:
        raise fail(exc) from None
    _quiet_prefect_defaults()
    from flows.training import carbon_aware_training, new_run_id, quiet_domain_tracebacks

    quiet_domain_tracebacks()

    previous = signal.signal(signal.SIGTERM, _terminate_as_exception)
    run_id = new_run_id()
    real_stdout = sys.stdout
    state: Any = None
    terminated = interrupted = False
    try:
        # Prefect and the job may print; keep stdout for the report alone.
        sys.stdout = sys.stderr
        state = carbon_aware_training(policy_path=str(policy), run_id=run_id, command=command or None,
                                      backend_name=backend, return_state=True)
    except SystemExit as exc:  # SIGTERM: the flow restored settings and recorded the run on the way out
        if exc.code != EXIT_TERMINATED:
            raise
        terminated = True
    except KeyboardInterrupt:  # Ctrl-C: same as SIGTERM, but the shell's convention is 130
        terminated = interrupted = True
    finally:
        sys.stdout = real_stdout
        signal.signal(signal.SIGTERM, previous)
    with Ledger() as ledger:
        # by key: a list of recent runs could miss this one while other runs finish concurrently
        report = ledger.get(run_id)
    if report is None:
        if terminated:
            print("gridshift: terminated before the run was recorded", file=sys.stderr)
            raise typer.Exit(130 if interrupted else EXIT_TERMINATED)
        exc = state.result(raise_on_failure=False)
        raise fail(exc if isinstance(exc, BaseException) else f"run {run_id} failed before it could be recorded")
    if json_out:
        typer.echo(json.dumps(report, sort_keys=True))
    else:
        typer.echo(_human(report))
    if report["status"] != "completed":
        code = (130 if interrupted else EXIT_TERMINATED) if terminated else _exit_code_of(report)
        if terminated:
            restored = "settings may not be restored" not in (report["error"] or "")
            typer.echo("gridshift: terminated; " + ("settings restored" if restored else
                       "settings may not be restored: run `gridshift gpu restore`") + ", run recorded as failed",
                       err=True)
        elif not json_out:
            typer.echo(f"gridshift: error: {report['error'] or 'the run failed'}", err=True)
        raise typer.Exit(code)


@app.command()
def runs(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    job: Annotated[Optional[str], typer.Option(help="Only runs of this job.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs, newest first.")] = 20,
) -> None:
    """List recorded runs (newest first) from the ledger."""
    from scheduler.ledger import Ledger

    with Ledger() as ledger:
        rows = ledger.runs(job=job, limit=limit)
    for r in rows:  # on stderr, so --json stays one object on stdout
        if r.get("late_s"):
            typer.echo(f"warning: run {r['run_id']} of {r['job']} finished {r['late_s']:.0f} s after its deadline", err=True)
    if json_out:
        typer.echo(json.dumps(rows, sort_keys=True))
        return
    if not rows:
        typer.echo(f"no runs of job {job!r} recorded (ledger: {ledger.path})" if job else f"no runs recorded yet (ledger: {ledger.path})")
        return
    typer.echo(f"{'run id':<24} {'job':<16} {'status':<9} {'backend':<10} {'energy J':>10} {'carbon g':>9} {'time s':>8}")
    for r in rows:
        tag = "" if r["measured"] else "*"
        typer.echo(f"{r['run_id']:<24} {r['job'][:16]:<16} {r['status']:<9} {r['backend']:<10} "
                   f"{r['energy_j']:>9.1f}{tag or ' '} {r['carbon_g']:>9.4f} {r['duration_s']:>8.1f}")
    if any(not r["measured"] for r in rows):
        typer.echo("* simulated backend: modelled energy")
