"""The files a training job and gridshift share while the job runs, and the job's side of them.

gridshift gives the job these environment variables (all optional for the job to use):

- ``GRIDSHIFT_BATCH_SIZE``: the batch size to start with (the mode's, or the optimiser's proposal
  when the mode says ``batch_size: auto``);
- ``GRIDSHIFT_CLOCK_PLAN``: the clock plan file of the mode the job starts in (absent: none);
- ``GRIDSHIFT_MODE_FILE``: a JSON file that gridshift replaces atomically whenever the mode changes
  (``{"version": 1, "seq": 0, "mode": "speed", "batch_size": 256, "clock_plan": null, "since":
  ISO-8601, "reason": ...}``; ``seq`` counts the changes from 0, ``batch_size`` and ``clock_plan``
  are null when the mode sets none);
- ``GRIDSHIFT_RESULT_FILE``: where the job writes its outcome, one JSON object (see :class:`JobResult`),
  replaced atomically each time it is written. gridshift reads it after the job ends: ``reached``
  feeds the batch-size optimiser; ``batch_sizes`` and ``clock_plans`` (what the job says it did
  after each mode announcement) are the only confirmation a report gives of the job's settings;
  ``windows`` says at which step each of a pausable job's windows started and ended;
- ``GRIDSHIFT_PROGRESS_FILE``: where the job writes its fraction done (0-1), which re-planning reads;
- ``GRIDSHIFT_CHECKPOINT_DIR`` (pausable jobs only): where the job writes its checkpoint on SIGTERM;
  ``GRIDSHIFT_RESUME=1``: the job is started again after a planned pause and resumes from there;
  ``GRIDSHIFT_WINDOW``: which window of the run this process is (0, 1, ... within one flow run).

The framework integrations (:mod:`plans.integrations.hf`, :mod:`plans.integrations.lightning`,
:mod:`plans.integrations.torch_loop`) do all of this in one object each. A loop of its own uses
:class:`GridshiftJob`::

    job = GridshiftJob.from_env()
    batch_size = job.start_batch_size(default=256)
    for epoch in range(max_epochs):
        change = job.poll_mode()                   # at an epoch boundary
        if change is not None and change.batch_size is not None:
            batch_size = change.batch_size
        if change is not None:
            job.acknowledge(change, batch_size, epoch=epoch)
        ...train one epoch...
    job.finish(reached=loss <= target, epochs=epoch + 1, metric=loss, metric_name="loss")
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from plans.errors import BadJobFile

__all__ = [
    "BATCH_SIZE_ENV",
    "CHECKPOINT_DIR_ENV",
    "CLOCK_PLAN_ENV",
    "ClockPlanRun",
    "JobWindow",
    "MODE_FILE_ENV",
    "PROGRESS_FILE_ENV",
    "RESULT_FILE_ENV",
    "RESUME_ENV",
    "WINDOW_ENV",
    "BatchSizeAck",
    "GridshiftJob",
    "JobResult",
    "ModeAnnouncement",
    "read_mode_file",
    "read_result_file",
    "write_json_atomically",
    "write_mode_file",
]

BATCH_SIZE_ENV = "GRIDSHIFT_BATCH_SIZE"
#: the clock plan file of the mode the job starts in; later modes' plans come in the mode file
CLOCK_PLAN_ENV = "GRIDSHIFT_CLOCK_PLAN"
MODE_FILE_ENV = "GRIDSHIFT_MODE_FILE"
RESULT_FILE_ENV = "GRIDSHIFT_RESULT_FILE"
#: the job may write its fraction done (0-1) to the file this variable names; re-planning uses it
PROGRESS_FILE_ENV = "GRIDSHIFT_PROGRESS_FILE"
#: where a checkpointable job keeps its checkpoint between windows (the same for all windows of a run)
CHECKPOINT_DIR_ENV = "GRIDSHIFT_CHECKPOINT_DIR"
#: set to "1" when a pausable job is started again after a planned pause: resume from the checkpoint
RESUME_ENV = "GRIDSHIFT_RESUME"
#: which window of the flow run the process is (0 first); the job names it in the result file
WINDOW_ENV = "GRIDSHIFT_WINDOW"


def write_json_atomically(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file and ``os.replace``: a reader sees
    the old content or the new, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class ModeAnnouncement:
    """One write of the mode file: the ``seq``-th mode of the run (0 = the mode the job started in)."""

    seq: int
    mode: str
    batch_size: int | None
    since: str
    reason: str = ""
    clock_plan: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "seq": self.seq, "mode": self.mode, "batch_size": self.batch_size,
                "clock_plan": self.clock_plan, "since": self.since, "reason": self.reason}


class _ModeFileModel(BaseModel):
    model_config = ConfigDict(extra="ignore")  # newer gridshift versions may add keys; jobs keep working

    version: Literal[1]
    seq: int = Field(ge=0)
    mode: str
    batch_size: int | None = Field(default=None, gt=0)
    clock_plan: str | None = None
    since: str
    reason: str = ""


def write_mode_file(path: Path, announcement: ModeAnnouncement) -> None:
    """Replace the mode file atomically (gridshift's side)."""
    write_json_atomically(path, announcement.to_json())


def _load_json(path: Path) -> Any | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadJobFile(f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadJobFile(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None


def _one_line(path: Path, exc: ValidationError) -> BadJobFile:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return BadJobFile(f"{path}: {where}: {err['msg']}{more}")


def read_mode_file(path: Path) -> ModeAnnouncement | None:
    """The current mode announcement, or None when gridshift has not written one (yet)."""
    raw = _load_json(path)
    if raw is None:
        return None
    try:
        m = _ModeFileModel.model_validate(raw)
    except ValidationError as exc:
        raise _one_line(path, exc) from None
    return ModeAnnouncement(seq=m.seq, mode=m.mode, batch_size=m.batch_size, since=m.since, reason=m.reason,
                            clock_plan=m.clock_plan)


class BatchSizeAck(BaseModel):
    """The job switched to (or kept) ``batch_size`` after reading mode announcement ``mode_seq``.

    ``reason``: why the job runs a size other than the one announced (it kept its own: the
    framework cannot change it there, say); empty when it runs the announced size.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode_seq: int = Field(ge=0, description="seq of the mode announcement the job acted on")
    batch_size: int = Field(gt=0, description="the batch size the job runs with from then on")
    epoch: float | None = Field(default=None, ge=0, description="the epoch boundary where it switched")
    step: int | None = Field(default=None, ge=0, description="the training step where it switched")
    reason: str | None = Field(default=None, description="why the job kept a size other than the announced one")


class JobWindow(BaseModel):
    """One process of the job: the step it started at (0, or its checkpoint's after a resume) and
    the last step it reported; ``ended``: ``running`` (no word yet), ``paused`` (checkpoint written
    on SIGTERM) or ``finished``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int | None = Field(default=None, ge=0, description="GRIDSHIFT_WINDOW of the process (null: not set)")
    start_step: int = Field(ge=0, description="the step it started (or resumed) at")
    end_step: int | None = Field(default=None, ge=0, description="the last step it reported")
    ended: Literal["running", "paused", "finished"] = "running"
    checkpoint: str | None = Field(default=None, description="the checkpoint written at the pause, or resumed from")


class ClockPlanRun(BaseModel):
    """The clock plan the job ran after reading mode announcement ``mode_seq`` (``plan`` None: none,
    its lock undone), with the executor's counts while it ran."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode_seq: int = Field(ge=0, description="seq of the mode announcement the job acted on")
    plan: str | None = Field(default=None, description="the plan file run from then on; null: no plan")
    step: int | None = Field(default=None, ge=0, description="the training step where it took effect")
    switches: int = Field(default=0, ge=0, description="clock calls made under this plan (locks and the final reset)")
    phase_switches: dict[str, int] = Field(default_factory=dict, description="switches asked for at each phase's start")
    unfired: tuple[str, ...] = Field(default=(), description="phases of the plan that never started")
    errors: int = Field(default=0, ge=0, description="clock calls that failed, or the plan that could not be run")
    last_error: str = ""
    dry_run: bool = Field(default=False, description="the calls were counted, not sent to the GPU")


class JobResult(BaseModel):
    """What the job writes to ``GRIDSHIFT_RESULT_FILE``. Every field but ``version`` is optional.

    ``reached``: the job reached its target (e.g. validation loss); false: it stopped at its epoch
    budget without; absent/null: it did not say (no batch-size trial is learnt from the run).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    reached: bool | None = Field(default=None, description="the training target was reached")
    epochs: float | None = Field(default=None, ge=0, description="epochs trained")
    steps: int | None = Field(default=None, ge=0, description="optimiser steps taken")
    metric: float | None = Field(default=None, description="the target metric's last value")
    metric_name: str | None = Field(default=None, description="what metric is, e.g. 'val_loss'")
    batch_sizes: tuple[BatchSizeAck, ...] = Field(default=(), description="acknowledged mode changes, in order")
    clock_plans: tuple[ClockPlanRun, ...] = Field(default=(), description="clock plans run, in order")
    windows: tuple[JobWindow, ...] = Field(default=(), description="the job's processes, in order (pauses)")


def read_result_file(path: Path) -> JobResult | None:
    """The job's result, or None when it wrote none. :class:`BadJobFile` (one line) when malformed."""
    raw = _load_json(path)
    if raw is None:
        return None
    try:
        return JobResult.model_validate(raw)
    except ValidationError as exc:
        raise _one_line(path, exc) from None


class GridshiftJob:
    """The training job's side: the start batch size, mode changes, acknowledgements and the result.

    Every method is a no-op when gridshift did not set the variables, so the same script runs
    standalone. One object per process, and one writer per job: each write replaces the whole
    result file, so the acknowledgements, the clock plan runs (the runner reports through this
    object), the windows and the outcome all come from it; under ``torch.distributed`` only rank
    0's object has a result file (:meth:`from_env` with ``rank``). A resumed process
    (``GRIDSHIFT_RESUME=1``) keeps what the earlier windows wrote to the same file.

    Writes may come from two threads (the integrations write the periodic ones from a thread of their
    own): each renders the state as it is when it holds the write lock, so the newest state is the
    last one written.
    """

    def __init__(self, *, batch_size: int | None, mode_file: Path | None, result_file: Path | None,
                 clock_plan: Path | None = None, window: int | None = None, resumed: bool = False) -> None:
        self._batch_size = batch_size
        self.mode_file = mode_file
        self.result_file = result_file
        self.clock_plan = clock_plan
        self.window = window
        self.resumed = resumed
        self._seen_seq = -1
        #: the newest announcement :meth:`poll_mode` returned (the mode in force, as far as the job knows)
        self.announcement: ModeAnnouncement | None = None
        self._acks: list[BatchSizeAck] = []
        self._plans_before: tuple[ClockPlanRun, ...] = ()
        self._plans: tuple[ClockPlanRun, ...] = ()
        self._windows: list[JobWindow] = []
        self._outcome: dict[str, Any] = {}
        self._write_lock = threading.Lock()
        if resumed and result_file is not None:
            self._carry_on(result_file)

    def _carry_on(self, path: Path) -> None:
        """Keep what the earlier windows of this run wrote (a resumed process starts a fresh object)."""
        try:
            before = read_result_file(path)
        except BadJobFile:
            return  # not ours to repair: this window's writes replace it
        if before is not None:
            self._acks = list(before.batch_sizes)
            self._plans_before = before.clock_plans
            self._windows = list(before.windows)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, rank: int = 0) -> "GridshiftJob":
        """The job's files as gridshift named them. ``rank`` other than 0: read the mode, never write
        (one result file per job, written by rank 0)."""
        env = os.environ if environ is None else environ
        raw = env.get(BATCH_SIZE_ENV, "").strip()
        try:
            batch_size = int(raw) if raw else None
        except ValueError:
            raise BadJobFile(f"{BATCH_SIZE_ENV}={raw!r}: not an integer") from None
        raw_window = env.get(WINDOW_ENV, "").strip()
        window = int(raw_window) if raw_window.isdigit() else None
        mode_file = env.get(MODE_FILE_ENV) or None
        result_file = (env.get(RESULT_FILE_ENV) or None) if rank == 0 else None
        clock_plan = env.get(CLOCK_PLAN_ENV) or None
        return cls(batch_size=batch_size, mode_file=Path(mode_file) if mode_file else None,
                   result_file=Path(result_file) if result_file else None,
                   clock_plan=Path(clock_plan) if clock_plan else None, window=window,
                   resumed=env.get(RESUME_ENV) == "1")

    def start_batch_size(self, default: int) -> int:
        """``GRIDSHIFT_BATCH_SIZE``, or ``default`` when gridshift sets none."""
        return self._batch_size if self._batch_size is not None else default

    def poll_mode(self) -> ModeAnnouncement | None:
        """The mode announcement newer than the last one returned, or None. Call at safe points
        (epoch boundaries); the first call returns the mode the job started in."""
        if self.mode_file is None:
            return None
        current = read_mode_file(self.mode_file)
        if current is None or current.seq <= self._seen_seq:
            return None
        self._seen_seq = current.seq
        self.announcement = current
        return current

    def acknowledge(self, announcement: ModeAnnouncement, batch_size: int, *, epoch: float | None = None,
                    step: int | None = None, reason: str = "") -> None:
        """Tell gridshift the job runs with ``batch_size`` since ``announcement`` (written at once);
        ``reason``: why it kept a size other than the announced one."""
        self._acks.append(BatchSizeAck(mode_seq=announcement.seq, batch_size=batch_size, epoch=epoch, step=step,
                                       reason=reason or None))
        self.write()

    def report_clock_plans(self, runs: tuple[ClockPlanRun, ...], *, write: bool = True) -> None:
        """Tell gridshift which clock plans this runner has run so far, with their counts (written at
        once; ``write=False``: with the next write)."""
        self._plans = runs
        if write:
            self.write()

    def new_clock_plan_runner(self) -> None:
        """A new runner reports from now on: what the last one reported is kept, in front of its."""
        self._plans_before, self._plans = self._plans_before + self._plans, ()

    def window_started(self, step: int, *, checkpoint: str | None = None) -> None:
        """This process trains from ``step`` (0, or the step of the checkpoint it resumed from)."""
        self._windows.append(JobWindow(window=self.window, start_step=step, end_step=step, checkpoint=checkpoint))
        self.write()

    def window_at(self, step: int, *, ended: Literal["running", "paused", "finished"] = "running",
                  checkpoint: str | None = None, write: bool = True) -> None:
        """The last step this process reached (and how it ended, once it has); ``write=False``: written
        with the next write."""
        if not self._windows:
            self._windows.append(JobWindow(window=self.window, start_step=0))
        last = self._windows[-1]
        update: dict[str, Any] = {"end_step": step, "ended": ended}
        if checkpoint is not None:
            update["checkpoint"] = checkpoint
        self._windows[-1] = last.model_copy(update=update)
        if write:
            self.write()

    def finish(self, *, reached: bool | None, epochs: float | None = None, steps: int | None = None,
               metric: float | None = None, metric_name: str | None = None) -> None:
        """Write the outcome (call once, at the end of training)."""
        self._outcome = {"reached": reached, "epochs": epochs, "steps": steps, "metric": metric,
                         "metric_name": metric_name}
        self.write()

    def write(self) -> None:
        """Replace the result file with everything so far (nothing without one)."""
        if self.result_file is None:
            return
        with self._write_lock:
            result = JobResult(**self._outcome, batch_sizes=tuple(self._acks),
                               clock_plans=self._plans_before + self._plans, windows=tuple(self._windows))
            write_json_atomically(self.result_file, result.model_dump(mode="json", exclude_none=True))
