"""Look price sources up by name. Imports are lazy so offline use never imports HTTP code."""

from __future__ import annotations

from typing import Any

from carbon.errors import CarbonError
from carbon.prices.base import PriceSource
from carbon.providers.registry import option_names, registered_class

__all__ = ["PRICE_SOURCES", "UnknownPriceSource", "get_price_source", "price_source_class", "price_source_names",
           "price_source_option_names"]

#: name -> "module:Class"
PRICE_SOURCES: dict[str, str] = {
    "trace": "carbon.prices.trace:PriceTrace",
    "energycharts": "carbon.prices.energycharts:EnergyChartsPrices",
    "awattar": "carbon.prices.awattar:AwattarPrices",
}


class UnknownPriceSource(CarbonError, LookupError):
    """No price source has that name."""


def price_source_names() -> list[str]:
    return sorted(PRICE_SOURCES)


def price_source_class(name: str) -> type[PriceSource]:
    """The class registered as ``name``, imported now (nothing is constructed)."""
    return registered_class(PRICE_SOURCES, name, UnknownPriceSource, "price source")  # type: ignore[no-any-return]


def price_source_option_names(name: str) -> frozenset[str] | None:
    """The options price source ``name`` accepts (``zone`` and ``base_url`` included)."""
    return option_names(price_source_class(name))


def get_price_source(name: str, **options: Any) -> PriceSource:
    """Build price source ``name`` with ``options`` (zone, base_url, path, market, ...)."""
    return price_source_class(name)(**options)
