"""GPUs freed early go to the run queued next on their site.

The choice is a pure function (hypothesis-tested: a move never books the node past its GPUs); the
move itself runs against the session's real Prefect API server, on real flow runs in real states.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from flows.fleet.early_start import SiteRun, next_to_start_early
from flows.fleet.gpu_line import PlaceInLine
from scheduler.policy.types import CarbonSource, Site
from scheduler.service.placement import Booking

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=timezone.utc)
CHANGEOVER_S = 20


def _site(name: str = "node", gpus: int = 2) -> Site:
    return Site(name=name, work_pool=f"pool-{name}", carbon=CarbonSource(provider="static"), gpus_per_node=gpus,
                changeover_s=CHANGEOVER_S)


def _run(run_id: str, start_s: int, length_s: int, *, state: str = "SCHEDULED", queued: bool = True, gpus: int = 1,
         placed_s: int = -600) -> SiteRun:
    start = NOW + timedelta(seconds=start_s)
    return SiteRun(PlaceInLine(start, NOW + timedelta(seconds=placed_s), run_id),
                   Booking("node", start, start + timedelta(seconds=length_s), gpus, queued=queued), state)


def test_the_first_queued_run_starts_now_when_the_node_has_room_for_all_of_it() -> None:
    running = _run("running", -60, 300, state="RUNNING", queued=False)
    first, second = _run("first", 240, 60), _run("second", 320, 60)
    assert next_to_start_early(_site(), [running, second, first], NOW) is first


def test_nothing_moves_past_a_first_in_line_that_cannot() -> None:
    running = _run("running", -60, 300, state="RUNNING", queued=False)
    first, second = _run("first", 240, 60), _run("second", 320, 60)
    handed = _run("first", 240, 60, state="PENDING")  # a worker already handed it to a process
    assert next_to_start_early(_site(), [running, handed, second], NOW) is None
    assert next_to_start_early(_site(), [running, _run("first", 20, 60), second], NOW) is None  # due in 20 s anyway
    both = _run("other", -30, 300, state="RUNNING", queued=False)
    assert next_to_start_early(_site(), [running, both, first, second], NOW) is None  # no GPU free
    timed = _run("clean-hour", 30, 600, queued=False)  # a carbon-timed run takes the other GPU in 30 s
    assert next_to_start_early(_site(), [running, timed, first, second], NOW) is None
    wide = _run("first", 240, 60, gpus=2)  # it needs both GPUs, one is still busy
    assert next_to_start_early(_site(), [running, wide, second], NOW) is None
    assert next_to_start_early(_site(), [running, _run("timed", 240, 60, queued=False)], NOW) is None  # not queued


bookings = st.lists(st.tuples(st.integers(-600, 1200), st.integers(10, 900), st.integers(1, 2),
                              st.sampled_from(["SCHEDULED", "PENDING", "RUNNING"]), st.booleans()), max_size=8)


@given(bookings)
def test_a_move_never_books_the_node_past_its_gpus(drawn: list[tuple[int, int, int, str, bool]]) -> None:
    site = _site()
    runs = [_run(f"r{i}", s, n, state=state, queued=q, gpus=g) for i, (s, n, g, state, q) in enumerate(drawn)]
    chosen = next_to_start_early(site, runs, NOW)
    if chosen is None:
        return
    length = chosen.booking.end - chosen.booking.start
    moved = Booking("node", NOW, NOW + length, chosen.booking.gpus)
    pad = timedelta(seconds=CHANGEOVER_S)
    others = [r.booking for r in runs if r is not chosen]
    for moment in {NOW} | {b.start for b in others if NOW < b.start < NOW + length}:
        busy = sum(b.gpus for b in others if b.start <= moment < b.end + pad)
        assert busy + moved.gpus <= site.gpus_per_node, (moment, runs, chosen)
    assert chosen.state == "SCHEDULED" and chosen.booking.queued
    assert chosen.place == min(r.place for r in runs if r.booking.queued and r.state != "RUNNING")


def test_a_finished_run_moves_the_next_queued_run_to_now_on_a_real_server(prefect_harness, tmp_path) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running, Scheduled

    from flows.fleet.early_start import start_queued_early
    from flows.fleet.gpus import ensure_limits, gpu_limit_name, hold_gpus
    from flows.fleet.placing import placing_limit_name

    site = _site(f"early-{os.getpid()}")
    ensure_limits({placing_limit_name(site.name): 1}, "placement at a time")
    ensure_limits({gpu_limit_name(site.name): 2})
    now = datetime.now(timezone.utc).replace(microsecond=0)

    def placement(start_s: int, length_s: int, queued: bool) -> dict:
        start = now + timedelta(seconds=start_s)
        return {"site": site.name, "start": start.isoformat(), "finish": (start + timedelta(seconds=length_s)).isoformat(),
                "gpus": 1, "placed_at": (now - timedelta(seconds=60)).isoformat(), "queued": queued}

    stand_in = flow(name="gridshift-early-start-test")(lambda placement=None, planned_start=None: None)
    with get_client(sync_client=True) as client:
        def create(name: str, placed: dict, state) -> str:
            return str(client.create_flow_run(stand_in, name=name, tags=["gridshift"], state=state,
                                              parameters={"placement": placed, "planned_start": placed["start"]}).id)

        finished = create("finished", placement(-120, 900, False), Running())  # booked far longer than it ran
        create("still-running", placement(-60, 900, False), Running())
        first = create("first", placement(840, 60, True), Scheduled(scheduled_time=now + timedelta(seconds=840)))
        second = create("second", placement(920, 60, True), Scheduled(scheduled_time=now + timedelta(seconds=920)))

        with hold_gpus(site.name, 2, 2, lock_dir=tmp_path):  # the bookings say free, but runs overran: no move
            assert start_queued_early(site, finished_run_id=finished, now=now) is None
        moved = start_queued_early(site, finished_run_id=finished, now=now)
        assert moved is not None and moved.flow_run_id == first
        assert moved.sentence(site.name).startswith(f"{site.name}: GPUs free 840 s before the next queued run's booked start")
        run = client.read_flow_run(first)
        assert run.state_type.value == "SCHEDULED" and run.next_scheduled_start_time == now
        assert run.parameters["placement"]["start"] == now.isoformat()
        assert run.parameters["placement"]["finish"] == (now + timedelta(seconds=60)).isoformat()
        assert run.parameters["placement"]["moved_up_from"] == (now + timedelta(seconds=840)).isoformat()
        assert run.parameters["planned_start"] == now.isoformat()
        # the first in line is now due at once: nothing behind it moves past it
        assert start_queued_early(site, finished_run_id=finished, now=now) is None
        assert client.read_flow_run(second).parameters["placement"]["start"] == (now + timedelta(seconds=920)).isoformat()
