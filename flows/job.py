"""Run the training job: a subprocess (output streamed line by line) or an in-process callable.

Separate start from wait (after prefect-shell): ``JobHandle`` lets the caller poll while the job
runs, so the mode can be re-decided mid-run. The child is killed if the caller leaves early, and a
failure carries the tail of the output as evidence.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["JobFailed", "JobHandle", "start_command", "start_callable", "resolve_argv"]


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


@dataclass
class JobHandle:
    """A running job. ``wait(timeout_s)`` returns the exit code, or None if still running."""

    _proc: subprocess.Popen[str] | None
    _thread: threading.Thread
    _tail: deque[str]
    _result: list[int]

    def wait(self, timeout_s: float | None = None) -> int | None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            return None
        if self._proc is not None:
            return self._proc.wait()
        return self._result[0] if self._result else 1

    @property
    def tail(self) -> list[str]:
        return list(self._tail)

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def start_command(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None],
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    tail_lines: int = 20,
) -> JobHandle:
    """Start ``argv``; every output line (stdout and stderr merged) goes to ``on_line``."""
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            resolve_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
            cwd=cwd, bufsize=1, errors="replace",
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

    thread = threading.Thread(target=pump, name="gridshift-job-output", daemon=True)
    thread.start()
    return JobHandle(proc, thread, tail, [])


def start_callable(target: str, *, env: dict[str, str] | None = None, on_line: Callable[[str], None]) -> JobHandle:
    """Run ``module:function`` in a thread of this process. Its return value (int or None) is the exit code."""
    module_name, _, func_name = target.partition(":")
    func = getattr(importlib.import_module(module_name), func_name)
    tail: deque[str] = deque(maxlen=20)
    result: list[int] = []
    for k, v in (env or {}).items():
        os.environ[k] = v

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

    thread = threading.Thread(target=body, name="gridshift-job", daemon=True)
    thread.start()
    return JobHandle(None, thread, tail, result)
