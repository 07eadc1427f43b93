"""Run the training job: a subprocess (output streamed line by line) or an in-process callable.

Separate start from wait (after prefect-shell): ``JobHandle`` lets the caller poll while the job
runs, so the mode can be re-decided mid-run. The child is killed if the caller leaves early, and a
failure carries the tail of the output as evidence.

A command runs in a session (and process group) of its own, so the whole job (torchrun and its
ranks, dataloader workers, a shell's background children) can be signalled at once: ``kill()`` sends
SIGTERM to the group and SIGKILL after a grace period, and when the main process exits whatever is
left of its group gets SIGTERM too, so no worker keeps using the GPU after the flow has restored the
settings. The end of the job is the exit of the main process, not the end of its output (a leftover
grandchild may hold the pipe open). Being in its own session, the job does not get the terminal's
Ctrl-C: the caller's ``KeyboardInterrupt`` unwinds into ``kill()`` (``supervise``'s ``finally``).
POSIX only (process groups).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["JobFailed", "JobHandle", "KILL_NOW", "OUTPUT_THREAD_NAME", "start_command", "start_callable", "resolve_argv"]


class JobFailed(Exception):
    """The training job exited non-zero (or raised)."""

    def __init__(self, returncode: int, tail: Sequence[str]) -> None:
        self.returncode = returncode
        self.tail = list(tail)
        last = self.tail[-1] if self.tail else ""
        super().__init__(f"training job failed with exit code {returncode}" + (f": {last}" if last else ""))


def resolve_argv(argv: Sequence[str]) -> list[str]:
    """Use this interpreter for ``python``/``python3`` so the job sees the same environment."""
    out = list(argv)
    if out and out[0] in ("python", "python3"):
        out[0] = sys.executable
    return out


#: the thread that hands a command's output lines to ``on_line``: log records made there are the
#: job's own output (``gridshift run`` shows them plainly, not as its own log lines)
OUTPUT_THREAD_NAME = "gridshift-job-output"
# how long wait()/kill() wait for the output pump to log what is still buffered after the exit
OUTPUT_DRAIN_S = 2.0
# how long kill() gives the job's process group to stop on SIGTERM before SIGKILL
KILL_GRACE_S = 10.0
#: set by a second stop signal (``gridshift run``'s second Ctrl-C): kill() ends the job's grace period
#: at once. An event rather than an exception, so the caller's cleanup still closes the span it metered.
KILL_NOW = threading.Event()


@dataclass
class JobHandle:
    """A running job. ``wait(timeout_s)`` returns the exit code, or None if still running."""

    _proc: subprocess.Popen[str] | None
    _thread: threading.Thread
    _tail: deque[str]
    _result: list[int]
    _kill_grace_s: float = KILL_GRACE_S
    _on_end: Callable[[], None] | None = None
    _ended: bool = False

    def wait(self, timeout_s: float | None = None) -> int | None:
        if self._proc is None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                return None
            self._end()
            return self._result[0] if self._result else 1
        try:
            rc = self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._end()
        return rc

    @property
    def tail(self) -> list[str]:
        return list(self._tail)

    def kill(self) -> None:
        """Stop the job: SIGTERM to its process group, SIGKILL to what is left after the grace period.

        A callable job cannot be stopped from outside its thread; its environment is restored now.
        """
        if self._proc is None:
            self._end()
            return
        if self._proc.poll() is None or self._group_alive():
            self._signal_group(signal.SIGTERM)
            end_t = time.monotonic() + self._kill_grace_s
            try:
                # the main process and its workers get the grace period, unless the user insists (KILL_NOW)
                while ((self._proc.poll() is None or self._group_alive()) and time.monotonic() < end_t
                       and not KILL_NOW.wait(0.02)):
                    pass
            finally:
                # also on a second Ctrl-C during the grace period: nothing of the job may outlive kill()
                if self._proc.poll() is None or self._group_alive():
                    self._signal_group(signal.SIGKILL)
                self._proc.wait()
        self._end()

    def _end(self) -> None:
        """Once, after the main process (or the callable) ended: clean up and let the output drain."""
        if self._ended:
            return
        self._ended = True
        if self._proc is not None:
            # a training job's leftover workers (dataloader processes, a shell's background children)
            # must not keep the GPU busy after the job, nor hold the output pipe open
            self._signal_group(signal.SIGTERM)
            self._thread.join(OUTPUT_DRAIN_S)  # log the output still buffered, without waiting on leftovers
        if self._on_end is not None:
            self._on_end()

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        try:
            # the child leads its own group (start_new_session), so its pid is the group id; the id
            # stays ours while any member lives, even after the leader is reaped
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):  # nobody left (macOS answers EPERM for zombies)
            pass

    def _group_alive(self) -> bool:
        assert self._proc is not None
        return _group_running(self._proc.pid)


def _group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. Zombies do not count: an orphaned worker that
    has exited stays in the group until init reaps it, which some container inits never do."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: the kernel's answer, zombies included
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        except (OSError, IndexError):  # exited meanwhile
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def start_command(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None],
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    tail_lines: int = 20,
    kill_grace_s: float = KILL_GRACE_S,
) -> JobHandle:
    """Start ``argv``; every output line (stdout and stderr merged) goes to ``on_line``.

    The command runs in a new session, so :meth:`JobHandle.kill` reaches all of its processes;
    ``kill_grace_s`` is how long they get between SIGTERM and SIGKILL.
    """
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            resolve_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
            cwd=cwd, bufsize=1, errors="replace", start_new_session=True,
        )
    except FileNotFoundError:
        raise JobFailed(127, [f"command not found: {argv[0]}"]) from None
    except PermissionError:
        raise JobFailed(126, [f"permission denied: {argv[0]}"]) from None
    tail: deque[str] = deque(maxlen=tail_lines)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            on_line(line)
        proc.stdout.close()

    thread = threading.Thread(target=pump, name=OUTPUT_THREAD_NAME, daemon=True)
    thread.start()
    return JobHandle(proc, thread, tail, [], kill_grace_s)


def start_callable(target: str, *, env: dict[str, str] | None = None, on_line: Callable[[str], None]) -> JobHandle:
    """Run ``module:function`` in a thread of this process. Its return value (int or None) is the exit code.

    ``env`` is set in ``os.environ`` for the job's run and restored when it ends (or is killed, or
    waited for), so a later run in this process does not inherit a stale clock plan, progress file
    or delegation.
    """
    module_name, _, func_name = target.partition(":")
    func = getattr(importlib.import_module(module_name), func_name)
    tail: deque[str] = deque(maxlen=20)
    result: list[int] = []
    restore = _set_environ(env or {})

    def body() -> None:
        try:
            rc = func()
            result.append(int(rc) if isinstance(rc, int) else 0)
        except SystemExit as exc:
            result.append(int(exc.code) if isinstance(exc.code, int) else 1)
        except Exception as exc:  # the job's own failure, reported not raised
            line = f"{type(exc).__name__}: {exc}"
            tail.append(line)
            on_line(line)
            result.append(1)
        finally:
            restore()

    thread = threading.Thread(target=body, name="gridshift-job", daemon=True)
    thread.start()
    return JobHandle(None, thread, tail, result, _on_end=restore)


def _set_environ(env: dict[str, str]) -> Callable[[], None]:
    """Set ``env`` in ``os.environ``; the returned function (idempotent) puts the previous values back."""
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    lock = threading.Lock()
    done: list[bool] = []

    def restore() -> None:
        with lock:  # the job thread and the caller (kill/wait) may both get here
            if done:
                return
            done.append(True)
            for k, v in previous.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    return restore
