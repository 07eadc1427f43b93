"""A running run's power cap as it changes: the caps it runs under and the grid events it hears.

:class:`CapWatch` is what the run loop's driver (:mod:`flows.supervise`) asks "what is my power
headroom now?" (:meth:`CapWatch.cap`) and, while the job trains, "did anything change?"
(:meth:`CapWatch.poll`, every ``poll_s``: one ``stat`` of the machine's event file, and for a
site run a read of the site's Prefect variable every ``site_poll_s``). A change wakes the loop,
which re-plans at once (:func:`scheduler.loop.loop.run_loop`).

The headroom combines, the lowest holding:

- the machine's cap (``power_cap_w`` of the policy) and every machine or site event, shared among
  the gridshift runs on this machine by their GPUs (:class:`MachineRuns`: each run registers while
  it trains, so two runs on one node each get their part of a site's cap);
- the power a placed run booked at its site (its placement's power profile): the site's cap less
  what the other runs booked, which is the run's own and is not shared.

An event's ``reduce_pct`` is turned into watts once, when the run first hears of it, from the
power it draws then (``power_now``): every run on the machine cuts its own draw by that share.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from carbon.events import MACHINE, EventStore, GridEvent, default_store, site_scope
from carbon.paths import gridshift_home
from scheduler.planner.power_cap import CapWindow, PowerCap
from scheduler.report import ModeSpan
from scheduler.run_spec import RunSpec

__all__ = ["CapWatch", "MachineRuns", "booked_windows", "cap_summary", "cap_watch_for"]


class MachineRuns:
    """The gridshift runs training on this machine now, and their GPUs: one small file per run."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or gridshift_home() / "running"

    def join(self, run_id: str, gpus: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{run_id}.json").write_text(json.dumps({"pid": os.getpid(), "gpus": gpus}), encoding="utf-8")

    def leave(self, run_id: str) -> None:
        (self.folder / f"{run_id}.json").unlink(missing_ok=True)

    def gpus(self) -> int:
        """GPUs held by live runs (a file whose process is gone is removed: a killed run holds nothing)."""
        total = 0
        for f in self.folder.glob("*.json") if self.folder.is_dir() else ():
            try:
                entry = json.loads(f.read_text(encoding="utf-8"))
                os.kill(int(entry["pid"]), 0)
            except ProcessLookupError:
                f.unlink(missing_ok=True)
                continue
            except (OSError, ValueError, KeyError, TypeError):
                continue
            total += int(entry.get("gpus", 1))
        return total


@dataclass
class CapWatch:
    """See the module docstring. ``machine_cap_w``: the policy's cap for this machine (None: none);
    ``booked``: a placed run's own booking (its windows); ``site``: the run's site (its events too)."""

    store: EventStore
    gpus: int = 1
    machine_cap_w: float | None = None
    booked: Sequence[CapWindow] = ()
    site: str | None = None
    runs: MachineRuns | None = None
    site_events: Callable[[str], list[GridEvent]] | None = None
    power_now: Callable[[], float] = lambda: 0.0
    poll_s: float = 2.0
    site_poll_s: float = 5.0
    clock: Callable[[], float] = time.monotonic
    warn: Callable[[str], None] = lambda note: None
    heard: dict[str, GridEvent] = field(default_factory=dict)  # every event heard, by id (the report lists them)
    heard_at: dict[str, datetime] = field(default_factory=dict)  # when the run first heard of each
    _events: list[GridEvent] = field(default_factory=list)
    _site: list[GridEvent] = field(default_factory=list)
    _stamp: object = None
    _share: float = 1.0
    _next_s: float = float("-inf")
    _next_site_s: float = float("-inf")
    _resolved: dict[str, float] = field(default_factory=dict)
    _failing: bool = False
    run_id: str = ""

    def close(self) -> None:
        """The run is over: it no longer takes a share of the machine's caps."""
        if self.runs is not None and self.run_id:
            self.runs.leave(self.run_id)

    def poll(self) -> bool:
        """Look for a change (at most every ``poll_s``): True when the cap may have changed."""
        now = self.clock()
        if now < self._next_s:
            return False
        self._next_s = now + self.poll_s
        changed = False
        stamp = self.store.stamp()
        if stamp != self._stamp:
            try:
                events = [e for e in self.store.load() if e.scope in self._scopes()]
            except Exception as exc:  # a damaged file costs the new event, not the run: keep the last ones
                self._note(f"grid events unreadable ({exc}); keeping the last ones")
            else:
                self._stamp = stamp
                changed = changed or events != self._events
                self._events = events
        if self.site is not None and self.site_events is not None and now >= self._next_site_s:
            self._next_site_s = now + self.site_poll_s
            try:
                site = self.site_events(self.site)
            except Exception as exc:  # the server away: the events already heard still hold
                self._note(f"the site's grid events could not be read ({type(exc).__name__}: {exc}); keeping the last ones")
            else:
                self._failing = False
                changed = changed or site != self._site
                self._site = site
        if self.runs is not None:
            share = self.gpus / max(self.runs.gpus(), self.gpus)
            changed = changed or abs(share - self._share) > 1e-9
            self._share = share
        return changed

    def _scopes(self) -> tuple[str, ...]:
        return (MACHINE,) if self.site is None else (MACHINE, site_scope(self.site))

    def _note(self, note: str) -> None:
        if not self._failing:
            self._failing = True
            self.warn(note)

    def cap(self, t: datetime) -> PowerCap:
        """The run's headroom as known now (see the module docstring)."""
        self.poll()
        share = self._share
        windows = list(self.booked)
        if self.machine_cap_w is not None:
            part = f" (this run's {share:.0%})" if share < 1 else ""
            windows.append(CapWindow(self.machine_cap_w * share, f"the machine's power cap of {self.machine_cap_w:.0f} W{part}"))
        for e in [*self._events, *self._site]:
            if e.over(t) and e.id not in self.heard:
                continue  # ended before this run heard of it
            self.heard[e.id] = e
            self.heard_at.setdefault(e.id, t)
            watts = e.cap_w * share if e.cap_w is not None else self._reduced(e)
            where = "this machine" if e.scope == MACHINE else f"site {e.scope[5:]}"
            part = f", this run's {share:.0%}" if share < 1 else ""
            windows.append(CapWindow(watts, f"grid event {e.id} on {where}: {e.limit()}{part}, {e.source}"
                                     + (f": {e.reason}" if e.reason else ""), e.start, e.end))
        return PowerCap(tuple(windows))

    def _reduced(self, e: GridEvent) -> float:
        """A reduction's watts for this run: its own draw when it first heard of the event, less the share asked."""
        if e.id not in self._resolved:
            assert e.reduce_pct is not None
            self._resolved[e.id] = max(self.power_now(), 0.0) * (1.0 - e.reduce_pct / 100.0)
        return self._resolved[e.id]

    def watts_for_run(self, e: GridEvent) -> float | None:
        """The watts ``e`` allowed this run (its share of a cap, or what a reduction came to)."""
        return e.cap_w * self._share if e.cap_w is not None else self._resolved.get(e.id)


def cap_summary(spans: Sequence[ModeSpan], watch: CapWatch | None) -> dict[str, object] | None:
    """What the report says of the cap: whether every span kept under its headroom, the least
    headroom left, and per event when the run heard it and how soon it drew no more than it allowed
    (``heard_after_s`` and ``response_s``, from the event's start). None when the run had no cap and
    heard no event."""
    capped = [s for s in spans if s.cap_w is not None]
    if not capped and (watch is None or not watch.heard):
        return None
    events = []
    for e in (watch.heard.values() if watch is not None else ()):
        assert watch is not None
        allowed = watch.watts_for_run(e)
        heard = watch.heard_at.get(e.id)
        begin = e.start
        under = None
        for s in sorted(spans, key=lambda s: s.start):
            if s.end <= begin or (e.end is not None and s.start >= e.end):
                continue
            if allowed is not None and (s.power_w or 0.0) <= allowed + 1e-6:
                under = max(s.start, begin)
                break
        events.append({**e.to_json(), "cap_w_for_this_run": allowed,
                       "heard_at": heard.isoformat() if heard is not None else None,
                       "heard_after_s": (heard - begin).total_seconds() if heard is not None else None,
                       "under_cap_at": under.isoformat() if under is not None else None,
                       "response_s": (under - begin).total_seconds() if under is not None else None})
    return {"held": all((s.power_w or 0.0) <= (s.cap_w or 0.0) + 1e-6 for s in capped),
            "min_headroom_w": min((s.cap_w - (s.power_w or 0.0) for s in capped if s.cap_w is not None), default=None),
            "spans_capped": len(capped), "events": events,
            "label": "span power: the backend's meter (modelled on a simulated GPU); caps as the run knew them"}



def booked_windows(placement: Mapping[str, Any]) -> tuple[CapWindow, ...]:
    """A placed run's own power at its site: what it booked per segment (``placement["power"]``: ``[start,
    end, W]``), and outside them its GPUs' share of the site's cap (``power_share_w``): a run that
    starts early or overruns its booking stays within its part of the cap."""
    site, cap = placement.get("site", "?"), placement.get("power_cap_w")
    share = placement.get("power_share_w")
    segments = sorted((datetime.fromisoformat(a), datetime.fromisoformat(b), float(w)) for a, b, w in placement["power"])
    why = f"the power booked at site {site} ({cap:.0f} W cap less the other runs' bookings)" if cap else "booked"
    out = [CapWindow(w, why, a, b) for a, b, w in segments]
    if share is not None:
        rest = f"this run's share of site {site}'s {cap:.0f} W cap by its GPUs, outside its booking"
        edges = [None] + [t for a, b, _ in segments for t in (a, b)] + [None]
        for lo, hi in zip(edges[::2], edges[1::2]):
            if lo is None or hi is None or hi > lo:
                out.append(CapWindow(float(share), rest, lo, hi))
    return tuple(out)


def cap_watch_for(spec: RunSpec, run_id: str, placement: Mapping[str, Any] | None = None, *,
                  store: EventStore | None = None) -> CapWatch:
    """The watch of one run: the machine's events and cap (or, placed on a site, its booking and the
    site's events too), its GPUs registered among this machine's runs until :meth:`CapWatch.close`."""
    from flows.fleet.site_events import read_site_events

    booked = booked_windows(placement) if placement and placement.get("power") else ()
    runs = MachineRuns()
    runs.join(run_id, spec.job.gpus)
    return CapWatch(store=store or default_store(), gpus=spec.job.gpus, machine_cap_w=None if booked else spec.power_cap_w,
                    booked=booked, site=spec.site, runs=runs, site_events=read_site_events if spec.site else None,
                    run_id=run_id)
