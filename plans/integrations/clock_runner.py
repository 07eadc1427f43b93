"""Run the mode's clock plan inside the training process, swap it when the mode changes, and say so.

The job's half of clock plans (gridshift's half: :mod:`scheduler.settings.clock_plans`). gridshift names the
starting mode's plan in ``GRIDSHIFT_CLOCK_PLAN`` and each later mode's in the mode file
(``GRIDSHIFT_MODE_FILE``); :class:`ClockPlanRunner` runs it with
:class:`plans.dvfs.executor.PlanExecutor`, swaps to the new mode's plan when it is handed a newer
announcement (:meth:`ClockPlanRunner.follow`; or undoes its clock lock when the new mode has none),
and writes what it ran, with the executor's counts, to the result file
(:class:`plans.integrations.protocol.ClockPlanRun`): that is what lets a report say the plan was run.

The runner knows nothing of frameworks: phases reach it as :meth:`ClockPlanRunner.on_phase` calls,
from the framework's own events or from hooks (:mod:`plans.integrations.phase_hooks`), and the
integrations' shared core (:mod:`plans.integrations.core`) reads the mode file and hands it the
announcements. A phase of the plan that has not started after ``warn_after_steps`` steps gets one
warning, and the result file names it (``unfired``).

Clock calls go through the NVIDIA backend's journalled path (``GRIDSHIFT_GPU_DELEGATED_BY`` lets
the job's backend act on a GPU that gridshift holds). With ``GRIDSHIFT_NVML_READ_ONLY=1`` the runner
uses the executor's :class:`plans.dvfs.executor.DryRunControl` instead (counted, never sent to the
GPU, and no worker thread), and the result file says ``dry_run``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from plans.dvfs.errors import PlanFileError
from plans.dvfs.executor import ClockControl, PlanExecutor
from plans.dvfs.plan_file import load_plan
from plans.integrations.protocol import ClockPlanRun, GridshiftJob, ModeAnnouncement

__all__ = ["ClockPlanRunner", "OPTIMIZER_PHASES"]

_log = logging.getLogger("gridshift.integrations")
#: the labels a plan may give the optimizer step
OPTIMIZER_PHASES = ("optimizer", "optimizer.step")


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
    """Runs the current mode's clock plan and follows the announcements it is handed; reports to
    ``job``'s result file.

    ``control``: where clock calls go (default: this GPU through the NVIDIA backend, built when the
    first plan starts). ``dry_run``: record the calls instead. Errors of clock calls are counted in
    the result file, never raised into training; a plan that cannot be loaded is reported (one
    warning) and training goes on at the clocks it has.
    """

    def __init__(self, job: GridshiftJob, *, control: ClockControl | None = None, dry_run: bool = False,
                 min_interval_s: float = 0.02, warn_after_steps: int = 20,
                 log: logging.Logger = _log) -> None:
        self.job = job
        job.new_clock_plan_runner()  # one job may outlive a runner (a second train() in a process)
        self.dry_run = dry_run
        self.min_interval_s = min_interval_s
        self.warn_after_steps = warn_after_steps
        self._log = log
        self._control = control
        self._owned: _NvidiaControl | None = None
        self.executor: PlanExecutor | None = None
        self.plan_path: str | None = None
        self.step = 0
        self.runs: list[ClockPlanRun] = []
        self._seen_seq = -1
        self._fired: Counter[str] = Counter()
        self._switches: Counter[str] = Counter()
        self._plan_step = 0
        self._checked_unfired = False
        self._quiet: set[str] = set()
        self._phases: tuple[str, ...] = ()
        #: the label the running plan gives the optimizer step (None: it has none)
        self.optimizer_phase: str | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, announcement: ModeAnnouncement | None, *, step: int = 0) -> "ClockPlanRunner":
        """Start the plan of ``announcement`` (None: the mode file has none yet, so the plan of
        ``GRIDSHIFT_CLOCK_PLAN``, the mode the job was started in)."""
        self.step = step
        if announcement is not None:
            self._seen_seq = announcement.seq
            plan = announcement.clock_plan
        else:
            plan = str(self.job.clock_plan) if self.job.clock_plan else None
        if plan is not None:  # a mode without a plan: nothing to run, nothing to report
            self._begin(announcement.seq if announcement is not None else 0, plan)
        return self

    def follow(self, announcement: ModeAnnouncement) -> bool:
        """A newer mode was announced: swap to its plan (or stop the one running). True when the
        plan changed (the phases to hook may have too)."""
        if announcement.seq <= self._seen_seq:
            return False
        self._seen_seq = announcement.seq
        if announcement.clock_plan is None and self.plan_path is None:
            return False  # no plan before or after: nothing to run, nothing to report
        # a new executor even for the same plan file: each mode's run is counted (and confirmed) on its own
        self._end()
        self._begin(announcement.seq, announcement.clock_plan)
        return True

    def drop(self, why: str) -> None:
        """Stop the plan because the job cannot run it (a hook that cannot be installed, say): the
        lock is undone and the result file says why. Later announcements start their plans again."""
        if self.executor is None:
            return
        self._end()
        self.runs[-1] = self.runs[-1].model_copy(update={"errors": self.runs[-1].errors + 1, "last_error": why})
        self.job.report_clock_plans(tuple(self.runs))

    def close(self) -> None:
        """Stop the plan (its clock lock undone) and report the final counts. Idempotent."""
        self._end()
        if self.runs:
            self.job.report_clock_plans(tuple(self.runs))
        if self._owned is not None:
            owned, self._owned = self._owned, None
            owned.close()

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases of the plan running now (none without one)."""
        return self._phases

    # -- what the training loop (or its hooks) calls ---------------------------------------------
    def on_phase(self, phase: str) -> None:
        """A phase starts: the plan's clock for it, if a segment starts here (cheap: a queue put at most)."""
        ex = self.executor
        if ex is None:
            return
        self._fired[phase] += 1
        if ex.on_phase(phase):
            self._switches[phase] += 1

    def on_step(self, step: int) -> None:
        """A training step starts (``step``: the framework's count); warns once about plan phases
        that have not started ``warn_after_steps`` steps into the plan (looked at once: a phase
        that has started stays started)."""
        self.step = step
        if self.executor is None or self._checked_unfired or step - self._plan_step < self.warn_after_steps:
            return
        self._checked_unfired = True
        unfired = [p for p in self._unfired() if p not in self._quiet]
        if unfired:
            self._log.warning("gridshift: clock plan phase(s) %s never started in %d steps: nothing calls "
                              "on_phase for them (check the plan's phase names against the model)",
                              ", ".join(unfired), step - self._plan_step)

    def quiet(self, phases: Iterable[str]) -> None:
        """Leave ``phases`` out of the never-started warning (their caller has warned already)."""
        self._quiet.update(phases)

    def flush(self) -> None:
        """Block until the executor has handled every queued switch (tests; the end of an iteration)."""
        if self.executor is not None:
            self.executor.flush()

    # -- internals ----------------------------------------------------------------------------
    def _unfired(self) -> tuple[str, ...]:
        return tuple(p for p in self.phases if not self._fired[p])

    def _control_for_plan(self) -> ClockControl | None:
        if self.dry_run or self._control is not None:
            return self._control
        if self._owned is None:
            self._owned = _NvidiaControl()
        return self._owned.control

    def _begin(self, seq: int, path: str | None) -> None:
        self.plan_path = path
        self._fired.clear()
        self._switches.clear()
        self._plan_step, self._checked_unfired = self.step, False
        run = ClockPlanRun(mode_seq=seq, plan=path, step=self.step, dry_run=self.dry_run)
        if path is not None:
            try:
                plan = load_plan(path)
                plan.phase_clocks()  # a plan with mid-phase segments cannot be run at phase starts
                self.executor = PlanExecutor(plan, self._control_for_plan(), dry_run=self.dry_run,
                                             min_interval_s=self.min_interval_s).start()
                self._phases = tuple(plan.phase_clocks())
                self.optimizer_phase = next((p for p in self._phases if p in OPTIMIZER_PHASES), None)
            except PlanFileError as exc:  # training goes on at the clocks it has; the report says why
                self._log.warning("gridshift: clock plan not run: %s", exc)
                run = run.model_copy(update={"errors": 1, "last_error": str(exc)})
            except Exception as exc:  # no GPU control here (no NVML, no permission): the same
                self._log.warning("gridshift: clock plan not run: %s: %s", type(exc).__name__, exc)
                run = run.model_copy(update={"errors": 1, "last_error": f"{type(exc).__name__}: {exc}"})
        self.runs.append(run)
        self.job.report_clock_plans(tuple(self.runs))

    def _end(self) -> None:
        if self.executor is not None:
            unfired = self._unfired()
            self.executor.close()  # resets the lock it made
            stats = self.executor.stats
            self.runs[-1] = self.runs[-1].model_copy(update={
                "switches": stats.issued, "errors": self.runs[-1].errors + stats.errors,
                "last_error": stats.last_error or self.runs[-1].last_error,
                "phase_switches": dict(self._switches), "unfired": unfired})
            self.executor = None
        self.plan_path = None
        self._phases, self.optimizer_phase = (), None

    def snapshot(self, *, write: bool = True) -> None:
        """Hand the running plan's counts so far to the result file (the core does it now and then,
        so a job killed mid-run still leaves them); ``write=False``: with the job's next write."""
        if self.executor is None or not self.runs:
            return
        stats = self.executor.stats
        current: dict[str, Any] = {"switches": stats.issued, "phase_switches": dict(self._switches)}
        if stats.errors:
            current.update(errors=stats.errors, last_error=stats.last_error)
        runs = [*self.runs[:-1], self.runs[-1].model_copy(update=current)]
        self.job.report_clock_plans(tuple(runs), write=write)
