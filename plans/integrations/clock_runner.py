"""Run the mode's clock plan inside the training process, swap it when the mode changes, and say so.

The job's half of clock plans (gridshift's half: :mod:`scheduler.settings.clock_plans`). gridshift names the
starting mode's plan in ``GRIDSHIFT_CLOCK_PLAN`` and each later mode's in the mode file
(``GRIDSHIFT_MODE_FILE``); :class:`ClockPlanRunner` runs it with
:class:`plans.dvfs.executor.PlanExecutor`, looks at the mode file at step boundaries (at most every
``poll_interval_s``), swaps to the new mode's plan (or undoes its clock lock when the new mode has
none), and writes what it ran, with the executor's counts, to the result file
(:class:`plans.integrations.protocol.ClockPlanRun`): that is what lets a report say the plan was run.

The one line for a PyTorch loop::

    with run_clock_plan(model, optimizer, job=job):   # job: the script's GridshiftJob, if it has one
        for batch in loader:
            ...                                        # forward, backward, optimizer.step()

Phases are found by hooks: a plan phase ``forward`` / ``backward`` is the model's forward / backward
start, ``<module>.forward`` / ``<module>.backward`` a named submodule's, ``optimizer`` (or
``optimizer.step``) the optimizer step; any other label (e.g. a ``record_function`` region) needs a
``runner.on_phase(label)`` call at its start. The mode file is polled from the model's forward
pre-hook, unless the framework callbacks (:mod:`plans.integrations.power_limit`) call :meth:`on_step_begin`.

Clock calls go through the NVIDIA backend's journalled path (``GRIDSHIFT_GPU_DELEGATED_BY`` lets
the job's backend act on a GPU that gridshift holds). With ``GRIDSHIFT_NVML_READ_ONLY=1`` the runner
uses the executor's :class:`plans.dvfs.executor.DryRunControl` instead (logged, recorded, never sent
to the GPU), and the result file says ``dry_run``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Callable

from backends.nvidia import READ_ONLY_ENV
from plans.dvfs.errors import PlanFileError
from plans.dvfs.executor import ClockControl, PlanExecutor
from plans.dvfs.plan_file import load_plan
from plans.errors import BadJobFile
from plans.integrations.protocol import ClockPlanRun, GridshiftJob, ModeAnnouncement, read_mode_file

__all__ = ["ClockPlanRunner", "run_clock_plan"]

_log = logging.getLogger("gridshift.clock_runner")
_OPTIMIZER_PHASES = ("optimizer", "optimizer.step")


class _NvidiaControl:
    """The GPU's clock control, built on first use so a job without a plan never opens NVML; its
    ``close`` undoes what the backend changed and releases NVML."""

    def __init__(self) -> None:
        from backends.nvidia import NvidiaBackend

        self.backend = NvidiaBackend()  # per rank: LOCAL_RANK's GPU under torchrun
        self.control = self.backend.clock_control()

    def close(self) -> None:
        try:
            self.backend.restore()
        finally:
            self.backend.close()


class ClockPlanRunner:
    """Runs the current mode's clock plan and follows the mode file; reports to ``job``'s result file.

    ``control``: where clock calls go (default: this GPU through the NVIDIA backend, built when the
    first plan starts). ``dry_run``: record the calls instead (:meth:`from_env` sets it under
    ``GRIDSHIFT_NVML_READ_ONLY=1``). ``clock`` (monotonic seconds) times the mode-file polls.
    Errors of clock calls are counted in the result file, never raised into training.
    """

    def __init__(self, job: GridshiftJob, *, control: ClockControl | None = None, dry_run: bool = False,
                 min_interval_s: float = 0.02, poll_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.job = job
        self.dry_run = dry_run
        self.min_interval_s = min_interval_s
        self.poll_interval_s = poll_interval_s
        self._control = control
        self._owned: _NvidiaControl | None = None
        self._clock = clock
        self.executor: PlanExecutor | None = None
        self.plan_path: str | None = None
        self.steps = 0
        self.runs: list[ClockPlanRun] = []
        self._seen_seq = -1
        self._last_poll_s = -float("inf")
        self._model: Any = None
        self._optimizer: Any = None
        self._hooks: list[Any] = []
        self._step_hook = True
        self._started = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, job: GridshiftJob | None = None,
                 dry_run: bool | None = None, **kw: Any) -> "ClockPlanRunner":
        """A runner for the plan gridshift handed over (dry run under ``GRIDSHIFT_NVML_READ_ONLY=1``)."""
        env = os.environ if environ is None else environ
        job = job if job is not None else GridshiftJob.from_env(env)
        return cls(job, dry_run=env.get(READ_ONLY_ENV) == "1" if dry_run is None else dry_run, **kw)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "ClockPlanRunner":
        """Start the plan of the mode in force (the mode file's, else ``GRIDSHIFT_CLOCK_PLAN``)."""
        if self._started:
            return self
        self._started = True
        ann = self._read_mode()
        if ann is not None:
            self._seen_seq = ann.seq
        plan = ann.clock_plan if ann is not None else (str(self.job.clock_plan) if self.job.clock_plan else None)
        if plan is not None:  # a mode without a plan: nothing to run, nothing to report
            self._begin(ann.seq if ann is not None else 0, plan)
        self._last_poll_s = self._clock()
        return self

    def close(self) -> None:
        """Stop the plan (its clock lock undone), report the final counts, remove the hooks. Idempotent."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._model = self._optimizer = None
        self._end()
        if self.runs:
            self.job.report_clock_plans(tuple(self.runs))
        if self._owned is not None:
            owned, self._owned = self._owned, None
            owned.close()

    def __enter__(self) -> "ClockPlanRunner":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the training loop (or its hooks) calls ---------------------------------------------
    def on_phase(self, phase: str) -> None:
        """A phase starts: the plan's clock for it, if a segment starts here (cheap: a queue put at most)."""
        if self.executor is not None:
            self.executor.on_phase(phase)

    def on_step_begin(self) -> None:
        """A step starts: a safe point to look at the mode file (at most every ``poll_interval_s``)."""
        self.steps += 1
        if self._clock() - self._last_poll_s >= self.poll_interval_s:
            self.poll()

    def poll(self) -> bool:
        """Look at the mode file now; on a new mode, swap to its plan. True when the mode changed."""
        self._last_poll_s = self._clock()
        ann = self._read_mode()
        if ann is None or ann.seq <= self._seen_seq:
            return False
        self._seen_seq = ann.seq
        if ann.clock_plan is None and self.plan_path is None:
            return True  # no plan before or after: nothing to run, nothing to report
        # a new executor even for the same plan file: each mode's run is counted (and confirmed) on its own
        self._end()
        self._begin(ann.seq, ann.clock_plan)
        return True

    def flush(self) -> None:
        """Block until the executor has handled every queued switch (tests; the end of an iteration)."""
        if self.executor is not None:
            self.executor.flush()

    def attach(self, model: Any, optimizer: Any = None, *, steps_from_forward: bool = True) -> "ClockPlanRunner":
        """Drive the plan from hooks on ``model`` (and ``optimizer``); see the module docstring.

        ``steps_from_forward``: poll the mode file from the model's forward pre-hook (off when a
        framework callback calls :meth:`on_step_begin`).
        """
        self._model, self._optimizer = model, optimizer
        self._step_hook = steps_from_forward
        self._rehook()
        return self

    # -- internals ----------------------------------------------------------------------------
    def _read_mode(self) -> ModeAnnouncement | None:
        if self.job.mode_file is None:
            return None
        try:
            return read_mode_file(self.job.mode_file)
        except BadJobFile as exc:  # gridshift writes it atomically; a bad file is not the training's problem
            _log.warning("mode file ignored: %s", exc)
            return None

    def _control_for_plan(self) -> ClockControl | None:
        if self.dry_run or self._control is not None:
            return self._control
        if self._owned is None:
            self._owned = _NvidiaControl()
        return self._owned.control

    def _begin(self, seq: int, path: str | None) -> None:
        self.plan_path = path
        run = ClockPlanRun(mode_seq=seq, plan=path, step=self.steps, dry_run=self.dry_run)
        if path is not None:
            try:
                plan = load_plan(path)
                plan.phase_clocks()  # a plan with mid-phase segments cannot be run at phase starts
                self.executor = PlanExecutor(plan, self._control_for_plan(), dry_run=self.dry_run,
                                             min_interval_s=self.min_interval_s).start()
            except PlanFileError as exc:  # training goes on at the clocks it has; the report says why
                _log.warning("clock plan not run: %s", exc)
                run = run.model_copy(update={"errors": 1, "last_error": str(exc)})
        self.runs.append(run)
        self.job.report_clock_plans(tuple(self.runs))
        self._rehook()

    def _end(self) -> None:
        if self.executor is not None:
            self.executor.close()  # resets the lock it made
            stats = self.executor.stats
            self.runs[-1] = self.runs[-1].model_copy(update={
                "switches": stats.issued, "errors": stats.errors, "last_error": stats.last_error})
            self.executor = None
        self.plan_path = None

    def _rehook(self) -> None:
        """Hooks for the phases of the plan now running (a new plan may name other phases)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        model = self._model
        if model is None:
            return
        if self._step_hook:
            self._hooks.append(model.register_forward_pre_hook(lambda _m, _i: self.on_step_begin()))
        if self.executor is None:
            return
        modules = dict(model.named_modules())
        unhooked: list[str] = []
        for phase in self.executor.plan.phase_clocks():
            name, _, kind = phase.rpartition(".")
            target = model if not name and kind in ("forward", "backward") else modules.get(name)
            if phase in _OPTIMIZER_PHASES and self._optimizer is not None:
                self._hooks.append(self._optimizer.register_step_pre_hook(lambda _o, _a, _k, _p=phase: self.on_phase(_p)))
            elif target is not None and kind == "forward":
                self._hooks.append(target.register_forward_pre_hook(lambda _m, _i, _p=phase: self.on_phase(_p)))
            elif target is not None and kind == "backward":
                self._hooks.append(target.register_full_backward_pre_hook(lambda _m, _g, _p=phase: self.on_phase(_p)))
            else:
                unhooked.append(phase)
        if unhooked:
            _log.warning("clock plan phases with no hook (call runner.on_phase(label) at their start): %s",
                         ", ".join(unhooked))


def run_clock_plan(model: Any = None, optimizer: Any = None, *, job: GridshiftJob | None = None,
                   **kw: Any) -> ClockPlanRunner:
    """The one line for a PyTorch loop: run gridshift's clock plan from hooks on ``model`` and
    ``optimizer``, swapping it when the mode changes. Use it as a context manager (or call
    ``close()``); pass the script's :class:`GridshiftJob` as ``job`` if it has one, so that one object
    writes the result file. Without ``GRIDSHIFT_CLOCK_PLAN`` or a mode file it does nothing."""
    runner = ClockPlanRunner.from_env(job=job, **kw).start()
    if model is not None:
        runner.attach(model, optimizer)
    return runner
