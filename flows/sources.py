"""Build the carbon failover chain from a policy (the composition root for carbon providers)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from carbon.forecasts.archive import ForecastArchive
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers import get_provider
from carbon.providers.base import Provider
from scheduler.store.ledger import gridshift_home
from scheduler.policy.types import CarbonConfig, CarbonSource, Policy

__all__ = ["carbon_cache_dir", "forecast_archive_path", "monitor_for", "provider_for"]


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
