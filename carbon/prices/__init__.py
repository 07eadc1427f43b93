"""Electricity prices, the grid's other signal: sources, one series shape, when a price becomes known.

series.py (PricePoint, PriceSeries: prices per MWh, negative ones included, each with its publication
time), day_ahead.py (a day-ahead market's publication rule: SDAC, ERCOT), base.py (the source seam),
trace.py (a price file replayed as published), energycharts.py and awattar.py (keyless web sources,
through the carbon providers' HTTP client and error map), registry.py, reader.py (failover, and no
asking twice for a price already held).
"""

from carbon.prices.base import PriceSource
from carbon.prices.day_ahead import DayAheadMarket, market_for
from carbon.prices.reader import PriceReader, PriceReading
from carbon.prices.registry import get_price_source, price_source_names
from carbon.prices.series import PricePoint, PriceSeries
from carbon.prices.trace import read_price_trace

__all__ = ["DayAheadMarket", "PricePoint", "PriceReader", "PriceReading", "PriceSeries", "PriceSource",
           "get_price_source", "market_for", "price_source_names", "read_price_trace"]
