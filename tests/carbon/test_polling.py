"""The APScheduler poller: a thin wrapper; the job body is tested directly with a fake clock."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from carbon.errors import ProviderUnreachable
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.polling import JOB_ID, CarbonPoller
from carbon.providers.base import Provider
from carbon.providers.static import StaticProvider

T0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


class Down(Provider):
    name = "down"

    def current(self, *, now):
        raise ProviderUnreachable("no route to host", provider=self.name)


def test_poll_uses_the_injected_clock_and_keeps_the_latest() -> None:
    clock = [T0]
    poller = CarbonPoller(CarbonMonitor([SourceSpec("static", lambda: StaticProvider(g_per_kwh=123))]),
                          interval_s=300, clock=lambda: clock[0])
    r = poller.poll()
    assert r is not None and poller.latest is r and r.current.start == T0
    clock[0] += timedelta(hours=2)
    assert poller.poll().current.start == T0 + timedelta(hours=2)
    assert poller.polls == 2


def test_an_outage_is_remembered_not_raised() -> None:
    poller = CarbonPoller(CarbonMonitor([SourceSpec("down", Down)]), interval_s=60, clock=lambda: T0)
    assert poller.poll() is None
    assert "no route to host" in str(poller.last_error) and poller.latest is None


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        CarbonPoller(CarbonMonitor([]), interval_s=0, clock=lambda: T0)


def test_background_scheduler_wiring() -> None:
    ran = threading.Event()
    poller = CarbonPoller(CarbonMonitor([SourceSpec("static", lambda: StaticProvider(g_per_kwh=1))]), interval_s=600,
                          clock=lambda: datetime.now(timezone.utc), on_reading=lambda r: ran.set())
    with poller:
        job = poller._scheduler.get_job(JOB_ID)
        assert job.trigger.interval == timedelta(seconds=600)
        assert job.max_instances == 1 and job.coalesce
        assert ran.wait(timeout=30)  # the first poll runs at start
    assert not poller._scheduler.running
