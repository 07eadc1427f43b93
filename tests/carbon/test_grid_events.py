"""Grid events (issue 34): the event type, the machine's event file, OpenADR 3 capacity limits."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
import respx

from carbon.errors import ProviderUnreachable
from carbon.events import MACHINE, BadEvent, EventStore, GridEvent, events_from_openadr, parse_duration, read_openadr

T0 = datetime(2021, 8, 25, 20, 0, tzinfo=timezone.utc)


def _openadr(**over: object) -> dict:
    event = {"id": "ev-1", "programID": "dr-prog", "eventName": "ERCOT EEA",
             "payloadDescriptors": [{"objectType": "EVENT_PAYLOAD_DESCRIPTOR", "payloadType": "IMPORT_CAPACITY_LIMIT",
                                     "units": "KW"}],
             "intervalPeriod": {"start": "2021-08-25T20:00:00Z", "duration": "PT1H"},
             "intervals": [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [1.2]}]},
                           {"id": 1, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [0.8]}]},
                           {"id": 2, "payloads": [{"type": "PRICE", "values": [0.31]}]}]}
    event.update(over)
    return event


@pytest.mark.parametrize("text, seconds", [("60s", 60), ("15m", 900), ("15min", 900), ("2h", 7200), ("1h30m", 5400),
                                           ("PT1H", 3600), ("PT90S", 90), ("90", 90), ("P1DT2H", 93600)])
def test_durations_read_as_people_and_openadr_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("bad", ["", "6q", "h", "PT"])
def test_a_bad_duration_is_one_clear_error(bad: str) -> None:
    with pytest.raises(BadEvent, match="not a duration"):
        parse_duration(bad)


def test_an_event_needs_one_limit_and_an_end_after_its_start() -> None:
    with pytest.raises(BadEvent, match="one of them"):
        GridEvent(start=T0, end=None)
    with pytest.raises(BadEvent, match="one of them"):
        GridEvent(start=T0, end=None, cap_w=1.0, reduce_pct=5.0)
    with pytest.raises(BadEvent, match="before it starts"):
        GridEvent(start=T0, end=T0, cap_w=400.0)
    with pytest.raises(BadEvent, match="at most 100"):
        GridEvent(start=T0, end=None, reduce_pct=120.0)
    with pytest.raises(BadEvent, match="scope"):
        GridEvent(start=T0, end=None, cap_w=1.0, scope="rack:4")


def test_the_store_keeps_every_writer_and_cancels_by_ending(tmp_path: Path) -> None:
    store = EventStore(tmp_path / "events.json")
    assert store.load() == [] and store.stamp() is None
    a = GridEvent(start=T0, end=T0 + timedelta(hours=1), cap_w=400.0, id="a")
    b = GridEvent(start=T0, end=None, reduce_pct=30.0, scope="site:de", id="b")
    threads = [threading.Thread(target=store.add, args=(e,), kwargs={"now": T0}) for e in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {e.id for e in store.load()} == {"a", "b"}
    stamp = store.stamp()
    ended = store.cancel("b", now=T0 + timedelta(minutes=5))
    assert ended is not None and ended.end == T0 + timedelta(minutes=5)
    assert store.stamp() != stamp                                     # a run's stat sees the change
    assert store.cancel("nope", now=T0) is None
    # events that ended more than a day ago are dropped at the next write
    store.add(GridEvent(start=T0 + timedelta(days=3), end=None, cap_w=1.0, id="c"), now=T0 + timedelta(days=3))
    assert [e.id for e in store.load()] == ["c"]


def test_a_damaged_store_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text('{"events": [\n  {"id": 1,\n}')
    with pytest.raises(BadEvent, match=r"events.json:3: not JSON"):
        EventStore(path).load()


def test_openadr_capacity_limits_become_events_one_per_interval_in_order() -> None:
    events = events_from_openadr(_openadr(), now=T0, scope="site:de")
    assert [(e.start, e.end, e.cap_w) for e in events] == [
        (T0, T0 + timedelta(hours=1), 1200.0), (T0 + timedelta(hours=1), T0 + timedelta(hours=2), 800.0)]
    assert all(e.scope == "site:de" and e.source == "openadr event ev-1" and e.reason == "ERCOT EEA" for e in events)


def test_openadr_now_and_forever_are_read_as_the_user_guide_says() -> None:
    ev = _openadr(intervalPeriod={"start": "0001-01-01T00:00:00Z", "duration": "P9999Y"},
                  intervals=[{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [5]}]}])
    (event,) = events_from_openadr(ev, now=T0)
    assert event.start == T0 and event.end is None and event.scope == MACHINE


def test_an_interval_with_its_own_period_wins() -> None:
    ev = _openadr(intervals=[{"id": 7, "intervalPeriod": {"start": "2021-08-26T01:00:00Z", "duration": "PT15M"},
                              "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [2]}]}])
    (event,) = events_from_openadr(ev, now=T0)
    assert event.start == T0 + timedelta(hours=5) and event.end - event.start == timedelta(minutes=15)


@pytest.mark.parametrize("over, message", [
    ({"payloadDescriptors": [{"payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KWH"}]}, "units KW"),
    ({"payloadDescriptors": []}, "units KW"),
    ({"intervals": [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": ["x"]}]}]}, "one number"),
    ({"intervals": "nope"}, "not an OpenADR 3 event"),
    ({"intervalPeriod": {"start": "yesterday", "duration": "PT1H"}}, "not a date-time"),
])
def test_an_unusable_openadr_event_is_one_clear_error(over: dict, message: str) -> None:
    with pytest.raises(BadEvent, match=message):
        events_from_openadr(_openadr(**over), now=T0)


def test_openadr_from_a_file_names_a_broken_line(tmp_path: Path) -> None:
    good = tmp_path / "events.json"
    good.write_text(json.dumps([_openadr(), _openadr(id="ev-2", programID="other")]))
    assert len(read_openadr(str(good), now=T0)) == 4
    assert len(read_openadr(str(good), now=T0, program="other")) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("[\n{\n")
    with pytest.raises(BadEvent, match=r"bad.json:3: not JSON"):
        read_openadr(str(bad), now=T0)


@respx.mock
def test_openadr_from_a_vtn_reads_events_with_the_token_and_retries() -> None:
    route = respx.get("https://vtn.example/openadr3/3.0.1/events").mock(
        side_effect=[httpx.Response(503), httpx.Response(200, json=[_openadr()])])
    pauses: list[float] = []
    with httpx.Client() as client, pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRIDSHIFT_OPENADR_TOKEN", "secret")
        events = read_openadr("https://vtn.example/openadr3/3.0.1/events", now=T0, client=client, sleep=pauses.append)
    assert len(events) == 2 and route.call_count == 2 and len(pauses) == 1   # the 503 retried, as the providers do
    assert route.calls.last.request.headers["Authorization"] == "Bearer secret"


@respx.mock
def test_an_unreachable_vtn_is_a_carbon_error() -> None:
    respx.get("https://vtn.example/events").mock(side_effect=httpx.ConnectError("refused"))
    with httpx.Client() as client, pytest.raises(ProviderUnreachable):
        read_openadr("https://vtn.example/events", now=T0, client=client)
