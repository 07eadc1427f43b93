"""Apply a clock plan while PyTorch trains: switch the SM clock at phase boundaries, off the training thread.

The training thread only does a dictionary lookup and a queue put per phase (``on_phase``); a
worker thread makes the slow driver calls (NVML set-clock takes 10-20 ms in-process, Zeus #29).
The worker coalesces bursts (only the newest target matters), rate-limits calls to at most one per
``min_interval_s``, skips calls that would not change the clock, and on ``close`` resets the
locked clock if it locked one. ``dry_run=True`` replaces the hardware with :class:`DryRunControl`,
which logs and records the calls it would have made and touches nothing.

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
    """Logs and records the calls a real backend would get; changes nothing."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self._log = logger or _log

    def set_locked_sm_clock_mhz(self, lo_mhz: int, hi_mhz: int) -> None:
        self.calls.append(("set_locked_sm_clock_mhz", (lo_mhz, hi_mhz)))
        self._log.info("dry run: would call set_locked_sm_clock_mhz(%d, %d)", lo_mhz, hi_mhz)

    def reset_locked_sm_clock(self) -> None:
        self.calls.append(("reset_locked_sm_clock", ()))
        self._log.info("dry run: would call reset_locked_sm_clock()")


@dataclass
class ExecutorStats:
    """Counters: phases seen, switch requests queued, calls made, requests coalesced away, errors."""

    phases: int = 0
    requested: int = 0
    issued: int = 0
    coalesced: int = 0
    errors: int = 0
    last_error: str = ""


class PlanExecutor:
    """Runs a :class:`ClockPlan` against a :class:`ClockControl` from a worker thread.

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
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._last_requested: int | None = None
        self._current: int | None = None
        self._last_call_s = -float("inf")
        self._closed = False
        self.stats = ExecutorStats()

    # -- training-thread side (cheap) -----------------------------------------------------------
    def on_phase(self, phase: str) -> None:
        """Call at the start of a phase; queues a switch when a segment starts here."""
        self.stats.phases += 1
        target = self._targets.get(phase)
        if target is None or target == self._last_requested:
            return
        if self._closed:
            raise ExecutorError("the executor is closed")
        self._last_requested = target
        self.stats.requested += 1
        self._queue.put(target)

    def flush(self) -> None:
        """Block until every queued request has been handled (e.g. at the end of an iteration)."""
        self._queue.join()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "PlanExecutor":
        if self._thread is not None or self._closed:
            raise ExecutorError("start() may be called once, before close()")
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
        if self._current is not None:
            self._call(self.control.reset_locked_sm_clock)
            self._current = None

    def __enter__(self) -> "PlanExecutor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- worker side --------------------------------------------------------------------------
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

    def _drain(self, latest: Any) -> tuple[Any, bool]:
        stop = False
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return latest, stop
            self._queue.task_done()
            if item is _STOP:
                stop = True
            else:
                if latest is not None:
                    self.stats.coalesced += 1
                latest = item

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                target, stop = self._drain(item)
                remaining = self.min_interval_s - (self._clock() - self._last_call_s)
                if remaining > 0 and not stop:
                    self._wait(remaining)
                    target, stop = self._drain(target)
                if target != self._current:
                    if self._call(self.control.set_locked_sm_clock_mhz, target, target):
                        self._current = target
                    self._last_call_s = self._clock()
                if stop:
                    return
            finally:
                self._queue.task_done()


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
