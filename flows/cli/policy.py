"""``gridshift policy check FILE`` and ``gridshift policy schema``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli import app
from flows.cli._errors import EXIT_INPUT

policy_app = typer.Typer(help="Check policy files and print their JSON schema.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


@policy_app.command("check")
def check(files: Annotated[list[Path], typer.Argument(help="Policy YAML files to validate.")]) -> None:
    """Validate policy files: prints `file:line:col: path: message` and exits 2 on the first bad one."""
    from scheduler.errors import PolicyError
    from scheduler.policy_io import load_policy

    bad = 0
    for f in files:
        try:
            policy = load_policy(f)
        except PolicyError as exc:
            typer.echo(str(exc), err=True)
            bad += 1
            continue
        typer.echo(f"{f}: ok ({policy.job.name}: modes {', '.join(policy.modes)}; carbon {policy.carbon.provider}; "
                   f"rule {policy.rules.kind}; backend {policy.backend.name})")
    if bad:
        raise typer.Exit(EXIT_INPUT)


@policy_app.command("schema")
def schema() -> None:
    """Print the JSON schema of policy files (for editors)."""
    from scheduler.policy_io import policy_json_schema

    typer.echo(policy_json_schema())
