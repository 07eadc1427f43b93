"""Where and when together (scheduler.service.placement): the planner at every site, GPUs of each node respected."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.service.placement import Booking, place_run
from scheduler.planner import ModeFigures
from scheduler.policy.types import Policy

NOW = datetime(2026, 3, 1, 20, 0, tzinfo=timezone.utc)
MODES = [ModeFigures("speed", 700.0, 1.0, "test", False), ModeFigures("efficiency", 500.0, 0.8, "test", False)]


def _series(values: list[float]) -> IntensitySeries:
    return IntensitySeries.of(IntensityPoint(NOW + timedelta(hours=i), timedelta(hours=1), v) for i, v in enumerate(values))


def _site(name: str, gpus: int = 2, **kw) -> dict:
    return {"name": name, "work_pool": f"pool-{name}", "gpus_per_node": gpus, "carbon": {"provider": "static"}, **kw}


def _policy(*sites: dict, gpus: int = 1) -> Policy:
    """A 1-hour job with an 8-hour window, planned on 15-min slots with no margin, dwell or min gain."""
    return Policy.model_validate({"carbon": {"provider": "static"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.7, "max_slowdown": 0.3}},
        "rules": {"kind": "plan", "slot_s": 900, "min_dwell_s": 0, "deadline_margin_s": 0, "min_gain": 0},
        "job": {"name": "j", "command": ["true"], "expected_duration_s": 3600, "deadline_s": 8 * 3600, "gpus": gpus},
        "sites": list(sites)})


def booking_of(site: str, plan, gpus: int) -> list[Booking]:
    """The bookings a placed plan makes (one per run window)."""
    return [Booking(site, start, end, gpus) for start, end in plan.windows()]


def _place(policy: Policy, series: dict, **kw):
    return place_run(policy, series, MODES, now=NOW, not_before=NOW, deadline=NOW + timedelta(hours=8), **kw)


def test_the_cleanest_plan_of_any_site_wins_and_says_why() -> None:
    flat = _series([400.0] * 10)
    valley = _series([600.0, 600.0, 600.0, 100.0, 600.0, 600.0, 600.0, 600.0, 600.0, 600.0])
    placed = _place(_policy(_site("a"), _site("b")), {"a": flat, "b": valley})
    assert placed.site == "b" and placed.plan.start == NOW + timedelta(hours=3)
    assert placed.reasons[0].startswith("site b chosen") and "less than the best plan at a" in placed.reasons[0]
    assert any("g/kWh forecast" in r and r.startswith("a:") for r in placed.reasons)
    by_site = {p.site: p for p in placed.sites}
    assert by_site["b"].forecast_mean_g_per_kwh == 100.0 and by_site["a"].forecast_mean_g_per_kwh == 400.0


def test_a_full_node_pushes_the_run_later_or_elsewhere() -> None:
    valley = _series([600.0, 600.0, 600.0, 100.0, 100.0, 600.0, 600.0, 600.0, 600.0, 600.0])
    taken = [Booking("b", NOW + timedelta(hours=3), NOW + timedelta(hours=4), 2)]
    placed = _place(_policy(_site("b", changeover_s=0.0)), {"b": valley}, bookings=taken)
    assert placed.plan.start >= NOW + timedelta(hours=4)
    assert placed.sites[0].waited_for_gpus and "GPUs are taken" in placed.sites[0].reason


def test_a_power_cap_keeps_the_hungry_mode_away() -> None:
    series = _series([300.0] * 10)
    placed = _place(_policy(_site("capped", power_cap_w=550.0)), {"capped": series})
    assert {s.mode for s in placed.plan.segments} == {"efficiency"}


def test_price_breaks_a_tie() -> None:
    series = _series([300.0] * 10)
    placed = _place(_policy(_site("dear", price_per_gpu_h=3.0), _site("cheap", price_per_gpu_h=1.0)),
                    {"dear": series, "cheap": series})
    assert placed.site == "cheap"


@settings(max_examples=10, deadline=None)
@given(values=st.lists(st.lists(st.floats(50, 800), min_size=10, max_size=10), min_size=2, max_size=3),
       runs=st.lists(st.integers(1, 2), min_size=1, max_size=5))
def test_placing_runs_one_after_another_never_overfills_a_node(values: list[list[float]], runs: list[int]) -> None:
    sites = [_site(f"s{i}", gpus=2, changeover_s=0.0) for i in range(len(values))]
    series = {s["name"]: _series(v) for s, v in zip(sites, values)}
    bookings: list[Booking] = []
    for gpus in runs:
        placed = _place(_policy(*sites, gpus=gpus), series, bookings=bookings)
        best = min(p.plan.carbon_g for p in placed.sites if p.plan is not None and p.plan.feasible)
        assert placed.plan.carbon_g <= best + 1e-6  # where+when is never worse than any single site's plan
        bookings += booking_of(placed.site, placed.plan, gpus)
    for site in sites:
        mine = [b for b in bookings if b.site == site["name"]]
        for b in mine:
            load = sum(o.gpus for o in mine if o.start <= b.start < o.end)
            assert load <= site["gpus_per_node"]


def test_simulate_sites_on_real_traces_prints_the_three_comparisons(shared_data) -> None:
    import json

    from typer.testing import CliRunner

    from flows.cli import app

    traces = shared_data / "carbon" / "lets-wait-awhile"
    out = CliRunner().invoke(app, ["simulate-sites", "examples/fleet.yaml", "--site", f"de={traces / 'ger_ci.csv'}",
                                   "--site", f"gb={traces / 'gb_ci.csv'}", "--year", "2020", "--limit", "3", "--json"])
    assert out.exit_code == 0, out.output
    s = json.loads(out.output)
    assert s["jobs"] == 3 and s["modelled"] is True and s["period_start"].startswith("2020-01-01")
    assert s["forecast"] == "daily-profile"
    # the perfect-foresight bound is below every strategy, where+when included; a strategy under it is a bug
    assert s["oracle_g"] <= min(s["fixed_g"], s["where_only_g"], s["where_when_g"], *s["when_only_g"].values(),
                                *s["static_efficiency_g"].values()) + 1e-6
    assert s["best_simple_g"] == min(s["fixed_g"], s["where_only_g"], *s["when_only_g"].values(),
                                     *s["static_efficiency_g"].values())
    assert {"saving_vs_where_only_pct", "saving_vs_best_when_only_pct", "saving_vs_best_simple_pct"} <= set(s)
    bad = CliRunner().invoke(app, ["simulate-sites", "examples/fleet.yaml", "--site", f"fr={traces / 'gb_ci.csv'}"])
    assert bad.exit_code == 2 and "no site named fr" in bad.output


def test_simulate_with_sites_is_the_sites_comparison(tmp_path) -> None:
    import json
    import math

    from typer.testing import CliRunner

    from flows.cli import app

    paths = {}
    for name, phase in (("de", 0.0), ("gb", math.pi)):
        rows = ["time,g"] + [f"2024-01-{1 + i // 48:02d} {(i % 48) // 2:02d}:{30 * (i % 2):02d},"
                             f"{300 + 100 * math.cos(i / 48 * 2 * math.pi + phase):.1f}" for i in range(6 * 48)]
        paths[name] = tmp_path / f"{name}.csv"
        paths[name].write_text("\n".join(rows) + "\n")
    sites = ["--site", f"de={paths['de']}", "--site", f"gb={paths['gb']}"]
    out = CliRunner().invoke(app, ["simulate", "examples/fleet.yaml", *sites, "--json"])
    assert out.exit_code == 0, out.output
    s = json.loads(out.output)
    assert s["jobs"] >= 1 and s["modelled"] is True and "saving_vs_best_when_only_pct" in s
    both = CliRunner().invoke(app, ["simulate", "examples/fleet.yaml", *sites, "--trace", str(paths["de"])])
    assert both.exit_code == 2 and "not both" in both.output
    neither = CliRunner().invoke(app, ["simulate", "examples/fleet.yaml"])
    assert neither.exit_code == 2 and "--trace" in neither.output


def _prefect_time(value: datetime):
    """The time as Prefect's client hands it over: its DateTime, parsed from the API's ISO string."""
    from prefect.types._datetime import DateTime as PrefectDateTime
    from pydantic import TypeAdapter

    parsed = TypeAdapter(PrefectDateTime).validate_python(value.isoformat())
    assert type(parsed) is PrefectDateTime
    return parsed


def test_prefect_times_cross_into_placement_as_utc_aware_stdlib_datetimes() -> None:
    import pytest

    from flows.fleet.placing import utc

    started = _prefect_time(NOW + timedelta(minutes=90))
    shifted = started.astimezone(timezone.utc) + timedelta(minutes=5)
    assert shifted.tzinfo is None  # the bug: Prefect's DateTime drops the zone here
    ours = utc(started) + timedelta(minutes=5)
    assert type(ours) is datetime and ours.tzinfo is timezone.utc and ours == NOW + timedelta(minutes=95)
    assert utc(datetime(2026, 3, 1, 22, 0, tzinfo=timezone(timedelta(hours=1)))) == NOW + timedelta(hours=1)
    with pytest.raises(ValueError, match="time zone"):
        utc(datetime(2026, 3, 1, 21, 0))


def _placed(start: datetime, hours: float = 1.0, site: str = "b", gpus: int = 1) -> dict:
    return {"site": site, "start": start.isoformat(), "finish": (start + timedelta(hours=hours)).isoformat(), "gpus": gpus}


def test_running_scheduled_and_late_runs_book_the_gpus_they_will_really_use() -> None:
    from flows.fleet.placing import booking_of_run

    planned = NOW + timedelta(hours=1)
    # Prefect hands the running run's start time as its own DateTime: it started 30 min late, finishes 30 min late
    began = _prefect_time(planned + timedelta(minutes=30))
    running = booking_of_run(_placed(planned), "RUNNING", began, NOW)
    assert (running.start, running.end) == (planned + timedelta(minutes=30), planned + timedelta(minutes=90))
    scheduled = booking_of_run(_placed(planned, gpus=2), "SCHEDULED", None, NOW)
    assert (scheduled.start, scheduled.end, scheduled.gpus) == (planned, planned + timedelta(hours=1), 2)
    late = booking_of_run(_placed(NOW - timedelta(minutes=20)), "SCHEDULED", None, NOW)  # starts when a worker takes it
    assert (late.start, late.end) == (NOW, NOW + timedelta(hours=1))
    pending = booking_of_run(_placed(planned), "PENDING", None, NOW)
    assert pending.start == planned


def test_placing_while_runs_run_is_placing_around_them() -> None:
    from flows.fleet.placing import booking_of_run

    valley = _series([600.0, 100.0, 100.0, 100.0, 600.0, 600.0, 600.0, 600.0, 600.0, 600.0])
    began = _prefect_time(NOW - timedelta(minutes=10))
    bookings = [booking_of_run(_placed(NOW - timedelta(minutes=20), hours=2.0, gpus=2), "RUNNING", began, NOW),
                booking_of_run(_placed(NOW + timedelta(hours=2), gpus=2), "SCHEDULED", None, NOW)]
    placed = _place(_policy(_site("b", changeover_s=0.0)), {"b": valley}, bookings=bookings)
    # the running run holds the node until 21:50, the scheduled one 22:00-23:00: the clean hour left is 23:00
    assert placed.plan.start == NOW + timedelta(hours=3)
    assert placed.sites[0].waited_for_gpus


def test_a_run_meant_to_start_now_goes_where_a_gpu_is_free_now() -> None:
    clean, dirty = _series([100.0] * 10), _series([500.0] * 10)
    full = [Booking("clean", NOW, NOW + timedelta(hours=2), 2)]
    policy = _policy(_site("clean", changeover_s=0.0), _site("dirty", changeover_s=0.0))
    now_run = place_run(policy, {"clean": clean, "dirty": dirty}, MODES, now=NOW, not_before=NOW, deadline=None,
                        bookings=full)
    assert now_run.site == "dirty" and now_run.plan.start == NOW
    assert "starts 7200 s sooner than at clean" in now_run.reasons[0]
    planned = _place(policy, {"clean": clean, "dirty": dirty}, bookings=full)  # with a deadline, carbon decides
    assert planned.site == "clean" and planned.plan.start == NOW + timedelta(hours=2)


def test_placed_starts_lie_on_the_crons_grid_not_on_when_planning_ran() -> None:
    from flows.fleet.placing import on_grid, plan_placement

    fired = datetime(2026, 3, 1, 21, 0, tzinfo=timezone.utc)  # the cron's planning run fires at the earliest start
    assert on_grid(fired + timedelta(seconds=7), fired, 900) == fired + timedelta(minutes=15)
    assert on_grid(fired, fired, 900) == fired
    assert on_grid(fired - timedelta(minutes=20), fired, 900) == fired - timedelta(minutes=15)
    spec = _policy(_site("a", changeover_s=0.0)).model_dump()
    spec["job"].update(cron="0 1 * * *", earliest_start_s=-4 * 3600, deadline_s=4 * 3600)
    policy = Policy.model_validate(spec)
    flat = IntensitySeries.of(IntensityPoint(fired + timedelta(hours=i), timedelta(hours=1), 300.0) for i in range(10))
    nominal = fired + timedelta(hours=4)
    placed = plan_placement(policy, nominal=nominal, now=fired + timedelta(seconds=7), forecasts={"a": flat})
    # on the grid and not in the past (on a flat forecast every start is as clean, so which one is the planner's tie)
    assert placed.plan.start >= fired + timedelta(seconds=7) and (placed.plan.start - fired).total_seconds() % 900 == 0
    late = plan_placement(policy, nominal=fired + timedelta(hours=20), now=fired + timedelta(minutes=3, seconds=2),
                          forecasts={"a": flat})  # an ad-hoc nominal: still the cron's grid
    assert (late.plan.start - fired).total_seconds() % 900 == 0


def test_runs_meant_to_start_now_wait_in_arrival_order_on_a_node() -> None:
    """A gap that opens on a node (a run ended early) does not let a later arrival overtake one waiting there."""
    flat = _series([300.0] * 10)
    policy = _policy(_site("b", changeover_s=0.0))
    # the node's 2 GPUs: one run until 21:00, a second that ended early (gone), and a queued run waiting for 21:00
    waiting = Booking("b", NOW + timedelta(hours=1), NOW + timedelta(hours=2), 1, queued=True)
    busy = Booking("b", NOW, NOW + timedelta(hours=1), 1)
    later = place_run(policy, {"b": flat}, MODES, now=NOW, not_before=NOW, deadline=None, bookings=[busy, waiting])
    assert later.plan.start == NOW + timedelta(hours=1) and later.queued  # one GPU is free now: still behind the queue
    # a run placed far ahead for a clean hour is not a queue: a run meant to start now takes the free GPU
    planned = Booking("b", NOW + timedelta(hours=5), NOW + timedelta(hours=6), 1)
    now_run = place_run(policy, {"b": flat}, MODES, now=NOW, not_before=NOW, deadline=None, bookings=[busy, planned])
    assert now_run.plan.start == NOW and not now_run.queued


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2), st.booleans()), min_size=2, max_size=8))
def test_waiting_runs_are_placed_in_arrival_order(arrivals: list[tuple[int, int, bool]]) -> None:
    """Runs meant to start now, placed one after another while earlier ones may end early: the starts of those
    that had to wait never go backwards on a node."""
    flat = _series([300.0] * 24)
    policy = _policy(_site("b", changeover_s=0.0))
    bookings: list[Booking] = []
    queue: list[datetime] = []
    now = NOW
    for step, (advance_h, hours, ends_early) in enumerate(arrivals):
        now = now + timedelta(minutes=20 * advance_h)
        live = [b for b in bookings if b.end > now]
        placed = place_run(policy, {"b": flat}, MODES, now=now, not_before=now, deadline=None, bookings=live,
                           work_s=3600.0 * hours)
        if placed.queued:
            queue.append(placed.plan.start)
        end = placed.plan.finish if not ends_early else placed.plan.start + timedelta(minutes=10)
        bookings.append(Booking("b", placed.plan.start, end, 1, queued=placed.queued))
    assert queue == sorted(queue)
