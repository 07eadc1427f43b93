"""A 2 s trace through the monitor with a forecast archive: no numpy warnings, and every row of a read kept.

Two faults this guards (issue 31 follow-up): a forecast horizon under an hour fused on one lead only, and
the weights' mean over the leads after it (none) printed "Mean of empty slice" and "invalid value
encountered in divide" on every read; and the archive file, in autocommit mode, committed each observed
row on its own (a 2 s trace's 43 000 rows of history took two minutes a read; now one transaction).
Runs in about a second.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from carbon.forecasts.archive import ForecastArchive
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.trace import TraceProvider
from carbon.series import IntensityPoint, IntensitySeries

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
STEP = timedelta(seconds=2)


def _two_second_trace(hours: float) -> IntensitySeries:
    n = int(hours * 3600 / 2)
    return IntensitySeries.of([IntensityPoint(start=T0 + i * STEP, duration=STEP,
                                              g_per_kwh=300.0 + 100.0 * math.sin(2 * math.pi * i / 43200))
                               for i in range(n)], zone="XX")


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("horizon", [timedelta(minutes=30), timedelta(hours=3)])
def test_a_two_second_trace_reads_without_warnings(tmp_path: Path, horizon: timedelta) -> None:
    series = _two_second_trace(6)
    with ForecastArchive(tmp_path / "forecasts.sqlite") as archive:
        monitor = CarbonMonitor([SourceSpec("trace", lambda: TraceProvider(series=series, replay="aligned"))],
                                history_window=timedelta(hours=2), forecast_horizon=horizon, archive=archive)
        now = T0 + timedelta(hours=3)
        for k in range(2):
            reading = monitor.read(now + k * timedelta(minutes=15))
            assert reading.forecast_by == "forecast:fused"
        _, observed = archive.rows()
    assert observed >= 2 * 1800  # the 2 s values of the history window, kept whole


def test_a_failed_batch_leaves_the_archive_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ForecastArchive(tmp_path / "forecasts.sqlite") as archive:
        archive.observe(zone="XX", points=_two_second_trace(0.01))
        before = archive.rows()

        def fail(*_: object) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(archive, "_trim", fail)
        with pytest.raises(OSError):
            archive.observe(zone="XX", points=_two_second_trace(0.02))
        assert archive.rows() == before  # the batch rolled back whole, not row by row
