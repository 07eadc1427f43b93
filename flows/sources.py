"""Build the carbon failover chain from a policy (the composition root for carbon providers), the gate on its
forecast, and the price chain (the composition root for price sources) with what a run's energy cost at its prices."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from carbon.errors import CarbonError
from carbon.forecasts.archive import ForecastArchive
from carbon.prices import PriceReader, PriceSeries, get_price_source
from carbon.prices.base import PriceSource
from carbon.monitor import CarbonMonitor, Reading, SourceSpec
from carbon.providers import get_provider
from carbon.providers.base import Provider
from scheduler.loop.archive_record import archive_records
from scheduler.loop.gate import ForecastChoice, NightPlanner, choose_forecast
from scheduler.loop.loop import SignalReading
from scheduler.planner import ModeFigures
from scheduler.planner.grid import GridSignal
from scheduler.planner.objective import PriceSignal, price_signal
from scheduler.report import ModeSpan
from scheduler.run_spec import RunSpec
from scheduler.store.ledger import gridshift_home
from scheduler.policy.types import CarbonConfig, CarbonSource, Policy, PriceConfig
from scheduler.policy.types import PriceSource as PriceSourceConfig

__all__ = ["PRICE_AHEAD", "PRICE_BEHIND", "carbon_cache_dir", "forecast_archive_path", "forecast_choice", "monitor_for",
           "price_reader_for", "provider_for", "read_price_signal", "run_cost", "signal_reading"]

#: the prices a decision reads: the last day (the tail's mean) and as far ahead as any market publishes
PRICE_BEHIND = timedelta(days=1)
PRICE_AHEAD = timedelta(days=2)


def _options(source: CarbonSource | PriceSourceConfig) -> dict[str, Any]:
    """A source's constructor options: its ``options``, with its zone (unless they give one) and base URL."""
    options: dict[str, Any] = dict(source.options)
    if source.zone is not None:
        options.setdefault("zone", source.zone)
    if source.base_url is not None:
        options["base_url"] = source.base_url
    return options


def provider_for(source: CarbonSource) -> Provider:
    return get_provider(source.provider, **_options(source))


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
    reader = price_reader_for(spec.price) if spec.objective.priced else None
    try:
        records = archive_records(monitor.archive, NightPlanner(spec, figures), labels=labels, zone=reading.series.zone,
                                  nominal=nominal, now=now, price_of=_night_prices(reader, now) if reader else None)
    finally:
        if reader is not None:
            reader.close()
    return choose_forecast(records, names={label: label.removeprefix("forecast:") for label in labels})


def _night_prices(reader: PriceReader, now: datetime) -> Any:
    """A past night's prices for the gate: as published at its decision, and those that held (hourly), or None."""

    def night(origin: datetime, hours: int) -> tuple[PriceSignal, GridSignal] | None:
        try:
            series = reader.read(start=origin - PRICE_BEHIND, end=origin + timedelta(hours=hours), now=now).series
        except CarbonError:
            return None
        known = price_signal(series, origin)
        means = [series.mean_over(origin + timedelta(hours=h), origin + timedelta(hours=h + 1)) for h in range(hours)]
        if known is None or any(m is None for m in means):
            return None
        return known, GridSignal(np.array(means, dtype=float), 3600.0, 0.0, epoch=origin)

    return night


def signal_reading(reading: Reading) -> SignalReading:
    """A monitor reading as the run loop's signal: its forecast by its archive label, its value now, and the
    forecasts a fused one was made of."""
    label = reading.source if reading.forecast_by == "provider" else reading.forecast_by
    return SignalReading(signal=reading.series, value_now=reading.current.g_per_kwh, label=label,
                         alternatives=dict(reading.alternatives))


def _price_source(source: PriceSourceConfig) -> PriceSource:
    return get_price_source(source.provider, **_options(source))


def price_reader_for(price: PriceConfig | None) -> PriceReader | None:
    """The failover reader of a price chain (``RunSpec.price``); None without a price source."""
    if price is None:
        return None
    chain = [price, *price.fallbacks]
    return PriceReader([(s.provider + (f"[{s.zone}]" if s.zone else ""), (lambda s=s: _price_source(s)))
                        for s in chain])


def read_price_signal(reader: PriceReader, now: datetime) -> tuple[PriceSignal | None, PriceSeries, tuple[str, ...]]:
    """The prices published by ``now`` as the planner's signal, the series read, and the sources that failed.

    Raises :class:`carbon.errors.CarbonError` when no source answers and nothing is held.
    """
    got = reader.read(start=now - PRICE_BEHIND, end=now + PRICE_AHEAD, now=now)
    return price_signal(got.series, now), got.series, got.failures


def run_cost(spans: Sequence[ModeSpan], reader: PriceReader, now: datetime, *, currency: str,
             measured: bool) -> dict[str, Any] | None:
    """What the run's energy cost at the prices of its hours: each span's energy x its mean price (None: no prices)."""
    if not spans:
        return None
    try:
        got = reader.read(start=spans[0].start, end=spans[-1].end, now=now)
    except Exception as exc:  # the report is written whatever the price source does
        return {"total": None, "currency": currency, "error": f"no prices for the run's hours: {exc}"}
    per_span, total, uncovered = [], 0.0, 0
    for s in spans:
        price = got.series.mean_over(s.start, s.end) if s.end > s.start else None
        cost = s.energy_j * price / 3.6e9 if price is not None else None
        uncovered += cost is None
        total += cost or 0.0
        per_span.append({"mode": s.mode, "start": s.start.isoformat(), "end": s.end.isoformat(), "per_mwh": price,
                         "cost": cost})
    return {"total": total, "currency": currency, "source": got.source, "spans": per_span,
            "spans_without_prices": uncovered,
            "label": f"{'measured' if measured else 'modelled'} energy x the published day-ahead price"}
