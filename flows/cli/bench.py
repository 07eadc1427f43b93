"""``gridshift bench zeus-trace``: replay the Zeus NSDI'23 traces under gridshift's and Zeus's policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_FAILED, EXIT_INPUT, fail
from flows.cli._progress import Progress

#: where the traces come from: they are not shipped with gridshift (a checkout beside the shared
#: data folder has them at ../shared/data/zeus/trace)
ZEUS_TRACES_HINT = ("The Zeus NSDI'23 traces are not shipped with gridshift: copy summary_train.csv and "
                    "summary_power_<gpu>.csv from github.com/ml-energy/zeus, tag zeus-v0.16.0, folder "
                    "examples/research_reproducibility/zeus_nsdi23/trace/ (Apache-2.0), or try the synthetic "
                    "self-check: --traces tests/data/zeus")

bench_app = typer.Typer(help="Trace-driven benchmarks that print ratios against baselines.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"3"`` -> [3]; ``"1,5"`` -> [1, 5]."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            seeds.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    except ValueError:
        raise fail(f"--seeds {text!r}: expected N, N-M or a comma list", EXIT_INPUT) from None
    if not seeds:
        raise fail(f"--seeds {text!r}: no seeds", EXIT_INPUT)
    return seeds


@bench_app.command("zeus-trace")
def zeus_trace(
    traces: Annotated[Optional[Path], typer.Option("--traces", help="Folder with summary_train.csv and summary_power_<gpu>.csv (e.g. ../shared/data/zeus/trace).")] = None,
    train: Annotated[Optional[Path], typer.Option("--train", help="summary_train.csv (instead of --traces).")] = None,
    power: Annotated[Optional[list[Path]], typer.Option("--power", help="summary_power_<gpu>.csv, repeatable (the GPU is taken from the name).")] = None,
    workload: Annotated[Optional[list[str]], typer.Option("--workload", help="Dataset, repeatable (default: every workload in the train trace).")] = None,
    reference: Annotated[Optional[Path], typer.Option("--reference", help="zeus_reference.json (default: beside --traces, if there).")] = None,
    recurrences: Annotated[int, typer.Option("--recurrences", min=1, help="Recurrences of the job.")] = 50,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds: N, N-M or a comma list.")] = "0-4",
    eta: Annotated[float, typer.Option("--eta", min=0.0, max=1.0, help="Weight of energy in the cost.")] = 0.5,
    beta: Annotated[float, typer.Option("--beta", help="Early stopping at beta x the cheapest recurrence (> 1).")] = 2.0,
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Also run synthetic cost-curve shapes (an optimum at an edge, a valley past worse sizes, flat, noisy, a cliff) against the Zeus replica.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Mean cumulative cost of never exploring, Zeus, gridshift and the oracle, on every workload x GPU."""
    from plans.errors import BadTraceFile, SimulationAborted
    from plans.zeus_trace import SHAPES, bench_pairs, bench_traces, load_reference, summarise, synthetic_trace, trace_workloads

    if beta <= 1:
        raise fail("--beta must be > 1", EXIT_INPUT)
    seed_list = parse_seeds(seeds)
    if traces is not None:
        if not (traces / "summary_train.csv").is_file() and train is None:
            raise fail(f"--traces {traces}: no summary_train.csv there{'' if traces.is_dir() else ' (no such folder)'}. "
                       f"{ZEUS_TRACES_HINT}", EXIT_INPUT)
        train = train or traces / "summary_train.csv"
        power = power or sorted(traces.glob("summary_power_*.csv"))
        if reference is None and (traces.parent / "zeus_reference.json").is_file():
            reference = traces.parent / "zeus_reference.json"
    if not synthetic:
        if train is None:
            raise fail(f"give --traces DIR, or --train and --power, or --synthetic. {ZEUS_TRACES_HINT}", EXIT_INPUT)
        if not power:
            raise fail(f"no summary_power_<gpu>.csv {'in ' + str(traces) if traces else 'given (--power)'}. "
                       f"{ZEUS_TRACES_HINT}", EXIT_INPUT)
    try:
        ref = load_reference(reference, eta=eta, beta=beta, recurrences=recurrences, seeds=seed_list) if reference else {}
        pairs = []
        if train is not None and power:
            with Progress("replaying the traces", unit="runs") as progress:
                pairs = bench_pairs(train=train, powers=power, workloads=workload or trace_workloads(train),
                                    recurrences=recurrences, seeds=seed_list, eta=eta, beta=beta, reference=ref,
                                    progress=progress)
        if synthetic:
            with Progress("replaying the synthetic shapes", unit="runs") as progress:
                pairs += bench_traces([synthetic_trace(name, eta=eta) for name in SHAPES], recurrences=recurrences,
                                      seeds=seed_list, eta=eta, beta=beta, progress=progress)
    except BadTraceFile as exc:
        raise fail(exc, EXIT_INPUT) from None
    except SimulationAborted as exc:
        raise fail(f"simulation aborted: {exc}", EXIT_FAILED) from None
    summary = summarise(pairs)
    if as_json:
        typer.echo(json.dumps({"recurrences": recurrences, "seeds": seed_list, "eta": eta, "beta": beta,
                               "reference": str(reference) if ref else None,
                               "pairs": [p.to_json() for p in pairs], "summary": summary}))
        return
    with_ref = sum(1 for p in pairs if p.zeus_reference is not None)
    zeus_col = "zeus ref" if with_ref == len(pairs) else "zeus repl" if not with_ref else "zeus"
    typer.echo(f"Zeus trace replay: {recurrences} recurrences, seeds {seeds}, eta {eta:g}, beta {beta:g} "
               f"(modelled from traces; costs are mean cumulative cost / oracle's)")
    wide = max([13] + [len(p.workload) for p in pairs])
    typer.echo(f"{'workload':{wide}s} {'gpu':9s} {'default':>8s} {zeus_col:>9s} {'gridshift':>9s} {'oracle':>7s}  "
               f"{'gs/zeus':>7s}  oracle (b, W)  gridshift finals")
    for p in pairs:
        o = p.oracle_cost
        finals = ",".join(sorted({f"{r.final[0]}@{r.final[1]}" for r in p.gridshift}))
        typer.echo(f"{p.workload:{wide}s} {p.gpu:9s} {p.default_cost / o:8.4f} {p.zeus / o:9.4f} {p.gridshift_mean / o:9.4f} "
                   f"{1.0:7.4f}  {p.gridshift_mean / p.zeus:7.4f}  {p.oracle_config[0]:>5d}@{p.oracle_config[1]:<4d}    {finals}")
    if summary:
        against = "Zeus's own simulator (reference file)" if summary["pairs_with_reference"] == len(pairs) else (
            "the Zeus replica" if not summary["pairs_with_reference"] else "Zeus's reference where given, else the replica")
        typer.echo(f"{summary['pairs']} pairs vs {against}: geometric mean gridshift/zeus {summary['geomean_gridshift_over_zeus']:.4f}, "
                   f"worst {summary['max_gridshift_over_zeus']:.4f}, {summary['pairs_above_zeus']} pair(s) above Zeus; "
                   f"worst gridshift/oracle {summary['max_gridshift_over_oracle']:.4f}")
