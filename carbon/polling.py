"""Poll the monitor in the background with APScheduler 3.11: wiring only, no decisions.

``CarbonPoller(monitor, interval_s=policy.carbon.poll_interval_s, clock=...)`` runs
``monitor.read(clock())`` every ``interval_s`` on a ``BackgroundScheduler`` (UTC, one instance at a
time, missed runs coalesced) and keeps the latest :class:`~carbon.monitor.Reading` (or the latest
error) for whoever asks. :meth:`poll` is the job body; tests call it directly with a fake clock.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from carbon.errors import CarbonError
from carbon.monitor import CarbonMonitor, Reading

__all__ = ["CarbonPoller", "JOB_ID"]

JOB_ID = "gridshift-carbon-poll"
log = logging.getLogger("carbon.polling")


class CarbonPoller:
    """Keeps ``latest`` fresh by polling ``monitor`` every ``interval_s`` seconds."""

    def __init__(
        self,
        monitor: CarbonMonitor,
        *,
        interval_s: float,
        clock: Callable[[], datetime],
        on_reading: Callable[[Reading], None] | None = None,
        scheduler: BackgroundScheduler | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.monitor = monitor
        self.interval_s = float(interval_s)
        self.clock = clock
        self.on_reading = on_reading
        self._scheduler = scheduler
        self._lock = threading.Lock()
        self.latest: Reading | None = None
        self.last_error: CarbonError | None = None
        self.polls = 0

    def poll(self) -> Reading | None:
        """One poll: read at ``clock()``, remember the answer; an outage is remembered, never raised."""
        now = self.clock()
        try:
            reading = self.monitor.read(now)
        except CarbonError as exc:
            log.warning("carbon poll at %s failed: %s", now.isoformat(), exc)
            with self._lock:
                self.last_error, self.polls = exc, self.polls + 1
            return None
        with self._lock:
            self.latest, self.last_error, self.polls = reading, None, self.polls + 1
        if reading.degraded:
            log.info("carbon poll: %s", reading.reason)
        if self.on_reading is not None:
            self.on_reading(reading)
        return reading

    def start(self) -> None:
        """Start polling now and then every ``interval_s``."""
        if self._scheduler is None:
            self._scheduler = BackgroundScheduler(timezone=timezone.utc)
        self._scheduler.add_job(
            self.poll, IntervalTrigger(seconds=self.interval_s, timezone=timezone.utc), id=JOB_ID,
            replace_existing=True, max_instances=1, coalesce=True, next_run_time=self.clock(),
        )
        if not self._scheduler.running:
            self._scheduler.start()

    def shutdown(self, *, wait: bool = True) -> None:
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=wait)

    def __enter__(self) -> "CarbonPoller":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
