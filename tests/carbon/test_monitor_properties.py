"""Properties of the failover chain under any pattern of primary outages (hypothesis, fake clock)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.errors import ProviderUnreachable
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.base import Provider
from carbon.providers.static import StaticProvider
from carbon.series import IntensityPoint

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
STEP = timedelta(minutes=10)


class Switchable(Provider):
    """A test double whose availability the test flips."""

    name = "switchable"
    zone = "Z"

    def __init__(self) -> None:
        self.up = True

    def current(self, *, now: datetime) -> IntensityPoint:
        if not self.up:
            raise ProviderUnreachable("down", provider=self.name)
        return IntensityPoint(start=now, duration=STEP, g_per_kwh=100.0, source="switchable")


@settings(deadline=None, max_examples=40)
@given(st.lists(st.booleans(), min_size=1, max_size=60), st.integers(min_value=10, max_value=180))
def test_never_raises_never_serves_beyond_the_limit_and_always_comes_back(ups: list[bool], staleness_min: int) -> None:
    primary = Switchable()
    limit = timedelta(minutes=staleness_min)
    monitor = CarbonMonitor([SourceSpec("primary", lambda: primary), SourceSpec("static", lambda: StaticProvider(g_per_kwh=500))],
                            max_staleness=limit, forecaster=None)
    t = T0
    for up in [*ups, *([True] * 3)]:  # the last 30 min are healthy
        primary.up = up
        r = monitor.read(t)
        if r.stale:
            # staleness is judged on the data: the cached value's interval (fetched_at + STEP) ended within the limit
            assert r.source == "primary" and r.fetched_at is not None and t - (r.fetched_at + STEP) <= limit
        if r.source == "static":
            assert r.failures and r.failures[0].startswith("primary: ")
        if not up:
            assert r.degraded
        t += STEP
    # 3 healthy reads 10 min apart: the longest rest is 15 min, so the primary is back
    assert r.source == "primary" and not r.degraded
