"""Prices from a file: a day-ahead price trace replayed as the market published it.

The file is the trace format (:mod:`carbon.trace_file`: a header, a timestamp column, one numeric
column or the one ``column`` names) with prices per MWh; negative prices are read as they are, and a
price beyond :data:`MAX_PLAUSIBLE_PER_MWH` either way refuses the file with ``file:line`` (a unit
error: ct/kWh or EUR/kWh where EUR/MWh was meant would be ten or a thousand times off the other way,
and is caught by the mean being told in the output). Each price is stamped with the moment its
market published it (:class:`carbon.prices.day_ahead.DayAheadMarket`), so a replay at ``now`` sees
only what the market had published by then. ``replay="loop"`` maps any ``now`` into the trace by
whole multiples of its length in days (an offline demo on any date); ``"aligned"`` uses its dates.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import ClassVar, Literal

from carbon.errors import BadTrace, NoCoverage, UnknownZone
from carbon.prices.base import PriceSource
from carbon.prices.day_ahead import SDAC, DayAheadMarket, market_for
from carbon.prices.series import PricePoint, PriceSeries
from carbon.trace_file import TraceCheck, parse_value_rows, read_text_or_refuse

__all__ = ["MAX_PLAUSIBLE_PER_MWH", "PriceTrace", "parse_price_text", "read_price_trace"]

#: no wholesale market comes near this either way (ERCOT's offer cap was 9,000 USD/MWh in 2021; the EU's
#: harmonised limits are +4,000 / -500 EUR/MWh): a larger value is a unit or export error
MAX_PLAUSIBLE_PER_MWH = 20000.0


def parse_price_text(text: str, *, column: str | None = None, where: str = "<prices>", zone: str = "",
                     currency: str = "", market: DayAheadMarket | None = None,
                     check: TraceCheck | None = None) -> PriceSeries:
    """Price CSV text as a series, each price published by ``market``'s rule (None: known from the start)."""

    def plausible(raw: str, value: float, line: int) -> None:
        if abs(value) > MAX_PLAUSIBLE_PER_MWH:
            raise BadTrace(f"{where}:{line}: price {raw} per MWh is implausible (no market comes near "
                           f"{MAX_PLAUSIBLE_PER_MWH:.0f}): a unit or export error?")

    rows = parse_value_rows(text, column=column, where=where, check=check, what="price", value_check=plausible)
    source = f"trace:{Path(where).name}"
    points = [PricePoint(start=t, duration=d, per_mwh=v, published_at=market.published_at(t) if market else None,
                         source=source) for t, d, v in rows]
    return PriceSeries.of(points, zone=zone, currency=currency)


def read_price_trace(path: str | Path, *, column: str | None = None, zone: str = "", currency: str = "",
                     market: DayAheadMarket | None = None, check: TraceCheck | None = None) -> PriceSeries:
    """Read a price trace file (see the module docstring)."""
    p = Path(path)
    return parse_price_text(read_text_or_refuse(p, "price trace"), column=column, where=str(p), zone=zone,
                            currency=currency, market=market, check=check)


class PriceTrace(PriceSource):
    """Serves prices from a trace file, as its market published them."""

    name: ClassVar[str] = "trace"

    def __init__(self, path: str | Path, *, zone: str = "", market: str | None = None, currency: str | None = None,
                 column: str | None = None, replay: Literal["loop", "aligned"] = "loop") -> None:
        found = market_for(market or zone) if (market or zone) else SDAC
        if found is None:
            raise UnknownZone(f"no day-ahead publication rule for {market or zone!r}: give options.market "
                              "(SDAC for the EU zones, ERCOT)", provider="price trace")
        self.market = found
        self.currency = currency or found.currency
        self.zone = zone
        self.replay = replay
        self.check = TraceCheck()
        self.series = read_price_trace(path, column=column, zone=zone, currency=self.currency, market=found,
                                       check=self.check)
        first = self.series.start
        self._day0 = datetime(first.year, first.month, first.day, tzinfo=timezone.utc) + timedelta(days=1)
        self._span = timedelta(days=max(int((self.series.end - self._day0) / timedelta(days=1)), 1))

    def _offset(self, moment: datetime) -> timedelta:
        if self.replay == "aligned" or self.series.start <= moment < self.series.end:
            return timedelta(0)
        return self._span * ((moment - self._day0) // self._span)

    def prices(self, *, start: datetime, end: datetime, now: datetime) -> PriceSeries:
        off = self._offset(start)
        assert self.market is not None
        points = [PricePoint(p.start + off, p.duration, p.per_mwh, self.market.published_at(p.start + off), p.source)
                  for p in self.series.window(start - off, end - off)]
        series = PriceSeries.of(points, zone=self.zone, currency=self.currency).known_at(now)
        if not series:
            raise NoCoverage(f"the price trace has nothing published by {now:%Y-%m-%d %H:%M} UTC for "
                             f"{start:%Y-%m-%d %H:%M} UTC on (it covers {self.series.start:%Y-%m-%d} to "
                             f"{self.series.end:%Y-%m-%d})", provider="price trace")
        return series
