"""The line at a site's GPUs: waiting runs take freed slots in the order they were booked.

The place in line is a pure function; the line itself runs against the session's real Prefect API
server, on SQLite and on the production setup (PostgreSQL + Redis; fixture fleet_api), with real flow runs in real states and real global concurrency limits.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.fleet.gpu_line import PlaceInLine, line_records, line_variable, place_in_line
from flows.fleet.gpus import ensure_limits, gpu_limit_name, hold_gpus

T0 = datetime(2026, 12, 3, 8, 27, tzinfo=timezone.utc)


def test_a_placed_run_stands_by_its_booked_start_then_by_when_it_was_placed() -> None:
    def placed(run_id: str, start_s: int, placed_s: int) -> PlaceInLine:
        placement = {"start": (T0 + timedelta(seconds=start_s)).isoformat(),
                     "placed_at": (T0 + timedelta(seconds=placed_s)).isoformat()}
        return place_in_line(run_id, {"placement": placement}, scheduled=T0 + timedelta(hours=1), created=T0)

    assert placed("b", 10, 0) < placed("a", 20, -5)  # booked earlier goes first, whenever it was placed
    assert placed("b", 10, 0) < placed("a", 10, 1)  # same start: placed earlier goes first
    assert placed("a", 10, 0) < placed("b", 10, 0)  # and the flow run id settles a tie
    # a run that was not placed stands by Prefect's scheduled start and creation time
    assert place_in_line("c", {}, scheduled=T0, created=T0 - timedelta(hours=1)) == \
        PlaceInLine(booked_start=T0, placed_at=T0 - timedelta(hours=1), flow_run_id="c")


@given(st.lists(st.tuples(st.integers(0, 600), st.integers(-600, 600)), min_size=1, max_size=12, unique=True))
def test_the_line_is_a_total_order_that_prefect_times_and_zones_do_not_change(bookings: list[tuple[int, int]]) -> None:
    from zoneinfo import ZoneInfo

    berlin = ZoneInfo("Europe/Berlin")
    runs = [(f"run-{i}", T0 + timedelta(seconds=s), T0 + timedelta(seconds=p)) for i, (s, p) in enumerate(bookings)]
    in_utc = sorted(place_in_line(r, {"placement": {"start": s.isoformat(), "placed_at": p.isoformat()}},
                                  scheduled=T0, created=T0) for r, s, p in runs)
    in_berlin = sorted(place_in_line(r, {"placement": {"start": s.astimezone(berlin).isoformat(),
                                                       "placed_at": p.astimezone(berlin).isoformat()}},
                                     scheduled=T0, created=T0) for r, s, p in runs)
    assert in_utc == in_berlin
    assert [p.flow_run_id for p in in_utc] == [r for r, _, _ in sorted(runs, key=lambda r: (r[1], r[2], r[0]))]


class _Stop(Exception):
    pass


def test_a_waiter_reads_the_line_after_the_slots_so_a_run_booked_earlier_that_joins_meanwhile_goes_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race CI met once: a waiter saw the line empty, then (a moment later) the slot free, and took it
    from a run booked earlier that had joined in between. Reading the slots first, then the line, the
    waiter sees that run ahead and lets it ask."""
    import httpx
    from contextlib import ExitStack

    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError

    import flows.fleet.gpus as gpus

    earlier = PlaceInLine(T0, T0, "earlier")
    seen: list[str] = []
    asks: list[str] = []

    class Line:
        joined_ahead = False  # the run booked earlier has not come to the GPUs yet

        def ahead(self) -> list[PlaceInLine]:
            seen.append("line")
            return [earlier] if self.joined_ahead else []

        def asking(self) -> None:
            pass

        def holding(self) -> None:
            pass

        def waiting(self, ahead: int) -> None:
            pass

        announce = staticmethod(lambda _line: None)

    line = Line()

    def room_for(names, occupy) -> bool:
        seen.append("slots")
        if seen.count("slots") == 2:
            raise _Stop
        line.joined_ahead = True  # meanwhile the earlier run joined the line, and the overrunning run let go
        return True

    def refused(*args, **kwargs):
        asks.append("ask")
        request = httpx.Request("POST", "http://server/v2/concurrency_limits/increment")
        try:
            raise httpx.HTTPStatusError("taken", request=request, response=httpx.Response(423, request=request))
        except httpx.HTTPStatusError as taken:
            raise ConcurrencySlotAcquisitionError("taken") from taken

    monkeypatch.setattr(gpus, "room_for", room_for)
    monkeypatch.setattr("prefect.concurrency.sync.concurrency", refused)
    monkeypatch.setattr(gpus, "RECONCILE_S", float("inf"))
    with pytest.raises(_Stop), ExitStack() as stack:
        gpus.take_slots(["gridshift-gpus-x"], 1, wait_s=60, lease_s=60, stack=stack, poll_s=0.0, line=line)
    assert asks == ["ask"]  # its first ask only (refused): the freed slot was left to the run ahead
    assert seen[:4] == ["line", "slots", "line", "slots"]


def test_a_waiter_gives_the_slot_back_when_a_run_booked_earlier_joined_during_its_ask(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect's slot service queues an ask behind the process's others, so it can reach the server after the
    overrunning run let go and after a run booked earlier joined the line (CI saw the later run train first).
    The waiter looks at the line again once it has the slot, gives it back, and waits behind that run."""
    from contextlib import ExitStack, contextmanager

    import flows.fleet.gpus as gpus

    earlier = PlaceInLine(T0, T0, "earlier")
    events: list[str] = []

    class Line:
        joined_ahead = False

        def ahead(self) -> list[PlaceInLine]:
            return [earlier] if self.joined_ahead else []

        def asking(self) -> None:
            events.append("asking")

        def holding(self) -> None:
            events.append("holding")

        def waiting(self, ahead: int) -> None:
            events.append(f"waiting behind {ahead}")

        announce = staticmethod(lambda _line: None)

    line = Line()

    @contextmanager
    def granted(*args, **kwargs):
        events.append("granted")
        line.joined_ahead = True  # the earlier run joined while the ask waited in Prefect's queue
        yield
        events.append("given back")

    def room_for(names, occupy) -> bool:
        raise _Stop  # the next poll: the test has seen what it needs

    monkeypatch.setattr(gpus, "room_for", room_for)
    monkeypatch.setattr("prefect.concurrency.sync.concurrency", granted)
    with pytest.raises(_Stop), ExitStack() as stack:
        gpus.take_slots(["gridshift-gpus-x"], 1, wait_s=60, lease_s=60, stack=stack, poll_s=0.0, line=line)
    assert events == ["asking", "granted", "given back", "waiting behind 1"]


def _waiting_flow(placement: dict | None = None) -> None:
    """Stands for the nightly flow: only its name and parameters reach the server."""


def _running_run(client, name: str, start_s: int, *, state=None) -> str:
    from prefect import flow
    from prefect.states import Running

    placement = {"start": (T0 + timedelta(seconds=start_s)).isoformat(), "placed_at": T0.isoformat()}
    run = client.create_flow_run(flow(name="gridshift-line-test")(_waiting_flow), name=name, tags=["gridshift"],
                                 parameters={"placement": placement}, state=state or Running())
    return str(run.id)


def _in_line(client, limit: str) -> set[str]:
    return {r.place.flow_run_id for r in line_records(client, limit)}


def _until(what: str, check, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.2)  # polling the server's state, not timing the code under test


def test_waiting_runs_take_a_freed_gpu_in_the_order_they_were_booked(fleet_api, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    site = f"line-{os.getpid()}"
    limit = gpu_limit_name(site)
    ensure_limits({limit: 1})
    with get_client(sync_client=True) as client:
        runs = {name: _running_run(client, name, start_s) for name, start_s in
                (("first", 0), ("second", 5), ("third", 10))}
        order: list[str] = []
        said: dict[str, list[str]] = {name: [] for name in runs}

        def wait_for_the_gpu(name: str) -> None:
            with hold_gpus(site, 1, 1, lock_dir=tmp_path, wait_s=120, flow_run_id=runs[name],
                           announce=said[name].append):
                order.append(name)

        waiters = []
        # an overrunning run holds the node's one GPU (a run in Prefect: the slot check counts it as the holder)
        with hold_gpus(site, 1, 1, lock_dir=tmp_path, flow_run_id=_running_run(client, "overrunning", -60)):
            for name in ("second", "third", "first"):  # the first booked comes to wait last
                waiters.append(threading.Thread(target=wait_for_the_gpu, args=(name,)))
                waiters[-1].start()
                _until(f"{name} stands in line", lambda n=name: runs[n] in _in_line(client, limit))
        for waiter in waiters:
            waiter.join(timeout=120)
        assert order == ["first", "second", "third"]
        def line(ahead: int, name: str) -> str:
            return (f"{limit}: the GPU slots are taken; waiting in line behind {ahead} other run(s) "
                    f"(Prefect variable {line_variable(limit, runs[name])})")

        assert said == {"second": [line(0, "second")], "third": [line(1, "third")], "first": [line(0, "first")]}
        assert not _in_line(client, limit)  # each left the line once it gave the GPU back
        assert client.read_flow_run(runs["first"]).tags == ["gridshift"]  # and the run's own tags were never touched


def _stand_in_line_then_sleep(limit: str, flow_run_id: str, api: str) -> None:
    """A waiter's process: stands in line (and keeps its place fresh) until it is killed."""
    os.environ["PREFECT_API_URL"] = api
    from flows.fleet.gpu_line import waiting_line

    with waiting_line(limit, flow_run_id) as line:
        while True:
            line.ahead()
            time.sleep(0.5)


@pytest.mark.waits(minutes=1)  # the dead waiter's place goes stale after STALE_S (tests/conftest.py)
def test_a_waiter_killed_in_line_stops_holding_it_up_within_a_minute(fleet_api,
                                                                    tmp_path: Path) -> None:
    """Race 1 of issue 32: a waiter killed while waiting kept its line tag, and the line waited for it
    until Prefect marked it Crashed (up to two minutes). Its place is now stale once it stops touching it."""
    import multiprocessing
    import signal

    from prefect.client.orchestration import get_client

    from flows.fleet.gpu_line import STALE_S

    site = f"line-killed-{os.getpid()}"
    limit = gpu_limit_name(site)
    ensure_limits({limit: 1})
    with get_client(sync_client=True) as client:
        dead, alive = _running_run(client, "dead", 0), _running_run(client, "alive", 60)
        waiter = multiprocessing.get_context("fork").Process(target=_stand_in_line_then_sleep,
                                                             args=(limit, dead, fleet_api.url))
        got: list[float] = []
        with hold_gpus(site, 1, 1, lock_dir=tmp_path,  # the GPU is busy while both come to wait
                       flow_run_id=_running_run(client, "overrunning", -60)):
            waiter.start()
            _until("the first-booked waiter stands in line", lambda: dead in _in_line(client, limit))
            behind = threading.Thread(target=lambda: got.append(_hold_and_time(site, tmp_path, alive)))
            behind.start()
            _until("the second stands in line", lambda: alive in _in_line(client, limit))
            os.kill(waiter.pid, signal.SIGKILL)  # dies in line, ahead; Prefect still has its run Running
            waiter.join()
            freed = time.monotonic()
        behind.join(timeout=STALE_S + 60)
        assert got and got[0] - freed < STALE_S + 10, (got, freed)
        assert client.read_flow_run(dead).state_type.value == "RUNNING"  # not by a Crashed mark


def _hold_and_time(site: str, lock_dir: Path, flow_run_id: str) -> float:
    with hold_gpus(site, 1, 1, lock_dir=lock_dir, wait_s=120, flow_run_id=flow_run_id):
        return time.monotonic()


def test_a_tag_added_while_a_run_stands_in_line_is_kept(fleet_api, tmp_path: Path) -> None:
    """Race 2 of issue 32: the line rewrote a run's tags whole from the copy it read on joining, so a tag
    another actor added meanwhile was lost. The line no longer writes the run's tags at all."""
    from prefect.client.orchestration import get_client

    site = f"line-tags-{os.getpid()}"
    limit = gpu_limit_name(site)
    ensure_limits({limit: 1})
    with get_client(sync_client=True) as client:
        run = _running_run(client, "tagged", 0)
        done: list[bool] = []
        with hold_gpus(site, 1, 1, lock_dir=tmp_path, flow_run_id=_running_run(client, "overrunning", -60)):
            waiter = threading.Thread(target=lambda: done.append(bool(_hold_and_time(site, tmp_path, run))))
            waiter.start()
            _until("it stands in line", lambda: run in _in_line(client, limit))
            client.update_flow_run(run, tags=["gridshift", "added-by-someone-else"])  # the other actor
        waiter.join(timeout=60)
        assert done == [True]
        assert sorted(client.read_flow_run(run).tags) == ["added-by-someone-else", "gridshift"]


def test_a_run_stands_in_line_before_its_first_ask(fleet_api, tmp_path: Path) -> None:
    """Two runs reaching a free GPU in the same moment: the one booked first gets it, not the faster asker."""
    from prefect.client.orchestration import get_client

    from flows.fleet.gpu_line import waiting_line
    from flows.fleet.gpus import GpusBusy

    site = f"line-first-ask-{os.getpid()}"
    limit = gpu_limit_name(site)
    ensure_limits({limit: 1})
    with get_client(sync_client=True) as client:
        earlier, later = _running_run(client, "earlier", 0), _running_run(client, "later", 5)
        with waiting_line(limit, earlier):  # in line, its ask not sent yet
            with pytest.raises(GpusBusy, match="free for 2 s"):
                with hold_gpus(site, 1, 1, lock_dir=tmp_path, wait_s=2, flow_run_id=later):
                    pass
        with hold_gpus(site, 1, 1, lock_dir=tmp_path, wait_s=2, flow_run_id=later) as held:  # its turn now
            assert held.asked_at <= held.acquired_at
