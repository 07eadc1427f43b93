"""Apply a clock plan while PyTorch trains: switch the SM clock at phase boundaries, off the training thread.

The training thread only does a dictionary lookup per phase (``on_phase``), and a queue put where a
segment starts; a worker thread makes the slow driver calls (NVML set-clock takes 10-20 ms
in-process, Zeus #29). The worker coalesces bursts (only the newest target matters), rate-limits
calls to at most one per ``min_interval_s``, skips calls that would not change the clock, and on
``close`` resets the locked clock if it locked one.

``dry_run=True`` replaces the hardware with :class:`DryRunControl`, which counts the calls it would
have made and touches nothing. A dry run has no worker: the same coalescing and rate limit run on
the calling thread against the clock (a few attribute reads a switch), because every wake-up of a
worker costs the training thread a GIL hand-off (tens of µs, more on an idle many-core host) that
a call which does nothing does not need. Its counts are the calls a real run would make.

The hardware is reached through :class:`ClockControl`, a two-method protocol that the NVIDIA
backend satisfies. NVML calls are host calls, not stream-ordered: the CPU runs ahead of the GPU, so
a switch issued at a phase's launch lands while earlier kernels still run. Plans therefore use
phase boundaries and minimum segment durations of many switch latencies (gpu-facts 4.6 option c).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from plans.dvfs.errors import ExecutorError
from plans.dvfs.plan_file import ClockPlan

__all__ = ["ClockControl", "DryRunControl", "ExecutorStats", "PlanExecutor", "attach_to_modules"]

_log = logging.getLogger("gridshift.dvfs.executor")
_STOP = object()


@runtime_checkable
class ClockControl(Protocol):
    """What the executor needs from a backend: lock the SM clock to a range, and undo the lock."""

    def set_locked_sm_clock_mhz(self, lo_mhz: int, hi_mhz: int) -> None: ...

    def reset_locked_sm_clock(self) -> None: ...


class DryRunControl:
    """Counts the calls a real backend would get; changes nothing.

    ``n_calls``: all of them; ``calls``: the newest ``keep`` (a dry run may last days: no list that
    grows by a few entries a step). Each distinct call is logged once (INFO), the first time.
    """

    def __init__(self, logger: logging.Logger | None = None, *, keep: int = 1000) -> None:
        self.calls: deque[tuple[str, tuple[int, ...]]] = deque(maxlen=keep)
        self.n_calls = 0
        self._logged: set[tuple[str, tuple[int, ...]]] = set()
        self._log = logger or _log

    def _record(self, call: tuple[str, tuple[int, ...]]) -> None:
        self.calls.append(call)
        self.n_calls += 1
        if call not in self._logged:
            self._logged.add(call)
            self._log.info("dry run: would call %s(%s) (logged once; every call is counted)", call[0],
                           ", ".join(map(str, call[1])))

    def set_locked_sm_clock_mhz(self, lo_mhz: int, hi_mhz: int) -> None:
        self._record(("set_locked_sm_clock_mhz", (lo_mhz, hi_mhz)))

    def reset_locked_sm_clock(self) -> None:
        self._record(("reset_locked_sm_clock", ()))


@dataclass
class ExecutorStats:
    """Counters: phases seen, switch requests, calls made, requests coalesced away, errors."""

    phases: int = 0
    requested: int = 0
    issued: int = 0
    coalesced: int = 0
    errors: int = 0
    last_error: str = ""


class PlanExecutor:
    """Runs a :class:`ClockPlan` against a :class:`ClockControl` from a worker thread (a dry run:
    on the calling thread, see the module docstring).

    Usage::

        with PlanExecutor(plan, backend, min_interval_s=0.02) as ex:
            for batch in loader:
                ex.on_phase("layer0.forward")   # or attach_to_modules(ex, {...})
                ...

    ``clock`` and ``wait`` are injectable (monotonic seconds; wait(seconds) may return early).
    Errors from the control are counted and logged, never raised into the training thread.
    """

    def __init__(
        self,
        plan: ClockPlan,
        control: ClockControl | None = None,
        *,
        dry_run: bool = False,
        min_interval_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], Any] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if min_interval_s < 0:
            raise ExecutorError("min_interval_s must be >= 0")
        if control is None and not dry_run:
            raise ExecutorError("give a ClockControl, or dry_run=True")
        self.plan = plan
        self.control: ClockControl = DryRunControl(logger) if dry_run else control  # type: ignore[assignment]
        self.dry_run = dry_run
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._log = logger or _log
        self._targets: Mapping[str, int] = plan.phase_clocks()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._started = False
        self._last_requested: int | None = None
        self._current: int | None = None
        self._last_call_s = -float("inf")
        self._waiting: int | None = None  # dry run: the newest request, waiting out the rate limit
        self._closed = False
        self.stats = ExecutorStats()

    # -- training-thread side (cheap) -----------------------------------------------------------
    def on_phase(self, phase: str) -> bool:
        """Call at the start of a phase; asks for a switch when a segment starts here (True then)."""
        self.stats.phases += 1
        target = self._targets.get(phase)
        if target is None or target == self._last_requested:
            return False
        if self._closed:
            raise ExecutorError("the executor is closed")
        self._last_requested = target
        self.stats.requested += 1
        if self.dry_run:
            self._request_here(target)
        else:
            self._queue.put(target)
        return True

    def flush(self) -> None:
        """Block until every request so far has been handled (e.g. at the end of an iteration)."""
        if self.dry_run:
            self._settle(force=True)
        elif self._thread is not None and self._thread.is_alive():
            done = threading.Event()
            self._queue.put(done)
            done.wait()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "PlanExecutor":
        if self._started or self._closed:
            raise ExecutorError("start() may be called once, before close()")
        self._started = True
        if not self.dry_run:
            self._thread = threading.Thread(target=self._run, name="gridshift-dvfs", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the worker, then reset the locked clock if this executor locked one. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(_STOP)
            self._stop.set()
            self._thread.join()
        self._settle(force=True)
        if self._current is not None:
            self._call(self.control.reset_locked_sm_clock)
            self._current = None

    def __enter__(self) -> "PlanExecutor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- dry run: the worker's coalescing and rate limit, on the calling thread -------------------
    def _request_here(self, target: int) -> None:
        self._settle()
        if self._waiting is not None:  # the last call was less than min_interval_s ago: the newest wins
            self._waiting = target
            self.stats.coalesced += 1
        elif self._clock() - self._last_call_s >= self.min_interval_s:
            self._switch(target, self._clock())
        else:
            self._waiting = target

    def _settle(self, *, force: bool = False) -> None:
        """The waiting request's call, once the rate limit has run out (``force``: now, as a worker
        finishing its wait would), dated when it ran out."""
        due = self._last_call_s + self.min_interval_s
        if self._waiting is not None and (force or self._clock() >= due):
            target, self._waiting = self._waiting, None
            self._switch(target, due)

    # -- worker side --------------------------------------------------------------------------
    def _switch(self, target: int, at: float | None) -> None:
        """Lock ``target`` unless it is the clock already; the rate limit counts from ``at`` (None: now, after the call)."""
        if target != self._current:
            if self._call(self.control.set_locked_sm_clock_mhz, target, target):
                self._current = target
            self._last_call_s = self._clock() if at is None else at

    def _call(self, fn: Callable[..., None], *args: int) -> bool:
        try:
            fn(*args)
            self.stats.issued += 1
            return True
        except Exception as exc:  # a failing driver call must never reach the training thread
            self.stats.errors += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            self._log.warning("clock switch failed: %s", self.stats.last_error)
            return False

    def _take(self, item: Any, latest: int | None, done: list[threading.Event]) -> tuple[int | None, bool]:
        """One queued item: the target it brings (else ``latest``) and whether it is the stop."""
        if item is _STOP:
            return latest, True
        if isinstance(item, threading.Event):
            done.append(item)
            return latest, False
        if latest is not None:
            self.stats.coalesced += 1
        return item, False

    def _drain(self, latest: int | None, done: list[threading.Event]) -> tuple[int | None, bool]:
        """The newest target queued (else ``latest``) and whether to stop; flush markers go to ``done``."""
        stop = False
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return latest, stop
            latest, stopped = self._take(item, latest, done)
            stop = stop or stopped

    def _run(self) -> None:
        stop = False
        done: list[threading.Event] = []
        while not stop:
            target, stop = self._take(self._queue.get(), None, done)
            more, stop_too = self._drain(target, done)
            target, stop = more, stop or stop_too
            if target is not None:
                remaining = self.min_interval_s - (self._clock() - self._last_call_s)
                if remaining > 0 and not stop:
                    self._wait(remaining)
                    target, stop = self._drain(target, done)
                self._switch(target, None)
            for event in done:  # flush() callers: everything queued before their marker is handled
                event.set()
            done.clear()
        self._drain(None, done)  # a flush that raced the stop must not wait for ever
        for event in done:
            event.set()


def attach_to_modules(executor: PlanExecutor, modules: Mapping[str, Any]) -> list[Any]:
    """Call ``on_phase`` from PyTorch module hooks: ``{"layer0": module}`` gives phases
    ``layer0.forward`` (forward pre-hook) and ``layer0.backward`` (full backward pre-hook).

    Returns the hook handles (call ``.remove()`` on each to detach). Needs no torch import.
    """
    handles = []
    for name, module in modules.items():
        fwd, bwd = f"{name}.forward", f"{name}.backward"
        handles.append(module.register_forward_pre_hook(lambda _m, _i, _p=fwd: executor.on_phase(_p)))
        handles.append(module.register_full_backward_pre_hook(lambda _m, _g, _p=bwd: executor.on_phase(_p)))
    return handles
