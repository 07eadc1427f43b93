"""A site run whose worker died stops itself: no orphan flow or job process keeps a GPU.

A Prefect process worker starts each flow run's process in a session of its own, so a worker killed
with its whole process group (``kill -9 -PGID``, an OOM kill of the worker's group, a container stop
that reaches only the worker) leaves the flow process and its job running. That run still beats its
heartbeat, so Prefect never marks it Crashed, it holds its GPU slot, and nothing on the node will
ever report its end. Its report would also be written by a process nobody watches.

:func:`stop_when_orphaned` watches the flow process's parent: when it changes (the worker is gone and
the process was re-parented), it stops the job (SIGTERM to its process group, SIGKILL after
:data:`GRACE_S`) and sends the flow process SIGTERM, as Prefect's own cancellation does. The run then
ends as a run whose job was stopped: the GPU settings restored, the report written (ledger and run
artifact, with the job's exit), the slots given back, and Prefect's state final. Within
:data:`POLL_S` plus the job's stop grace.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["GRACE_S", "POLL_S", "stop_when_orphaned"]

#: how often the flow process looks at its parent
POLL_S = 2.0
#: how long the job has to stop after SIGTERM before SIGKILL
GRACE_S = 10.0


def _children() -> list[int]:
    """This process's children (from /proc), e.g. the job it started in a session of its own."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _detach_output() -> None:
    """Point stdout and stderr at /dev/null: their reader was the worker, and a write to a pipe nobody
    reads any more made Prefect's console logging hang the run (its logs still go to the API)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _stop_children(grace_s: float) -> None:
    """SIGTERM each child's process group, then SIGKILL what is left after ``grace_s``."""
    import time

    groups = set()
    for pid in _children():
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    groups.discard(os.getpgid(0))  # never this process's own group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and _children() and time.monotonic() < deadline:
            time.sleep(0.2)  # the job's own grace to stop


@contextmanager
def stop_when_orphaned(announce: Callable[[str], None], *, poll_s: float = POLL_S, grace_s: float = GRACE_S,
                       parent: int | None = None) -> Iterator[None]:
    """While the block runs, SIGTERM this process once its parent (``parent``, default: the current one) is gone.

    A process whose parent is already init (pid 1: started by hand from a shell that exited, or by a
    container's init) has no worker to lose, and is not watched.
    """
    watched = os.getppid() if parent is None else parent
    if watched <= 1:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            if os.getppid() != watched:
                _detach_output()  # before anything logs: the dead worker read this process's output
                _stop_children(grace_s)  # the job first: the run then ends as a job that was stopped
                os.kill(os.getpid(), signal.SIGTERM)
                try:  # saying so must not keep the run from stopping (this thread has no run context)
                    announce(f"the worker process that started this run (pid {watched}) is gone; its job was "
                             "stopped so that no orphan keeps the GPU")
                except Exception:
                    pass
                return

    thread = threading.Thread(target=watch, name="gridshift-orphan-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
