"""``gridshift intensity --provider NAME [--zone Z] [--base-url URL] [--forecast] [--json]``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Optional

import typer

from flows.cli import app
from flows.cli._errors import fail


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
