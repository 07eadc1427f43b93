"""``gridshift forecasts [--provider P] [--zone Z] [--json]``: every archived forecast, scored."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Annotated, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_INPUT, fail


@app.command()
def forecasts(
    provider: Annotated[Optional[str], typer.Option(help="Only this provider (as archived: a source label, forecast:daily_profile, forecast:fused).")] = None,
    zone: Annotated[Optional[str], typer.Option(help="Only this zone.")] = None,
    earliest_hour: Annotated[int, typer.Option(min=0, max=23, help="The job window's earliest start, hour UTC.")] = 21,
    latest_start_h: Annotated[int, typer.Option(min=0, help="Hours after the earliest start that the job may still start.")] = 8,
    run_h: Annotated[int, typer.Option(min=1, help="Hours the job runs.")] = 3,
    reference_h: Annotated[int, typer.Option(min=0, help="Hours after the earliest start of the cron (nominal) start.")] = 4,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Per provider and lead: bias and MAPE; per past night: rank correlation and the start gain it captured."""
    from carbon.forecasts.archive import ForecastArchive
    from carbon.forecasts.scorecard import scorecard
    from carbon.forecasts.skill import StartWindow
    from flows.sources import forecast_archive_path

    path = forecast_archive_path()
    if not path.exists():
        raise fail(f"{path}: no forecast archive yet (gridshift keeps one from its first run)", EXIT_INPUT)
    window = StartWindow(reference=reference_h, starts=tuple(range(latest_start_h + 1)), length=run_h)
    now = datetime.now(timezone.utc)
    with ForecastArchive(path) as archive:
        pairs = [(p, z) for p, z in archive.providers() if (provider is None or p == provider) and (zone is None or z == zone)]
        cards = [scorecard(archive, provider=p, zone=z, now=now, origin_hour=earliest_hour, window=window) for p, z in pairs]
    if json_out:
        typer.echo(json.dumps({"archive": str(path), "window": {"earliest_hour_utc": earliest_hour, "reference_h": reference_h,
                                                                "latest_start_h": latest_start_h, "run_h": run_h},
                               "measured": "forecasts as archived against intensities observed",
                               "providers": [c.as_dict() for c in cards]}, sort_keys=True))
        return
    if not cards:
        typer.echo(f"no archived forecasts{' matching' if provider or zone else ''} in {path}")
        return
    typer.echo(f"forecasts archived in {path} (measured: forecast vs observed intensity); nights start {earliest_hour:02d}:00 "
               f"UTC, a {run_h} h job may start up to {latest_start_h} h later")
    for c in cards:
        share = "-" if c.start_gain_share is None else f"{c.start_gain_share:.0%}"
        rho = "-" if c.rank_correlation is None else f"{c.rank_correlation:.2f}"
        typer.echo(f"{c.provider} [{c.zone}]: {c.nights} nights scored; start gain captured {share}; "
                   f"night-hour rank correlation {rho}")
        typer.echo(f"  {'lead h':>6} {'n':>6} {'bias g/kWh':>11} {'MAPE %':>7}")
        for s in c.leads:
            mape = "-" if s.mape_pct is None else f"{s.mape_pct:.1f}"
            typer.echo(f"  {s.lead_h:>6} {s.n:>6} {s.bias_g_per_kwh:>11.1f} {mape:>7}")
