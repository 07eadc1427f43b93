"""``gridshift policy check FILE...`` and ``gridshift policy schema``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo
from typing import Annotated

import typer

from flows.cli import app
from flows.cli._errors import EXIT_INPUT

policy_app = typer.Typer(help="Check policy files and print their JSON schema.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


@policy_app.command("check")
def check(
    files: Annotated[list[Path], typer.Argument(help="Policy YAML files to validate.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object: each file with its errors.")] = False,
) -> None:
    """Validate policy files: every error as `file:line:col: path: message`; exit 2 if any file is bad.

    Checks the schema and what the schema cannot: providers, backends, cron and time zone, the job's
    command and working directory, trace and clock-plan files (relative paths are read from the
    policy's folder). A recurring job's next five runs are shown in the policy's time zone and UTC (`next_runs`
    in --json, ISO-8601 UTC, and `next_runs_local`), read as Prefect's deployment schedule reads the cron.
    """
    from scheduler.policy.checks import policy_warnings
    from scheduler.policy.cron import next_runs
    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy

    now = datetime.now(timezone.utc)
    results = []
    for f in files:
        try:
            policy = load_policy(f)
        except PolicyError as exc:
            results.append({"file": str(f), "ok": False, "errors": [i.to_json() for i in exc.issues],
                            "hidden_errors": exc.hidden, "warnings": [], "next_runs": []})
            if not json_out:
                for line in exc.lines():
                    typer.echo(line, err=True)
            continue
        job = policy.job
        runs = next_runs(job.cron, now, tz=job.timezone) if job.cron is not None else []
        zone = ZoneInfo(job.timezone)
        warnings = policy_warnings(policy)
        results.append({"file": str(f), "ok": True, "errors": [], "hidden_errors": 0, "warnings": warnings,
                        "next_runs": [t.isoformat() for t in runs],
                        "next_runs_local": [t.astimezone(zone).isoformat() for t in runs]})
        if not json_out:
            price = f"; price {policy.price.provider}" if policy.price is not None else ""
            cp = policy.objective.carbon_price
            goal = "" if cp is None else f"; objective cost + carbon at {cp:g}/t" if cp else "; objective cost only"
            typer.echo(f"{f}: ok ({job.name}: modes {', '.join(policy.modes)}; carbon {policy.carbon.provider}{price}; "
                       f"rule {policy.rules.kind}{goal}; backend {policy.backend.name})")
            if runs:
                typer.echo(f"  next runs ({job.cron!r} in {job.timezone}): " + ", ".join(_both_zones(t, zone) for t in runs))
            for warning in warnings:
                typer.echo(f"{f}: warning: {warning}", err=True)
    bad = sum(not r["ok"] for r in results)
    if json_out:
        typer.echo(json.dumps({"status": "error" if bad else "ok", "exit_code": EXIT_INPUT if bad else 0,
                               "files": results}, sort_keys=True))
    if bad:
        raise typer.Exit(EXIT_INPUT)


def _both_zones(t: datetime, zone: ZoneInfo) -> str:
    """``Mon 2026-12-07 01:00 CET (00:00 UTC)``: the policy's own clock first, UTC beside it (UTC alone for UTC)."""
    local = t.astimezone(zone)
    if local.utcoffset() == timedelta(0) and str(zone) in ("UTC", "Etc/UTC"):
        return f"{t:%a %Y-%m-%d %H:%M} UTC"
    return f"{local:%a %Y-%m-%d %H:%M} {local.tzname()} ({t:%H:%M} UTC)"


@policy_app.command("schema")
def schema() -> None:
    """Print the JSON schema of policy files (for editors)."""
    from scheduler.policy.schema import policy_json_schema

    typer.echo(policy_json_schema())
