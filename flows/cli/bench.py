"""``gridshift bench zeus-trace``: replay the Zeus NSDI'23 traces under gridshift's and Zeus's policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli import app
from flows.cli._errors import EXIT_FAILED, EXIT_INPUT, fail

bench_app = typer.Typer(help="Trace-driven benchmarks that print ratios against baselines.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("zeus-trace")
def zeus_trace(
    train: Annotated[Path, typer.Option("--train", help="summary_train.csv of the Zeus NSDI'23 traces.")],
    power: Annotated[Path, typer.Option("--power", help="summary_power_<gpu>.csv (the GPU is taken from the name).")],
    workload: Annotated[str, typer.Option("--workload", help="Dataset: cifar100, imagenet, squad, librispeech, movielens-1m, sentiment140.")],
    recurrences: Annotated[int, typer.Option("--recurrences", min=1, help="Recurrences of the job.")] = 50,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the simulation and Thompson streams.")] = 0,
    eta: Annotated[float, typer.Option("--eta", min=0.0, max=1.0, help="Weight of energy in the cost.")] = 0.5,
    beta: Annotated[float, typer.Option("--beta", min=0.0, help="Early stopping at beta x the cheapest recurrence.")] = 2.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Cumulative cost of gridshift's policy and of a Zeus replica on one workload x GPU, with baselines."""
    _run(train=train, power=power, workload=workload, recurrences=recurrences, seed=seed, eta=eta, beta=beta, as_json=as_json)


def _run(*, train: Path, power: Path, workload: str, recurrences: int, seed: int, eta: float, beta: float, as_json: bool) -> None:
    from plans.errors import BadTraceFile, SimulationAborted
    from plans.zeus_trace import bench_zeus_trace

    if beta <= 0:
        raise fail("--beta must be positive", EXIT_INPUT)
    try:
        out = bench_zeus_trace(train=train, power=power, workload=workload, recurrences=recurrences, seed=seed, eta=eta, beta=beta)
    except BadTraceFile as exc:
        raise fail(exc, EXIT_INPUT) from None
    except SimulationAborted as exc:
        raise fail(f"simulation aborted: {exc}", EXIT_FAILED) from None
    if as_json:
        typer.echo(json.dumps(out))
        return
    per_oracle = recurrences * out["oracle_cost_per_run"]
    typer.echo(f"{out['workload']} on {out['gpu']}: {recurrences} recurrences, seed {seed} (modelled from traces)")
    for name in ("gridshift", "zeus_replica"):
        r = out[name]
        typer.echo(
            f"  {name:13s} cost {r['cumulative_cost']:.4g}  x{r['cumulative_cost'] / per_oracle:.3f} of oracle  "
            f"energy {r['cumulative_energy_j']:.4g} J  time {r['cumulative_time_s']:.4g} s  final b={r['final'][0]} p={r['final'][1]} W"
        )
    typer.echo(f"  default       x{out['default_cost_per_run'] / out['oracle_cost_per_run']:.3f} of oracle per run")
