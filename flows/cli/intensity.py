"""The grid signal: ``gridshift intensity --provider NAME [--zone Z] [--base-url URL] [--forecast] [--json]``,
``gridshift prices --source NAME [--zone Z] [--json]`` (the electricity prices published now) and
``gridshift forecasts [--provider P] [--zone Z] [--json]`` (every archived forecast, scored)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_INPUT, fail


def _options(option: list[str] | None, zone: str | None, base_url: str | None) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for item in option or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--option expects KEY=VALUE, got {item!r}", 2)
        opts[key] = value
    if zone is not None:
        opts["zone"] = zone
    if base_url is not None:
        opts["base_url"] = base_url
    return opts


@app.command()
def prices(
    source: Annotated[str, typer.Option(help="energycharts (EU bidding zones), awattar (DE, AT), trace (-o path=FILE)")] = "energycharts",
    zone: Annotated[Optional[str], typer.Option(help="Bidding zone: DE-LU, AT, FR, ... (Energy-Charts), DE or AT (aWATTar).")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="Replace the source's scheme and host.")] = None,
    hours: Annotated[float, typer.Option(help="How far ahead to show (published prices only).")] = 48.0,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Source option KEY=VALUE (e.g. path=prices.csv, market=ERCOT).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print the electricity prices published now for the hours ahead (what a priced plan would use)."""
    from carbon.errors import CarbonError
    from carbon.prices import get_price_source
    from carbon.prices.registry import UnknownPriceSource

    if hours <= 0:
        raise fail(f"--hours must be positive, got {hours:g}", 2)
    opts = _options(option, zone, base_url)
    if source == "trace" and "path" not in opts:
        raise fail("price source 'trace' reads a file: give -o path=FILE (timestamp,price per MWh)", 2)
    now = datetime.now(timezone.utc)
    start = now.replace(minute=0, second=0, microsecond=0)
    try:
        with get_price_source(source, **opts) as p:
            got = p.prices(start=start, end=start + timedelta(hours=hours), now=now)
    except UnknownPriceSource as exc:  # a typo on the command line is bad input, as an unknown carbon provider is
        raise fail(exc, 2) from None
    except CarbonError as exc:  # every source failure: one line, exit 3 (a bad price file: 2)
        raise fail(exc) from None
    except TypeError as exc:
        raise fail(f"price source {source!r} does not take these options: {exc}", 2) from None
    except ValueError as exc:
        raise fail(f"{source}: {exc}", 2) from None
    values = got.values()
    market = p.market.describe() if p.market is not None else "publication time not known"
    if json_out:
        typer.echo(json.dumps({"source": source, "zone": got.zone, "currency": got.currency, "unit": "per MWh",
                               "published": market, "points": [{"start": q.start.isoformat(), "per_mwh": q.per_mwh,
                                                                "published_at": q.published_at.isoformat()
                                                                if q.published_at else None} for q in got]}))
        return
    typer.echo(f"{source}{' ' + got.zone if got.zone else ''}: {len(values)} prices published from {got.start:%Y-%m-%d %H:%M} to "
               f"{got.end:%Y-%m-%d %H:%M} UTC ({market})")
    typer.echo(f"  {got.currency}/MWh: min {min(values):.2f}, mean {sum(values) / len(values):.2f}, max {max(values):.2f}"
               + (f"; {sum(v < 0 for v in values)} below zero" if min(values) < 0 else ""))


@app.command()
def intensity(
    provider: Annotated[str, typer.Option(help="trace, static, electricitymaps, watttime, ukgrid, casdk")] = "trace",
    zone: Annotated[Optional[str], typer.Option(help="Zone / region / location, as the provider names it.")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="Replace the provider's scheme and host.")] = None,
    forecast: Annotated[bool, typer.Option("--forecast", help="Include the forecast.")] = False,
    horizon_h: Annotated[float, typer.Option(help="Forecast horizon in hours.")] = 24.0,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Provider option KEY=VALUE (e.g. path=trace.csv).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print the grid carbon intensity now (and the forecast)."""
    from carbon.errors import CarbonError
    from carbon.providers import get_provider

    if horizon_h <= 0:
        raise fail(f"--horizon-h must be positive (hours ahead), got {horizon_h:g}", 2)
    opts = _options(option, zone, base_url)
    now = datetime.now(timezone.utc)
    try:
        with get_provider(provider, **opts) as p:
            point = p.current(now=now)
            points = list(p.forecast(now=now, horizon=timedelta(hours=horizon_h))) if forecast else []
    except CarbonError as exc:  # every provider failure: one line, exit 3 (BadTrace: 2)
        raise fail(exc) from None
    except TypeError as exc:
        raise fail(f"provider {provider!r} does not take these options: {exc}", 2) from None
    except ValueError as exc:  # a bad option value (e.g. -o timeout_s=abc)
        raise fail(f"{provider}: {exc}", 2) from None
    out: dict[str, Any] = {
        "provider": provider,
        "zone": zone or getattr(p, "zone", "") or "",
        "kind": point.kind,
        "unit": "gCO2/kWh",
        "now": {"start": point.start.isoformat(), "g_per_kwh": point.g_per_kwh, "estimated": point.estimated},
    }
    if forecast:
        out["forecast"] = [{"start": q.start.isoformat(), "g_per_kwh": q.g_per_kwh} for q in points]
    if json_out:
        typer.echo(json.dumps(out))
        return
    typer.echo(f"{provider} {out['zone']}: {point.g_per_kwh:.0f} gCO2/kWh ({point.kind}{', estimated' if point.estimated else ''}) "
               f"since {point.start:%Y-%m-%d %H:%M} UTC")
    for q in points:
        typer.echo(f"  {q.start:%Y-%m-%d %H:%M}  {q.g_per_kwh:7.0f}")


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
