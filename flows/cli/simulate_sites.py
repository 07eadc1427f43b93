"""``gridshift simulate-sites POLICY --site NAME=CSV --site NAME=CSV [--json]``: where+when vs when-only vs where-only."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_INPUT, fail
from flows.cli._progress import Progress


def _human(s: dict[str, Any]) -> str:
    from simulation.human_units import figure, mass_unit

    unit, scale = mass_unit(s["fixed_g"])
    rows = [("fixed (home site, nominal start, reference mode)", s["fixed_g"]),
            ("where-only (cleanest forecast at the nominal start)", s["where_only_g"])]
    rows += [(f"static efficiency at {k} (nominal start)", v) for k, v in s["static_efficiency_g"].items()]
    rows += [(f"when-only at {k} (planner, receding horizon)", v) for k, v in s["when_only_g"].items()]
    rows += [("where+when (placement, then the planner there)", s["where_when_g"]),
             ("where+when oracle (perfect foresight, bound)", s["oracle_g"])]
    lines = [f"gridshift simulate-sites: {s['jobs']} jobs, {s['period_start'][:10]} .. {s['period_end'][:10]}, "
             f"sites {', '.join(s['when_only_g'])} (home {s['home_site']}), {s['forecast']} forecast",
             f"  {'strategy':<52} {'CO2 ' + unit:>10} {'where+when saves':>17}"]
    for label, grams in rows:
        saving = 100.0 * (grams - s["where_when_g"]) / grams if grams > 0 else 0.0
        lines.append(f"  {label:<52} {figure(grams, scale):>10} {saving:>16.1f}%")
    lines.append("  where+when ran at " + ", ".join(f"{k} {v:.0%}" for k, v in s["site_share"].items())
                 + f"; deadline misses {s['deadline_misses']}")
    lines.append(f"  credit over the best simple alternative ({s['best_simple']}): {s['saving_vs_best_simple_pct']:.1f}%")
    lines.append(f"  all figures modelled ({s['energy_source']}); intensities are the real traces")
    return "\n".join(lines)


@app.command("simulate-sites")
def simulate_sites(
    policy: Annotated[Path, typer.Argument(help="Policy YAML with a recurring job and two or more sites.")],
    site: Annotated[list[str], typer.Option("--site", help="NAME=CSV: the real trace of that site's grid (repeat; same period).")],
    column: Annotated[Optional[str], typer.Option(help="Intensity column when the traces have several.")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N occurrences.")] = None,
    year: Annotated[Optional[int], typer.Option(help="Only occurrences whose window lies in this calendar year (UTC).")] = None,
    forecast: Annotated[str, typer.Option(help="daily-profile (past data only, the flow's forecaster) or perfect (the trace itself).")] = "daily-profile",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay the job over every site's trace: where+when against when-only and where-only (modelled)."""
    run_sites(policy=policy, site=site, column=column, limit=limit, year=year, forecast=forecast, json_out=json_out)


def run_sites(*, policy: Path, site: list[str], column: str | None, limit: int | None, year: int | None,
              forecast: str, json_out: bool) -> None:
    """``simulate-sites`` (also ``simulate --site``): print the comparison, or exit 2 with one line."""
    from backends.simulated import SimulatedBackend
    from carbon.errors import BadTrace
    from scheduler.planner.mode_figures import figures_for_policy
    from carbon.trace_file import read_trace
    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy
    from simulation.sites import compare_sites

    began = time.perf_counter()
    try:
        pol = load_policy(policy)
        traces = {}
        for spec in site:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path:
                raise PolicyError(f"--site {spec!r}: expected NAME=CSV")
            traces[name] = read_trace(path, column=column)
        unknown = sorted(set(traces) - {s.name for s in pol.sites})
        if unknown:
            raise PolicyError(f"{policy}: sites: no site named {', '.join(unknown)} "
                              f"(sites: {', '.join(s.name for s in pol.sites) or 'none'})")
        modes = figures_for_policy(pol, backend=SimulatedBackend(), policy_path=policy)
        period = None
        if year is not None:
            period = (datetime(year, 1, 1, tzinfo=timezone.utc), datetime(year + 1, 1, 1, tzinfo=timezone.utc))
        with Progress("simulating sites", unit="jobs") as progress:
            result = compare_sites(pol, traces, modes, forecast=forecast, limit=limit, period=period, progress=progress)
    except (PolicyError, BadTrace) as exc:
        raise fail(exc, EXIT_INPUT) from None
    summary = result.summary()
    if summary["jobs"] == 0:
        raise fail("the traces share less than one job window; nothing to simulate", EXIT_INPUT)
    summary["runtime_s"] = time.perf_counter() - began
    typer.echo(json.dumps(summary, sort_keys=True) if json_out else _human(summary))
