"""The whole job protocol for one training process, under any framework: the integrations' shared core.

A framework callback (:mod:`plans.integrations.hf`, :mod:`plans.integrations.lightning`) or the
plain-loop wrapper (:mod:`plans.integrations.torch_loop`) turns its framework's events into calls on
one :class:`TrainingSession`, which:

- follows every mode change: reads the mode file at step starts (at most every ``poll_interval_s``)
  and swaps the clock plan at once; keeps the newest announcement for the framework to act on its
  batch size at its next safe boundary (:meth:`TrainingSession.batch_size_change`), and records
  what it did (:meth:`TrainingSession.acknowledge`: applied, or kept with the reason);
- marks the plan's phases: the framework's events through :meth:`TrainingSession.phase`, the rest
  through hooks (:mod:`plans.integrations.phase_hooks`), re-hooked when a new plan names others;
- writes progress (``GRIDSHIFT_PROGRESS_FILE``, the fraction of the framework's step count done)
  and the window's steps (the result file's ``windows``) every ``poll_interval_s``, from a thread
  of its own (:mod:`plans.integrations.background_writes`: a step never waits for a disk), and the
  outcome at the end;
- in a pausable run (``GRIDSHIFT_CHECKPOINT_DIR`` set) turns SIGTERM into a stop at the next step
  boundary, agreed by all ranks, where the integration writes its checkpoint and the process exits 0;
  with ``GRIDSHIFT_RESUME=1`` it names the newest checkpoint to resume from (:func:`newest_checkpoint`);
- writes from rank 0 only; every rank runs the clock plan on its own GPU;
- never ends training: any failure of its own is one warning line, and the clock plan is dropped.

Per step the training thread does a few attribute reads and a clock read (the polls), and per phase
a dictionary lookup (the plan's clock) and, in a real run, a queue put where a segment starts:
:attr:`TrainingSession.busy_s` counts the time (``benchmarks/integration_overhead.py``).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from backends.nvidia import READ_ONLY_ENV
from plans.dvfs.executor import ClockControl
from plans.integrations.background_writes import BackgroundWriter
from plans.integrations.clock_runner import ClockPlanRunner
from plans.integrations.phase_hooks import HookError, PhaseHooks
from plans.integrations.protocol import (
    CHECKPOINT_DIR_ENV,
    PROGRESS_FILE_ENV,
    RESUME_ENV,
    GridshiftJob,
    ModeAnnouncement,
)
from plans.integrations.ranks import any_rank, from_rank0, process_rank

__all__ = ["TrainingSession", "newest_checkpoint", "resume_checkpoint", "write_text_atomically"]

_log = logging.getLogger("gridshift.integrations")
_STEP_IN_NAME = re.compile(r"(\d+)(?!.*\d)")


def write_text_atomically(path: Path, text: str) -> None:
    """``path`` replaced by ``text`` in one rename: a reader sees the old line or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def newest_checkpoint(directory: Path | str | None, pattern: str, *, complete: Callable[[Path], bool] = Path.exists
                      ) -> Path | None:
    """The checkpoint in ``directory`` matching ``pattern`` with the highest step number in its
    name, among those ``complete`` accepts (None: no directory, or nothing there)."""
    if directory is None or not Path(directory).is_dir():
        return None
    found = []
    for path in Path(directory).glob(pattern):
        m = _STEP_IN_NAME.search(path.name)
        if m is not None and complete(path):
            found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def resume_checkpoint(pattern: str, *, environ: Mapping[str, str] | None = None,
                      complete: Callable[[Path], bool] = Path.exists) -> Path | None:
    """The checkpoint to resume from: the newest in ``GRIDSHIFT_CHECKPOINT_DIR`` matching ``pattern``
    when gridshift restarted the job after a pause (``GRIDSHIFT_RESUME=1``), else None (start afresh).
    A resume with no checkpoint there gets one warning and starts afresh."""
    env = os.environ if environ is None else environ
    if env.get(RESUME_ENV) != "1":
        return None
    directory = env.get(CHECKPOINT_DIR_ENV) or None
    found = newest_checkpoint(directory, pattern, complete=complete)
    if found is None:
        _log.warning("gridshift: %s=1 but no checkpoint in %s: starting from step 0", RESUME_ENV, directory)
    return found


class TrainingSession:
    """One training process's side of the protocol (see the module docstring).

    ``environ``: gridshift's variables (default ``os.environ``). ``rank``/``world_size``: the
    process's place (default: :func:`plans.integrations.ranks.process_rank`). ``job``: the process's
    one writer of the job's files, when an earlier session made it (a second ``train()`` or ``fit()``
    in one script). ``dry_run``: log clock calls instead of making them (default:
    ``GRIDSHIFT_NVML_READ_ONLY=1``); ``control``: where clock calls go (tests). ``clock``: monotonic
    seconds, for the polls.
    """

    def __init__(self, *, environ: Mapping[str, str] | None = None, rank: int | None = None,
                 world_size: int | None = None, job: GridshiftJob | None = None, dry_run: bool | None = None,
                 control: ClockControl | None = None,
                 poll_interval_s: float = 1.0, warn_after_steps: int = 20, handle_sigterm: bool = True,
                 clock: Callable[[], float] = time.monotonic, log: logging.Logger = _log) -> None:
        env = os.environ if environ is None else environ
        found_rank, found_world = process_rank(env)
        self.rank = found_rank if rank is None else rank
        self.world_size = found_world if world_size is None else world_size
        self.job = job if job is not None else GridshiftJob.from_env(env, rank=self.rank)
        progress = env.get(PROGRESS_FILE_ENV) or None
        self.progress_file = Path(progress) if progress and self.rank == 0 else None
        ckpt = env.get(CHECKPOINT_DIR_ENV) or None
        self.checkpoint_dir = Path(ckpt) if ckpt else None
        self.resuming = env.get(RESUME_ENV) == "1"
        self.poll_interval_s = poll_interval_s
        self.handle_sigterm = handle_sigterm
        self.runner = ClockPlanRunner(self.job, control=control, warn_after_steps=warn_after_steps, log=log,
                                      dry_run=env.get(READ_ONLY_ENV) == "1" if dry_run is None else dry_run)
        self.hooks: PhaseHooks | None = None
        self.step = 0
        self.total_steps: int | None = None
        self.paused = False
        self._clock = clock
        self._log = log
        self._pending: ModeAnnouncement | None = None
        self._stop = False
        self._previous_handler: Any = None
        self._handler_installed = False
        self._last_poll = self._last_write = -float("inf")
        self._warned: set[str] = set()
        self._closed = False
        self._writer = BackgroundWriter(self._write_files, self._failed_write)
        self._busy_ns = 0

    # -- start and end ----------------------------------------------------------------------------
    def start(self, step: int, *, total_steps: int | None = None, model: Any = None, optimizer: Any = None,
              events: Iterable[str] = (), checkpoint: Path | str | None = None) -> None:
        """Training starts (or resumes) at ``step`` of ``total_steps``: the mode in force, its clock
        plan, the hooks for the phases the framework has no ``events`` for, and the window's start."""
        self.step, self.total_steps = step, total_steps
        self.hooks = PhaseHooks(self.phase, model=model, optimizer=optimizer, events=events)
        ann = self.guard("read the mode file", self.job.poll_mode, drop=False)
        self._pending = ann
        current = ann or self.job.announcement  # a second train() in a process goes on in the mode in force
        self.guard("start the clock plan", lambda: self.runner.start(current, step=step))
        self._rehook()
        self.guard("write the result file", lambda: self.job.window_started(
            step, checkpoint=str(checkpoint) if checkpoint is not None else None), drop=False)
        if self.checkpoint_dir is not None and self.handle_sigterm:
            self._install_sigterm()
        self._write_progress(step)
        self._last_poll = self._clock()

    def finish(self, step: int, *, reached: bool | None = None, epochs: float | None = None,
               metric: float | None = None, metric_name: str | None = None) -> None:
        """Training ended by itself at ``step``: the last progress, the window's end and the outcome."""
        self.step = step
        self._write_progress(step)  # after the periodic writes handed over, never overtaken by them

        def write() -> None:
            self.job.window_at(step, ended="finished")
            self.job.finish(reached=reached, epochs=epochs, steps=step, metric=metric, metric_name=metric_name)

        self.guard("write the result file", write, drop=False)

    def pause(self, step: int, checkpoint: Path | str | None) -> None:
        """Training stopped for a planned pause at ``step``, its state in ``checkpoint``."""
        self.step, self.paused = step, True
        self._write_progress(step)
        self.guard("write the result file", lambda: self.job.window_at(
            step, ended="paused", checkpoint=str(checkpoint) if checkpoint is not None else None), drop=False)

    def close(self) -> None:
        """Hooks removed, the clock plan stopped (its lock undone) and reported, SIGTERM handed back."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        if self.hooks is not None:
            self.guard("remove the hooks", self.hooks.remove, drop=False)
        self.guard("stop the clock plan", self.runner.close, drop=False)
        if self._handler_installed:
            try:
                signal.signal(signal.SIGTERM, self._previous_handler)
            except (ValueError, TypeError):  # not the main thread any more: leave it
                pass
            self._handler_installed = False

    # -- during training ----------------------------------------------------------------------------
    @property
    def busy_s(self) -> float:
        """Seconds spent so far in the session's per-step calls and its hooks, on the threads that
        called them (what gridshift adds to the steps; the framework's dispatch to it not counted)."""
        hooks = self.hooks.busy_ns if self.hooks is not None else 0
        return (self._busy_ns + hooks) / 1e9

    def step_begin(self, step: int) -> None:
        """A step starts: a safe point to look at the mode file (at most every ``poll_interval_s``)."""
        t0 = time.perf_counter_ns()
        self.step = step
        self.runner.on_step(step)
        if self._clock() - self._last_poll >= self.poll_interval_s:
            self.poll()
        self._busy_ns += time.perf_counter_ns() - t0

    def phase(self, name: str) -> None:
        """A phase of the step starts (``forward``, ``backward``, ``optimizer`` or a module's)."""
        t0 = time.perf_counter_ns()
        try:
            self.runner.on_phase(name)
        except Exception as exc:
            self._fail("run the clock plan", exc, drop=True)
        self._busy_ns += time.perf_counter_ns() - t0

    def optimizer_step(self) -> None:
        """The optimizer step starts (under whichever label the plan gives it)."""
        label = self.runner.optimizer_phase
        if label is not None:
            self.phase(label)

    def step_end(self, step: int) -> bool:
        """A step ended (``step`` done): progress now and then; True when training must stop now for a
        pause (every rank gets the same answer: call it on every rank at the same steps)."""
        t0 = time.perf_counter_ns()
        self.step = step
        if self._clock() - self._last_write >= self.poll_interval_s:
            self._last_write = self._clock()
            self.guard("write the result file", lambda: self._hand_over(step), drop=False)
        stop = self.stop_requested()
        self._busy_ns += time.perf_counter_ns() - t0
        return stop

    def flush(self) -> None:
        """Wait until the periodic writes handed over so far are on disk (tests; before reading the files)."""
        self._writer.flush()

    def stop_requested(self) -> bool:
        """Whether a SIGTERM asked for a pause, on any rank (a collective when ranks are joined)."""
        if self.checkpoint_dir is None:
            return False
        return any_rank(self._stop) if self.world_size > 1 else self._stop

    def poll(self) -> ModeAnnouncement | None:
        """Look at the mode file now: a newer announcement swaps the clock plan at once and waits for
        the framework's next batch-size boundary. Returns it (None: no change)."""
        self._last_poll = self._clock()
        ann = self.guard("read the mode file", self.job.poll_mode, drop=False)
        if ann is None:
            return None
        self._pending = ann
        if self.guard("swap the clock plan", lambda: self.runner.follow(ann)):
            self._rehook()
        return ann

    def take_announcement(self) -> ModeAnnouncement | None:
        """The newest announcement whose batch size the job has not acted on yet (None: none), once."""
        ann, self._pending = self._pending, None
        return ann

    def batch_size_change(self, *, agree: bool = True) -> ModeAnnouncement | None:
        """At a boundary where the batch size may change: the mode file read now, and the newest
        announcement not yet acted on (None: nothing new). ``agree``: every rank gets rank 0's answer
        (a collective: call it on every rank at the same boundary)."""
        self.poll()
        ann = self.take_announcement()
        if agree and self.world_size > 1:
            ann = self.guard("agree on the mode with rank 0", lambda: from_rank0(ann), drop=False)
        return ann

    def acknowledge(self, ann: ModeAnnouncement, batch_size: int, *, reason: str = "", epoch: float | None = None,
                    step: int | None = None) -> None:
        """The job runs ``batch_size`` since ``ann``: the announced size, or its own ``reason`` to keep another."""
        self.guard("write the result file", lambda: self.job.acknowledge(
            ann, batch_size, reason=reason, epoch=epoch, step=self.step if step is None else step), drop=False)

    # -- internals ----------------------------------------------------------------------------
    def _rehook(self) -> None:
        if self.hooks is None:
            return
        try:
            unhooked = self.hooks.install(self.runner.phases)
        except HookError as exc:
            self.hooks.remove()
            self._fail("hook the clock plan's phases", exc, drop=True)
            return
        if unhooked:
            self.runner.quiet(unhooked)
            self._warn("unhooked", "clock plan phase(s) with no hook: " + ", ".join(unhooked)
                       + " (no such module in the model; call session.phase(label) where they start)")

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self._warn("sigterm", "not in the main thread: SIGTERM cannot be turned into a checkpoint here")
            return
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._handler_installed = True

    def _on_sigterm(self, _signum: int, _frame: Any) -> None:
        # only a flag: the step in flight finishes, so the checkpoint holds a whole step
        self._stop = True

    def _fraction(self, step: int) -> float | None:
        if self.progress_file is None or not self.total_steps:
            return None
        return min(max(step / self.total_steps, 0.0), 1.0)

    def _hand_over(self, step: int) -> None:
        """The counts and the window's step to the job now (cheap), the files to the writer thread."""
        self.runner.snapshot(write=False)
        self.job.window_at(step, write=False)
        if self.progress_file is not None or self.job.result_file is not None:
            self._writer.submit(self._fraction(step))

    def _write_files(self, fraction: float | None) -> None:  # on the writer thread
        if fraction is not None and self.progress_file is not None:
            write_text_atomically(self.progress_file, f"{fraction:.6f}\n")
        self.job.write()

    def _failed_write(self, exc: Exception) -> None:
        self._fail("write progress and the result file", exc, drop=False)

    def _write_progress(self, step: int) -> None:
        """Progress written now, on this thread, after any periodic write still on its way."""
        self._last_write = self._clock()
        self._writer.flush()
        fraction = self._fraction(step)
        if fraction is None:
            return
        self.guard("write progress", lambda: write_text_atomically(self.progress_file, f"{fraction:.6f}\n"),
                    drop=False)

    def guard(self, what: str, fn: Callable[[], Any], *, drop: bool = True) -> Any:
        """``fn()``, or None after one warning line when it fails (``drop``: the clock plan is dropped
        too): nothing gridshift does may end the training."""
        try:
            return fn()
        except Exception as exc:
            self._fail(what, exc, drop=drop)
            return None

    def _fail(self, what: str, exc: Exception, *, drop: bool) -> None:
        why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, HookError) else str(exc)
        if drop:
            try:
                if self.hooks is not None:
                    self.hooks.remove()
                self.runner.drop(why)
            except Exception:  # dropping must not fail training either
                pass
        self._warn(what, f"could not {what} ({why})" + ("; the clock plan is dropped" if drop else "")
                   + ", training goes on")

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._log.warning("gridshift: %s", message)
