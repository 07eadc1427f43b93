"""The price-source seam: one small interface every electricity-price source implements.

A price source is built for one zone with its options and answers one question:
``prices(start=, end=, now=)``, the prices of ``[start, end)`` that had been published by ``now``
(:class:`carbon.prices.series.PriceSeries`). Like the carbon providers it raises only
:mod:`carbon.errors` classes (the web sources share their HTTP client, retries and error tables:
:mod:`carbon.providers._http`), never reads the clock, and is closed with ``close()``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from datetime import datetime
from typing import Callable, ClassVar

import httpx

from carbon.errors import BadResponse, CarbonError, UnknownZone
from carbon.prices.day_ahead import DayAheadMarket, market_for
from carbon.prices.series import PricePoint, PriceSeries
from carbon.providers._http import DEFAULT_TIMEOUT_S, build_api

__all__ = ["HttpPriceSource", "PriceSource", "price_number"]


class PriceSource(ABC):
    """Base class for electricity-price sources."""

    #: registry name, e.g. ``"energycharts"``
    name: ClassVar[str] = ""
    zone: str = ""
    currency: str = ""
    market: DayAheadMarket | None = None

    @abstractmethod
    def prices(self, *, start: datetime, end: datetime, now: datetime) -> PriceSeries:
        """The prices of ``[start, end)`` published by ``now``; NoCoverage when there are none."""

    def close(self) -> None:
        """Release connections; a no-op for offline sources."""

    def __enter__(self) -> "PriceSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def price_number(value: object, *, provider: str, what: str = "price") -> float:
    """A finite number from a body (prices may be negative), or a BadResponse."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadResponse(f"{what} is not a number: {value!r}", provider=provider)
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise BadResponse(f"{what} must be a finite number, got {value!r}", provider=provider)
    return number


class HttpPriceSource(PriceSource):
    """A web price source: the carbon providers' client (retries on 429/5xx, one error map), a day-ahead market.

    A price the server already serves at ``now`` is published: its ``published_at`` is the market's
    publication time, or ``now`` when that would lie later (the server knew before the rule said).
    """

    default_base_url: ClassVar[str] = ""

    def __init__(self, *, zone: str, base_url: str | None = None, market: str | None = None,
                 client: httpx.Client | None = None, transport: httpx.BaseTransport | None = None,
                 timeout_s: float | str = DEFAULT_TIMEOUT_S, retries: int | str = 2, backoff_s: float | str = 0.5,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.zone = zone
        found = market_for(market or zone)
        if market is not None and found is None:
            raise UnknownZone(f"unknown day-ahead market {market!r} (known: SDAC, ERCOT)", provider=self.name)
        self.market = found
        self.api = build_api(self.name, base_url=base_url or self.default_base_url, client=client, transport=transport,
                             timeout_s=timeout_s, retries=retries, backoff_s=backoff_s, sleep=sleep,
                             status_overrides=self.status_overrides(), classify=self.classify)

    def status_overrides(self) -> dict[int, type[CarbonError]]:
        return {}

    def classify(self, response: httpx.Response) -> tuple[type[CarbonError], str] | None:
        return None

    def point(self, start: datetime, end: datetime, per_mwh: float, *, now: datetime) -> PricePoint:
        published = self.market.published_at(start) if self.market is not None else None
        if published is not None and published > now:
            published = now
        return PricePoint(start=start, duration=end - start, per_mwh=per_mwh, published_at=published,
                          source=f"{self.name}:{self.zone}")

    def close(self) -> None:
        self.api.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(zone={self.zone!r}, base_url={self.api.base_url!r})"
