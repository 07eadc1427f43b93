"""Who applied each setting of a mode span, and whether it was confirmed. Pure.

gridshift applies power limits and static clock locks through the backend; the backend reads the
power limit back, so that is confirmed (or shown not to have taken). Batch sizes and clock plans
are handed to the job (``GRIDSHIFT_BATCH_SIZE``, ``GRIDSHIFT_CLOCK_PLAN``, the mode file); only the
job's result file (:class:`plans.integrations.protocol.JobResult`) can confirm them, and a span says
"handed to the job, not confirmed" until it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from backends.types import Applied, Settings
from plans.integrations.protocol import BatchSizeAck, ClockPlanRun, JobResult, ModeAnnouncement
from scheduler.report import SpanSetting

__all__ = ["NOT_CONFIRMED", "batch_size_settings", "clock_plan_settings", "hardware_settings", "job_settings"]

NOT_CONFIRMED = "handed to the job, not confirmed"
#: a read-back power limit within this of the request counts as the request (NVML works in mW)
_POWER_TOLERANCE_W = 0.5


def hardware_settings(requested: Settings, applied: Applied | None, *, not_applied: str = "",
                      measured: bool = True) -> tuple[SpanSetting, ...]:
    """The settings gridshift asked the backend for, each with what the backend reported.

    ``applied`` None: nothing was applied (``not_applied`` says why, e.g. measure-only).
    ``measured`` False: the backend is a model, so a read-back is the model's.
    """
    out: list[SpanSetting] = []
    source = "read back" if measured else "read back from the simulated GPU"
    if requested.power_limit_w is not None:
        got = applied.in_force.power_limit_w if applied is not None else None
        if applied is None:
            out.append(SpanSetting("power_limit_w", requested.power_limit_w, "gridshift", False,
                                   f"not applied: {not_applied}"))
        elif got is not None and abs(got - requested.power_limit_w) <= _POWER_TOLERANCE_W:
            out.append(SpanSetting("power_limit_w", got, "gridshift", True, f"set by gridshift, {source}"))
        else:
            seen = f"{got:.0f} W {source}" if got is not None else "nothing read back"
            why = "; ".join(s for s in applied.skipped if "power" in s) or "the device kept another limit"
            out.append(SpanSetting("power_limit_w", requested.power_limit_w, "gridshift", False,
                                   f"not applied: {why}; {seen}"))
    for name, want, got_value in (
        ("sm_clock_mhz", requested.sm_clock_mhz, applied.in_force.sm_clock_mhz if applied else None),
        ("mem_clock_mhz", requested.mem_clock_mhz, applied.in_force.mem_clock_mhz if applied else None),
    ):
        if want is None:
            continue
        value = list(want) if isinstance(want, tuple) else want
        if applied is None:
            out.append(SpanSetting(name, value, "gridshift", False, f"not applied: {not_applied}"))
        elif got_value == want:
            # NVML has no getter for a locked range: the driver accepting the lock is all there is
            out.append(SpanSetting(name, value, "gridshift", False, "locked by gridshift; the driver accepted it, "
                                                                    "no read-back exists"))
        else:
            why = "; ".join(s for s in applied.skipped if "clock" in s) or "the lock did not take"
            out.append(SpanSetting(name, value, "gridshift", False, f"not applied: {why}"))
    return tuple(out)


def batch_size_settings(announced: Sequence[ModeAnnouncement], start_batch_size: int | None,
                        acks: Sequence[BatchSizeAck]) -> list[SpanSetting | None]:
    """What each mode span may truthfully say about the job's batch size (None: nothing to say).

    Span ``i`` began with announcement ``i``. A batch size is confirmed only by the job's
    acknowledgement of that announcement (or, with none, its last earlier one); otherwise it is the
    size gridshift handed over, not confirmed, never reported as the size the job ran.
    """
    last_ack = {a.mode_seq: a for a in acks}  # the job's last word on each announcement
    known: int | None = None  # the batch size the job last acknowledged
    out: list[SpanSetting | None] = []
    for ann in announced:
        ack = last_ack.get(ann.seq)
        if ack is not None:
            at = (f" at step {ack.step}" if ack.step is not None
                  else f" at epoch {ack.epoch:g}" if ack.epoch is not None else "")
            if ack.reason:
                how = f"kept by the job{at}: {ack.reason}"
            elif known is not None and known != ack.batch_size:
                how = f"was {known}, the job switched{at}"
            else:
                how = f"acknowledged by the job{at}"
            if ann.batch_size is not None and ann.batch_size != ack.batch_size:
                how += f"; the mode asks {ann.batch_size}"
            known = ack.batch_size
            out.append(SpanSetting("batch_size", ack.batch_size, "job", True, how))
        elif ann.batch_size is not None:
            how = NOT_CONFIRMED + (f"; the job last acknowledged {known}" if known is not None else "")
            out.append(SpanSetting("batch_size", ann.batch_size, "job", False, how))
        elif known is not None:
            out.append(SpanSetting("batch_size", known, "job", True, "acknowledged earlier by the job"))
        elif start_batch_size is not None:
            out.append(SpanSetting("batch_size", start_batch_size, "job", False, f"{NOT_CONFIRMED} (at start)"))
        else:
            out.append(None)
    return out


def _plan_name(plan: str | None) -> str | None:
    return Path(plan).name if plan else None


def _ran(run: ClockPlanRun, asked: str | None) -> SpanSetting:
    name = _plan_name(run.plan)
    differs = f"; the mode asks {_plan_name(asked) or 'none'}" if (run.plan or None) != (asked or None) else ""
    if run.plan is None:
        return SpanSetting("clock_plan", None, "job", True, f"the job runs no plan, its clock lock undone{differs}")
    if run.errors and not run.switches:  # before dry run: a plan that never ran was not run "in dry run"
        return SpanSetting("clock_plan", name, "job", False, f"not run by the job: {run.last_error}{differs}")
    calls = f"{run.switches} clock switch{'es' if run.switches != 1 else ''}"
    phases = ", ".join(f"{p} {n}" for p, n in sorted(run.phase_switches.items()))
    evidence = (f"; switches asked per phase: {phases}" if phases else "") + (
        f"; phase(s) {', '.join(run.unfired)} never started" if run.unfired else "") + differs
    if run.dry_run:
        failed = f" until it failed ({run.last_error})" if run.errors else ""
        return SpanSetting("clock_plan", name, "job", False,
                           f"run by the job in dry run{failed}: {calls} counted, no clock changed{evidence}")
    if run.errors:
        return SpanSetting("clock_plan", name, "job", False,
                           f"run by the job, {run.errors} clock switch(es) failed ({run.last_error}); "
                           f"{calls} made{evidence}")
    if run.switches == 0:
        return SpanSetting("clock_plan", name, "job", False, f"started by the job, no clock switch reported yet{evidence}")
    return SpanSetting("clock_plan", name, "job", True, f"run by the job: {calls}{evidence}")


def clock_plan_settings(announced: Sequence[ModeAnnouncement], runs: Sequence[ClockPlanRun]) -> list[SpanSetting | None]:
    """What each mode span may say about the clock plan: what the job reported running since that
    announcement, else the plan gridshift handed over, not confirmed (None: no plan involved)."""
    by_seq = {r.mode_seq: r for r in runs}  # the job's last report on each announcement
    out: list[SpanSetting | None] = []
    for ann in announced:
        run = by_seq.get(ann.seq)
        if run is not None:
            out.append(_ran(run, ann.clock_plan))
        elif ann.clock_plan is not None:
            out.append(SpanSetting("clock_plan", _plan_name(ann.clock_plan), "job", False, NOT_CONFIRMED))
        else:
            out.append(None)
    return out


def job_settings(announced: Sequence[ModeAnnouncement], start_batch_size: int | None,
                 result: JobResult | None) -> list[tuple[SpanSetting, ...]]:
    """The job's settings of each announced span (batch size, clock plan), as far as it confirmed them."""
    sizes = batch_size_settings(announced, start_batch_size, result.batch_sizes if result else ())
    plans = clock_plan_settings(announced, result.clock_plans if result else ())
    return [tuple(s for s in pair if s is not None) for pair in zip(sizes, plans)]
