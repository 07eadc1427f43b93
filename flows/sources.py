"""Build the carbon failover chain from a policy (the composition root for carbon providers), and the gate on its forecast."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Sequence

from carbon.forecasts.archive import ForecastArchive
from carbon.monitor import CarbonMonitor, Reading, SourceSpec
from carbon.providers import get_provider
from carbon.providers.base import Provider
from scheduler.loop.archive_record import archive_records
from scheduler.loop.gate import ForecastChoice, NightPlanner, choose_forecast
from scheduler.loop.loop import SignalReading
from scheduler.planner import ModeFigures
from scheduler.run_spec import RunSpec
from scheduler.store.ledger import gridshift_home
from scheduler.policy.types import CarbonConfig, CarbonSource, Policy

__all__ = ["carbon_cache_dir", "forecast_archive_path", "forecast_choice", "monitor_for", "provider_for", "signal_reading"]


def provider_for(source: CarbonSource) -> Provider:
    options: dict[str, Any] = dict(source.options)
    if source.zone is not None:
        options.setdefault("zone", source.zone)
    if source.base_url is not None:
        options["base_url"] = source.base_url
    return get_provider(source.provider, **options)


def _label(source: CarbonSource) -> str:
    return source.provider + (f"[{source.zone}]" if source.zone else "")


def _identity(source: CarbonSource) -> dict[str, Any]:
    # what decides the source's data: hashed into its cache key (secrets are dropped there)
    return {"provider": source.provider, "zone": source.zone, "base_url": source.base_url, **source.options}


def carbon_cache_dir() -> Path:
    """Where the carbon monitor keeps fetched intensities: ``$GRIDSHIFT_HOME/carbon-cache``."""
    return gridshift_home() / "carbon-cache"


def forecast_archive_path() -> Path:
    """Where every forecast gridshift receives or computes is kept: ``$GRIDSHIFT_HOME/forecasts.sqlite``."""
    return gridshift_home() / "forecasts.sqlite"


def monitor_for(source: Policy | CarbonConfig) -> CarbonMonitor:
    """The failover monitor of a carbon chain (``RunSpec.carbon``), or of a policy's."""
    carbon = source.carbon if isinstance(source, Policy) else source
    chain = [carbon, *carbon.fallbacks]
    specs = [SourceSpec(label=_label(s), build=(lambda s=s: provider_for(s)), options=_identity(s)) for s in chain]
    return CarbonMonitor(specs, forecast_horizon=timedelta(seconds=carbon.forecast_horizon_s),
                         max_staleness=timedelta(seconds=carbon.max_staleness_s),
                         cache_dir=carbon_cache_dir(), archive=ForecastArchive(forecast_archive_path()))


def forecast_choice(monitor: CarbonMonitor, spec: RunSpec, figures: Sequence[ModeFigures], reading: Reading, *,
                    nominal: datetime, now: datetime) -> ForecastChoice:
    """The do-no-harm gate for the night at ``nominal``: which forecast the planner may plan on, if any.

    Each forecast the reading offers (the fused one and the forecasts it was made of) is scored on
    the archive's record of past nights (:func:`scheduler.loop.archive_record.archive_records`);
    :func:`scheduler.loop.gate.choose_forecast` picks. Threshold rules and ``rules.forecast_gate:
    false`` trust the monitor's forecast as it is.
    """
    if not spec.planned or not getattr(spec.rules, "forecast_gate", True):
        return ForecastChoice()
    if monitor.archive is None:
        return ForecastChoice(None, "no forecast archive to keep a record in: the static plan (cron start, frugal modes)")
    said = signal_reading(reading)
    labels = [said.label, *said.alternatives] if said.label else list(said.alternatives)
    records = archive_records(monitor.archive, NightPlanner(spec, figures), labels=labels, zone=reading.series.zone,
                              nominal=nominal, now=now)
    return choose_forecast(records, names={label: label.removeprefix("forecast:") for label in labels})


def signal_reading(reading: Reading) -> SignalReading:
    """A monitor reading as the run loop's signal: its forecast by its archive label, its value now, and the
    forecasts a fused one was made of."""
    label = reading.source if reading.forecast_by == "provider" else reading.forecast_by
    return SignalReading(signal=reading.series, value_now=reading.current.g_per_kwh, label=label,
                         alternatives=dict(reading.alternatives))
