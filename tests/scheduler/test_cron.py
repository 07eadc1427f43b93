"""One calendar: ``job.cron`` gives the dates Prefect's ``CronSchedule`` gives, in ``check``,
``serve`` and ``simulate`` alike (standard cron: 0 and 7 are Sunday, names, ranges, steps, time zones)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from scheduler.policy.cron import cron_occurrences, cron_problem, next_runs, timezone_problem
from scheduler.errors import PolicyError
from scheduler.service.serve import nominal_runs
from simulation.simulate import nominal_starts

UTC = timezone.utc
ACCEPTANCE = ["0 1 * * 1-5", "30 2 * * 0", "0 1 * * 7", "15 3 * * sat,sun"]
ZONES = ["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]


def prefect_dates(cron: str, start: datetime, n: int = 5, tz: str = "UTC") -> list[datetime]:
    """What Prefect's own deployment schedule gives (the server's CronSchedule, which the scheduler service runs).

    Its first ``n`` dates, taken from a few more: ``get_dates(n)`` sorts the ``n`` dates croniter yields,
    and in a clock change's gap croniter yields them out of order, so ``get_dates(5)`` can leave out a
    date that ``get_dates(6)`` puts fourth (Lord Howe, 2024-10-06: 02:40 local is 15:40 UTC, after
    02:20 read on the old offset, 15:50). The scheduler service asks for many dates and schedules both.
    """
    from prefect.server.schemas.schedules import CronSchedule

    dates = asyncio.run(CronSchedule(cron=cron, timezone=tz).get_dates(n=n + 4, start=start))
    return [d.astimezone(UTC) for d in dates][:n]


@pytest.mark.parametrize("cron", ACCEPTANCE)
@pytest.mark.parametrize("tz", ["UTC", "Europe/London"])
def test_next_runs_equal_prefects_cron_schedule(cron: str, tz: str) -> None:
    start = datetime(2026, 3, 25, 12, 7, tzinfo=UTC)  # the week London moves to summer time
    assert next_runs(cron, start, tz=tz) == prefect_dates(cron, start, tz=tz)


def test_weekdays_are_standard_cron() -> None:
    start = datetime(2026, 12, 2, tzinfo=UTC)  # a Wednesday
    weekdays = {cron: {t.strftime("%a") for t in cron_occurrences(cron, start, start + timedelta(days=14))}
                for cron in ACCEPTANCE}
    assert weekdays == {"0 1 * * 1-5": {"Mon", "Tue", "Wed", "Thu", "Fri"}, "30 2 * * 0": {"Sun"},
                        "0 1 * * 7": {"Sun"}, "15 3 * * sat,sun": {"Sat", "Sun"}}


_FIELDS = st.tuples(
    st.sampled_from(["0", "15", "*/20", "5,35", "59"]),
    st.sampled_from(["1", "*/6", "0-3", "22", "2"]),
    st.sampled_from(["*", "*", "1", "15", "1-7", "*/10", "31"]),
    st.sampled_from(["*", "*", "1-6", "jan,jul", "*/3", "mar"]),
    st.sampled_from(["*", "0", "7", "1-5", "sat,sun", "5-7", "0-2", "mon-fri", "*/2", "1#2"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=_FIELDS, tz=st.sampled_from(ZONES),
       start=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)))
def test_any_cron_in_any_zone_matches_prefect(fields: tuple[str, ...], tz: str, start: datetime) -> None:
    cron = " ".join(fields)
    if cron_problem(cron) is not None:  # e.g. '0 1 31 * 1#2': no date matches; Prefect fails on it too
        with pytest.raises(Exception, match="failed to find next date"):
            prefect_dates(cron, start, tz=tz)
        return
    assert next_runs(cron, start, tz=tz) == prefect_dates(cron, start, tz=tz)


#: clock changes of ZONES' zones in 2026 (UTC): London, New York, Lord Howe (30 min), each way
_CHANGES = [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC),
            datetime(2026, 3, 8, 7, tzinfo=UTC), datetime(2026, 11, 1, 6, tzinfo=UTC),
            datetime(2026, 4, 4, 15, tzinfo=UTC), datetime(2026, 10, 3, 15, 30, tzinfo=UTC)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(minute=st.sampled_from(["0", "30", "*/15", "10,40", "59"]), hour=st.sampled_from(["*", "0-3", "1", "2", "*/2"]),
       tz=st.sampled_from(["Europe/London", "America/New_York", "Australia/Lord_Howe"]),
       change=st.sampled_from(_CHANGES), offset_min=st.integers(-240, 240))
def test_clock_changes_match_prefect(minute: str, hour: str, tz: str, change: datetime, offset_min: int) -> None:
    cron = f"{minute} {hour} * * *"
    start = change + timedelta(minutes=offset_min)
    assert next_runs(cron, start, n=8, tz=tz) == prefect_dates(cron, start, n=8, tz=tz)


@pytest.mark.parametrize("cron", ["61 1 * * *", "every night", "0 1 * *", "0 25 * * *", "0 1 * * 8", "0 0 30 2 *",
                                  "H 1 * * *", "0 1 * * 1-5 2026"])
def test_what_is_not_a_schedule_is_refused(cron: str) -> None:
    assert cron_problem(cron) is not None
    with pytest.raises(PolicyError, match="job.cron"):
        cron_occurrences(cron, datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC))


def test_time_zones_are_iana_names() -> None:
    assert timezone_problem("Europe/London") is None
    assert "unknown time zone 'Europe/Londn'" in (timezone_problem("Europe/Londn") or "")


@pytest.mark.parametrize("cron", ACCEPTANCE)
@pytest.mark.parametrize("tz", ["UTC", "America/New_York"])
def test_serve_and_simulate_plan_the_same_dates_as_prefect(cron: str, tz: str) -> None:
    t0 = datetime(2026, 10, 26, tzinfo=UTC)  # New York leaves summer time within the fortnight
    end = t0 + timedelta(days=15)
    earliest_s, deadline_s = -3600.0, 6 * 3600.0
    simulated = nominal_starts(cron, t0, end, tz=tz, earliest_start_s=earliest_s, deadline_s=deadline_s)
    served = nominal_runs(cron, t0 + timedelta(hours=1), earliest_start_s=earliest_s, deadline_s=deadline_s,
                          horizon=end - t0 - timedelta(days=1), tz=tz)
    served = [t for t in served if t >= simulated[0]]
    prefect = prefect_dates(cron, simulated[0], n=len(simulated), tz=tz)
    assert simulated == prefect
    assert served == simulated[:len(served)] and len(served) >= len(simulated) - 3


POLICY = """\
carbon: {provider: static, options: {country: USA}}
modes:
  speed: {power_limit_fraction: 1.0}
  efficiency: {power_limit_fraction: 0.7}
job:
  command: [python, -c, pass]
  expected_duration_s: 3600
  cron: "CRON"
  timezone: TZ
backend: {name: simulated}
"""


@pytest.mark.parametrize("cron", ACCEPTANCE)
def test_policy_check_json_gives_prefects_next_runs(tmp_path: Path, cron: str) -> None:
    from flows.cli import app

    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY.replace("CRON", cron).replace("TZ", "Europe/London"), encoding="utf-8")
    before = prefect_dates(cron, datetime.now(UTC), tz="Europe/London")
    result = CliRunner().invoke(app, ["policy", "check", "--json", str(policy)])
    after = prefect_dates(cron, datetime.now(UTC), tz="Europe/London")
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["files"]
    got = [datetime.fromisoformat(t) for t in entry["next_runs"]]
    assert all(t.utcoffset() == timedelta(0) for t in got)  # ISO-8601 in UTC
    assert got in (before, after)  # the same, unless a fire time passed between the calls


def test_an_unknown_time_zone_is_located(tmp_path: Path) -> None:
    from flows.cli import app

    policy = tmp_path / "p.yaml"
    text = POLICY.replace("CRON", "0 1 * * *").replace("TZ", "Mars/Olympus")
    policy.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["policy", "check", str(policy)])
    assert result.exit_code == 2
    assert f"{policy}:9:13: job.timezone: unknown time zone 'Mars/Olympus'" in result.stderr
