"""A site run whose worker died stops itself: no orphan flow or job process keeps a GPU.

A Prefect process worker starts each flow run's process in a session of its own, so a worker killed
with its whole process group (``kill -9 -PGID``, an OOM kill of the worker's group, a container stop
that reaches only the worker) leaves the flow process and its job running. That run still beats its
heartbeat, so Prefect never marks it Crashed, it holds its GPU slot, and nothing on the node will
ever report its end. Its report would also be written by a process nobody watches.

:func:`stop_when_orphaned` watches the flow process's parent: when it changes (the worker is gone and
the process was re-parented), it sends the process SIGTERM, as Prefect's own cancellation does. The
run then unwinds as for any stop: the job's process group is stopped, the GPU settings restored, the
report written (status and reason in the ledger and the run artifact), the slots given back, and
Prefect marks the run Crashed. Within :data:`POLL_S` plus the job's stop grace.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["POLL_S", "stop_when_orphaned"]

#: how often the flow process looks at its parent
POLL_S = 2.0


@contextmanager
def stop_when_orphaned(announce: Callable[[str], None], *, poll_s: float = POLL_S,
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
                announce(f"the worker process that started this run (pid {watched}) is gone; stopping the run "
                         "so that no orphan keeps the GPU")
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, name="gridshift-orphan-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
