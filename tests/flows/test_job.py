"""The job runner: the job ends when its main process exits, and kill() leaves none of its processes behind.

Child processes sleep (briefly, or until killed); the tests themselves only wait with bounded
timeouts for events (a line of output, a process gone), never for a fixed time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from flows.job.process import KILL_NOW, JobHandle, start_callable, start_command

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 10.0  # upper bound for anything to happen; a pass takes a fraction of it


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, waiting for a parent or init to reap it) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no procfs: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _gone(*pids: int) -> bool:
    """Wait (bounded) until none of ``pids`` runs: an orphan's end is reported asynchronously."""
    end_t = time.monotonic() + BOUND_S
    while any(_alive(p) for p in pids):
        if time.monotonic() > end_t:
            return False
        time.sleep(0.02)
    return True


class Lines:
    """Collects output lines; ``first()`` waits (bounded) for the first one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._seen = threading.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        self._seen.set()

    def first(self) -> str:
        assert self._seen.wait(BOUND_S), "the job printed nothing"
        return self.lines[0]


def _pids(line: str) -> list[int]:
    return [int(x) for x in line.split()]


def _sh(script: str, lines: Lines, **kw) -> JobHandle:
    return start_command(["sh", "-c", script], on_line=lines, **kw)


def test_output_is_streamed_and_logged_to_the_end():
    lines = Lines()
    handle = _sh("echo a; echo b >&2; exit 0", lines)
    assert handle.wait(timeout_s=BOUND_S) == 0
    assert lines.lines == ["a", "b"]
    assert handle.tail == ["a", "b"]


def test_the_job_ends_when_its_main_process_exits_even_if_a_grandchild_holds_the_pipe():
    lines = Lines()
    # the background sleep inherits stdout: the old runner reported the job running until it ended
    handle = _sh("sleep 30 & echo $!; exit 3", lines)
    assert handle.wait(timeout_s=BOUND_S) == 3
    (grandchild,) = _pids(lines.first())
    assert _gone(grandchild), "a leftover worker of a finished job must not keep running"
    assert handle.tail == [str(grandchild)]


def test_wait_with_a_timeout_reports_a_running_job_as_none():
    lines = Lines()
    handle = _sh("echo up; sleep 30", lines)
    lines.first()
    try:
        assert handle.wait(timeout_s=0.05) is None
    finally:
        handle.kill()
    assert handle.wait(timeout_s=BOUND_S) is not None


def test_kill_stops_the_whole_process_group():
    lines = Lines()
    handle = _sh("sleep 30 & echo $$ $!; wait", lines)
    shell, grandchild = _pids(lines.first())
    handle.kill()
    assert handle.wait(timeout_s=BOUND_S) == -signal.SIGTERM
    assert _gone(shell, grandchild)


def test_kill_escalates_to_sigkill_when_the_job_ignores_sigterm():
    lines = Lines()
    # an ignored signal stays ignored across fork and exec: neither the shell nor the sleep stops on TERM
    handle = _sh("trap '' TERM; sleep 30 & echo $$ $!; wait", lines, kill_grace_s=0.2)
    shell, grandchild = _pids(lines.first())
    handle.kill()
    assert handle.wait(timeout_s=BOUND_S) == -signal.SIGKILL
    assert _gone(shell, grandchild)


def test_kill_now_ends_the_grace_period_at_once():
    # a second Ctrl-C sets KILL_NOW: a job that ignores SIGTERM gets SIGKILL without its grace period
    # (an hour here: only KILL_NOW can end this kill() before the test's bound)
    lines = Lines()
    handle = _sh("trap '' TERM; sleep 30 & echo $$ $!; wait", lines, kill_grace_s=3600)
    shell, grandchild = _pids(lines.first())
    KILL_NOW.set()
    try:
        handle.kill()
    finally:
        KILL_NOW.clear()
    assert handle.wait(timeout_s=BOUND_S) == -signal.SIGKILL
    assert _gone(shell, grandchild)


def test_kill_escalates_for_a_worker_that_outlives_its_main_process():
    lines = Lines()
    # the main process stops on TERM at once; its worker ignores TERM and must get SIGKILL
    handle = _sh("(trap '' TERM; sleep 30) & echo $!; wait", lines, kill_grace_s=0.2)
    (worker,) = _pids(lines.first())
    handle.kill()
    assert _gone(worker)


def test_ctrl_c_in_a_terminal_stops_the_job_through_the_callers_kill(tmp_path: Path):
    # the job runs in its own session, so the terminal's SIGINT reaches only the caller; the caller's
    # KeyboardInterrupt unwinds into kill() (as in supervise's finally) and that stops the job's group
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent("""
        import signal
        import threading
        from flows.job.process import start_command

        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, whatever pytest inherited
        seen = []
        started = threading.Event()
        handle = start_command(["sh", "-c", "sleep 30 & echo $$ $!; wait"],
                               on_line=lambda line: (seen.append(line), started.set()))
        try:
            started.wait(10)
            print(seen[0], flush=True)  # the test interrupts once it reads this: inside the try
            handle.wait()
        finally:
            handle.kill()
    """))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # a session of its own stands for the terminal's foreground process group
    caller = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, start_new_session=True)
    try:
        assert caller.stdout is not None
        shell, grandchild = _pids(caller.stdout.readline())
        os.killpg(caller.pid, signal.SIGINT)  # what Ctrl-C does: SIGINT to the foreground group
        _, err = caller.communicate(timeout=BOUND_S)
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()
    assert "KeyboardInterrupt" in err, (caller.returncode, err)
    assert _gone(shell, grandchild)


def test_supervise_kills_the_job_group_when_interrupted():
    from backends.simulated import SimulatedBackend
    from carbon.monitor import CarbonMonitor, SourceSpec
    from carbon.providers.static import StaticProvider
    from flows.supervise import supervise
    from scheduler.planner.thresholds import decide
    from scheduler.policy.types import Policy

    policy = Policy.model_validate({
        "carbon": {"provider": "static"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.6}},
        "rules": {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300,
                  "interval_s": 600},
        "job": {"name": "interrupted", "expected_duration_s": 3600},
        "backend": {"name": "simulated"},
    })
    t0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
    backend = SimulatedBackend()
    monitor = CarbonMonitor(sources=[SourceSpec("static", lambda: StaticProvider(g_per_kwh=100.0))],
                            forecast_horizon=timedelta(hours=6), history_window=timedelta(hours=1))
    reading = monitor.read(t0)
    lines = Lines()
    started: list[JobHandle] = []

    class CtrlCWhileWaiting:
        """The real job, with a Ctrl-C arriving while the control loop waits on it."""

        def __init__(self, handle: JobHandle) -> None:
            self.handle = handle

        def wait(self, timeout_s: float | None = None) -> int | None:
            lines.first()
            raise KeyboardInterrupt

        @property
        def tail(self) -> list[str]:
            return self.handle.tail

        def kill(self) -> None:
            self.handle.kill()

    def start_job(env: dict[str, str]) -> CtrlCWhileWaiting:
        started.append(_sh("sleep 30 & echo $$ $!; wait", lines))
        return CtrlCWhileWaiting(started[0])

    with pytest.raises(KeyboardInterrupt):
        supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                  first=decide(policy, reading.series, now=t0, start_at=t0), first_reading=reading,
                  start_job=start_job, now=lambda: t0, log=lambda _: None)
    shell, grandchild = _pids(lines.first())
    assert _gone(shell, grandchild)
    assert started[0].wait(timeout_s=BOUND_S) == -signal.SIGTERM


# in-process jobs, started by target name: what each saw, and a gate to hold one running
SEEN_ENV: list[dict[str, str | None]] = []
GATE = threading.Event()
ENV_KEYS = ("GRIDSHIFT_CLOCK_PLAN", "GRIDSHIFT_PROGRESS_FILE")


def _job_records_env() -> int:
    SEEN_ENV.append({k: os.environ.get(k) for k in ENV_KEYS})
    return 0


def _job_fails() -> None:
    SEEN_ENV.append({k: os.environ.get(k) for k in ENV_KEYS})
    raise RuntimeError("out of memory")


def _job_waits_for_the_gate() -> int:
    SEEN_ENV.append({k: os.environ.get(k) for k in ENV_KEYS})
    GATE.wait(BOUND_S)
    return 0


@pytest.fixture
def job_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """One variable set before the job (must come back), one unset (must be gone again)."""
    SEEN_ENV.clear()
    GATE.clear()
    monkeypatch.setenv("GRIDSHIFT_CLOCK_PLAN", "before")
    monkeypatch.delenv("GRIDSHIFT_PROGRESS_FILE", raising=False)
    return {"GRIDSHIFT_CLOCK_PLAN": "plan.json", "GRIDSHIFT_PROGRESS_FILE": "/tmp/progress"}


def _env_now() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in ENV_KEYS}


def test_callable_job_sees_its_env_and_the_process_gets_its_own_back(job_env):
    handle = start_callable(f"{__name__}:_job_records_env", env=job_env, on_line=lambda _: None)
    assert handle.wait(timeout_s=BOUND_S) == 0
    assert SEEN_ENV == [job_env]
    assert _env_now() == {"GRIDSHIFT_CLOCK_PLAN": "before", "GRIDSHIFT_PROGRESS_FILE": None}


def test_a_failing_callable_job_restores_the_env_too(job_env):
    lines = Lines()
    handle = start_callable(f"{__name__}:_job_fails", env=job_env, on_line=lines)
    assert handle.wait(timeout_s=BOUND_S) == 1
    assert lines.lines == ["RuntimeError: out of memory"]
    assert _env_now() == {"GRIDSHIFT_CLOCK_PLAN": "before", "GRIDSHIFT_PROGRESS_FILE": None}


def test_killing_a_callable_job_restores_the_env_and_its_late_end_does_not_undo_a_later_run(job_env):
    first = start_callable(f"{__name__}:_job_waits_for_the_gate", env=job_env, on_line=lambda _: None)
    assert first.wait(timeout_s=0.05) is None  # still running (held by the gate)
    first.kill()  # a thread cannot be stopped, but the process's env is the caller's again
    assert _env_now() == {"GRIDSHIFT_CLOCK_PLAN": "before", "GRIDSHIFT_PROGRESS_FILE": None}
    second = start_callable(f"{__name__}:_job_records_env", env={"GRIDSHIFT_CLOCK_PLAN": "second.json"},
                            on_line=lambda _: None)
    assert second.wait(timeout_s=BOUND_S) == 0
    os.environ["GRIDSHIFT_CLOCK_PLAN"] = "set after the runs"
    GATE.set()  # the first job ends now; its restore already ran and must not run again
    assert first.wait(timeout_s=BOUND_S) == 0
    assert SEEN_ENV[1] == {"GRIDSHIFT_CLOCK_PLAN": "second.json", "GRIDSHIFT_PROGRESS_FILE": None}
    assert _env_now() == {"GRIDSHIFT_CLOCK_PLAN": "set after the runs", "GRIDSHIFT_PROGRESS_FILE": None}
