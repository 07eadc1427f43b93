"""Run the job under its run specification: one decision loop for the planner and threshold rules.

Plain Python (no Prefect), so the loop is testable with an injected clock. The flow in
:mod:`flows.training` calls :func:`run_job` inside one task. :func:`run_loop` is the loop, and it
reads like the README's steps 2-5, with the decider (:mod:`scheduler.planner.deciders`) answering "which
mode now, and until when?" as a :class:`scheduler.planner.RunPlan` for both kinds of rule:

1. read the signal (every interval, and at every new window; a failed read keeps the last one);
2. decide: the planner re-plans the work left at the speeds seen; threshold rules re-decide on the
   intensity now (an open-ended plan of one segment);
3. apply the plan's mode through the backend and tell the job (:class:`flows.mode_spans.ModeSpans`);
4. let the job run until the next re-decision (every ``rules.interval_s``) or the plan's next mode
   change, whichever comes first; measure its progress (its progress file, else wall time x mode
   speed) and each span's energy; switch when the plan says so (the minimum dwell is the
   decider's), and repeat;
5. at a planned pause, stop a pausable job with SIGTERM (``job.stop_grace_s`` to write its
   checkpoint) and start it again with ``GRIDSHIFT_RESUME=1`` in the next window: in this process
   (a plain ``gridshift run``), or, when the caller passes ``defer_pauses_over_s`` (a deployment),
   by returning with :attr:`SupervisedRun.next_window` set, so the next window is a Scheduled flow
   run of its own and no worker waits through the pause.

A planner's plans are reported (the first plan, the work windows, the replans); a threshold
decision predicts nothing and only its reasons are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from backends.base import Backend
from backends.types import Capabilities
from carbon.monitor import CarbonMonitor, Reading
from flows.job.process import JobHandle
from flows.job.mode_file import ModeFileChannel
from flows.mode_spans import ModeSpans
from flows.job.progress import progress_file_reader
from plans.profile_store import PowerProfile
from scheduler.settings.clock_plans import ModePlan
from scheduler.planner.deciders import Decider, make_decider
from scheduler.planner.thresholds import Decision
from scheduler.planner.mode_figures import limit_modes
from scheduler.planner import ModeFigures, RunPlan
from scheduler.policy.types import Policy
from scheduler.report import ModeSpan, RunWindow
from scheduler.run_spec import RunSpec, resolve_run

__all__ = ["PROGRESS_ENV", "RESUME_ENV", "STOPPED_EXIT_CODES", "SupervisedRun", "progress_file_reader", "run_job",
           "run_loop", "supervise"]

#: the job may write its fraction done (0-1) to the file this variable names; re-planning uses it
PROGRESS_ENV = "GRIDSHIFT_PROGRESS_FILE"
#: set to "1" when a pausable job is started again after a planned pause: resume from the checkpoint
RESUME_ENV = "GRIDSHIFT_RESUME"
#: exit codes of a job that stopped as asked at a planned pause (0, 128 + SIGTERM, or killed by it)
STOPPED_EXIT_CODES = (0, 143, -15)
#: never wait less than this between two looks at the job (a plan boundary a moment away)
_MIN_WAIT_S = 1.0


@dataclass
class SupervisedRun:
    """What the supervisor saw; filled as the run goes, so a failure keeps what was measured.

    ``windows`` and ``spans`` include those of earlier flow runs of the same job (a resumed pausable
    job); ``next_window`` is set when the run paused and the next window is for the caller to
    schedule (see :func:`supervise`'s ``defer_pauses_over_s``).
    """

    spans: list[ModeSpan] = field(default_factory=list)
    windows: list[RunWindow] = field(default_factory=list)
    exit_code: int | None = None
    tail: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    work_done_s: float = 0.0
    next_window: datetime | None = None

    @property
    def energy_j(self) -> float:
        return sum(s.energy_j for s in self.spans)

    @property
    def carbon_g(self) -> float:
        return sum(s.carbon_g for s in self.spans)


def run_job(
    *,
    spec: RunSpec,
    backend: Backend,
    caps: Capabilities,
    control: bool,
    monitor: CarbonMonitor,
    first_reading: Reading,
    start_job: Callable[[dict[str, str]], JobHandle],
    now: Callable[[], datetime],
    log: Callable[[str], None],
    deadline: datetime | None = None,
    out: SupervisedRun | None = None,
    progress: Callable[[], float | None] | None = None,
    clock_plans: Mapping[str, ModePlan] | None = None,
    power_profile: PowerProfile | None = None,
    fingerprint: str = "",
    profile_dir: Path | None = None,
    figures: Sequence[ModeFigures] | None = None,
    first: Decision | None = None,
    slowdown: dict[str, float] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    pausable: bool | None = None,
    defer_pauses_over_s: float | None = None,
    mode_file: ModeFileChannel | None = None,
) -> SupervisedRun:
    """Run one job to its end (or, see ``defer_pauses_over_s``, to a long planned pause).

    ``figures``: the modes' power and speed (:meth:`scheduler.run_spec.RunSpec.mode_figures`),
    needed by the planner and giving the threshold rules' deadline guard its slowdowns (``slowdown``
    overrides them, mode -> time factor vs the clean mode). ``first``: the threshold rules' opening
    decision (:func:`scheduler.planner.deciders.first_decision`). ``progress()``: the job's fraction done
    (0-1) or None. ``out`` may carry the spans, windows and work of earlier windows (a resumed
    pausable job). ``pausable`` (default ``job.checkpointable``): whether the job may be stopped at
    planned pauses; ``sleep`` waits through a pause in this process, unless the next window is more
    than ``defer_pauses_over_s`` away: then the run returns with ``next_window`` set.

    ``clock_plans`` (:func:`scheduler.settings.clock_plans.load_plan_files`): the first mode's plan goes to
    the job in ``GRIDSHIFT_CLOCK_PLAN``, later modes' in the mode file (``mode_file`` must be built
    with the same plans). ``power_profile``: the stored profile that ``power_limit_select`` modes
    choose their limit from. ``mode_file``: the job's batch sizes and the mode file written at every
    mode change (default: the spec's batch sizes, no files); each span says who applied each setting
    and whether it was confirmed (:mod:`flows.job.span_settings`).
    """
    run = out if out is not None else SupervisedRun()
    channel = mode_file if mode_file is not None else ModeFileChannel(
        None, spec.batch_sizes(None), {m: p.path for m, p in (clock_plans or {}).items()})
    spans_before, windows_before = len(run.spans), len(run.windows)
    pausable = spec.job.checkpointable if pausable is None else pausable
    try:
        if first_reading.source not in run.sources:
            run.sources.append(first_reading.source)
        modes = ModeSpans(spec=spec, backend=backend, caps=caps, control=control, run=run, now=now, log=log,
                          reading=first_reading, clock_plans=clock_plans, power_profile=power_profile,
                          fingerprint=fingerprint, profile_dir=profile_dir, channel=channel)
        decider = make_decider(spec, list(figures or ()), deadline=deadline, pausable=pausable,
                               done_s=run.work_done_s, first=first, slowdown=slowdown)
        if decider.planned:  # the profile's measured limits are candidate modes of the planner
            modes.table.update({k: v for k, v in limit_modes(list(figures or ())).items() if k not in modes.table})
            run.extra["mode_figures"] = [{"mode": f.name, "power_w": f.power_w, "speed": f.speed, "source": f.source,
                                          "measured": f.measured} for f in figures or ()]
        return run_loop(spec, decider, modes, monitor=monitor, start_job=start_job, now=now, log=log,
                        deadline=deadline, progress=progress, figures=figures or (), sleep=sleep, pausable=pausable,
                        defer_pauses_over_s=defer_pauses_over_s)
    finally:
        # only this call's spans: a resumed window's earlier spans were labelled by their own call
        result, warning = channel.result()
        run.spans[spans_before:] = channel.label_spans(run.spans[spans_before:], result)
        run.windows[windows_before:] = channel.label_windows(run.windows[windows_before:], result)
        if result is not None:
            run.extra["job_result"] = result.model_dump(mode="json", exclude_none=True)
        if warning:
            run.warnings.append(warning)


def supervise(*, policy: Policy, **kwargs: Any) -> SupervisedRun:
    """:func:`run_job` for a caller holding a policy rather than a run specification (tests, scripts)."""
    return run_job(spec=resolve_run(policy), **kwargs)


def _read(monitor: CarbonMonitor, t: datetime, modes: ModeSpans) -> None:
    """A fresh reading into ``modes`` (and its source into the run); on failure keep the last one."""
    run = modes.run
    try:
        modes.reading = monitor.read(t)
        if modes.reading.source not in run.sources:
            run.sources.append(modes.reading.source)
    except Exception as exc:
        # Keep deciding on the last good reading's series (its forecast still covers the next
        # hours): the work done must still be counted and the deadline must still hold, or an
        # outage could make the job miss its deadline.
        run.warnings.append(f"{t:%H:%M:%S}: carbon signal unavailable ({exc}); deciding on the last reading")


def _next_start(plan: RunPlan, t: datetime) -> datetime | None:
    """The start of the plan's next run window after ``t`` (None: nothing planned after ``t``)."""
    return next((s.start for s in plan.segments if s.start > t), None)


def _segment_end(plan: RunPlan, t: datetime) -> datetime | None:
    """When the plan's segment at ``t`` ends (a switch, a pause or the planned finish)."""
    return next((s.end for s in plan.segments if s.start <= t < s.end), None)


def _segment_reason(plan: RunPlan, t: datetime) -> str:
    seg = next((s for s in plan.segments if s.start <= t < s.end), None)
    return (seg.reason if seg is not None and seg.reason else plan.reason)

def run_loop(spec: RunSpec, decider: Decider, modes: ModeSpans, *, monitor: CarbonMonitor,
             start_job: Callable[[dict[str, str]], JobHandle], now: Callable[[], datetime], log: Callable[[str], None],
             deadline: datetime | None, progress: Callable[[], float | None] | None, figures: Sequence[ModeFigures],
             sleep: Callable[[float], None], pausable: bool, defer_pauses_over_s: float | None) -> SupervisedRun:
    """The decision loop: one pass per run window (the job runs until it exits or a planned pause)."""
    run = modes.run
    decisions = 0

    def decide(t: datetime, running: str | None = None, since: datetime | None = None) -> RunPlan:
        nonlocal decisions
        decisions += 1
        plan = decider.decide(t, modes.reading.series, running=running, since=since, started_before=bool(run.windows))
        for note in decider.notes:
            log(f"warning: {note}")
            run.warnings.append(note)
        decider.notes.clear()
        _note_plan(plan, run, t=t, deadline=deadline, log=log, first=decisions == 1, planned=decider.planned)
        return plan

    while True:
        t = now()
        if run.windows or decisions:
            _read(monitor, t, modes)
        plan = decide(t)
        mode = plan.mode_at(t)
        if mode is None:  # a pause: wait for the next window here, or hand it to a scheduled run
            nxt = _next_start(plan, t)
            if nxt is not None:
                wait_s = (nxt - t).total_seconds()
                if defer_pauses_over_s is not None and wait_s > defer_pauses_over_s:
                    log(f"next window at {nxt:%Y-%m-%d %H:%M} UTC: handing it to a scheduled run")
                    run.next_window = nxt
                    run.work_done_s = decider.done_s
                    return run
                log(f"waiting {wait_s:.0f} s for the planned window at {nxt:%H:%M} UTC")
                sleep(max(min(wait_s, spec.interval_s), _MIN_WAIT_S))
                continue
            mode = plan.segments[0].mode if plan.segments else spec.clean_mode  # nothing later: run now
        if run.windows:
            decider.resumed()
        ended = _run_window(spec, decider, modes, plan, mode, decide=decide, monitor=monitor, start_job=start_job,
                            now=now, log=log, progress=progress, figures=figures, pausable=pausable)
        if decider.planned:
            run.work_done_s = decider.done_s
        if ended == "exit":
            if decider.planned:
                run.extra["replans"] = decisions
            return run


def _note_plan(plan: RunPlan, run: SupervisedRun, *, t: datetime, deadline: datetime | None,
               log: Callable[[str], None], first: bool, planned: bool) -> None:
    """Warnings a plan calls for (once each), and the run's first plan and reason for the report."""
    if not plan.feasible:
        note = (f"{t:%H:%M}: the deadline {deadline:%Y-%m-%d %H:%M} UTC cannot be met even at full speed; "
                f"running the fastest finish (planned end {plan.finish:%H:%M} UTC)") if deadline else ""
        if note and not any("cannot be met" in w for w in run.warnings):
            log(f"warning: {note}")
            run.warnings.append(note)
    if plan.rounding_exceeded and not any("work count" in w for w in run.warnings):
        note = (f"{t:%H:%M}: the planner's work count of the plan is off by {plan.rounding:.1%} of the work, "
                f"more than its {plan.max_rounding:.0%} bound; the plan may cost that much more than the optimum")
        log(f"warning: {note}")
        run.warnings.append(note)
    if planned and "plan" not in run.extra:  # a resumed window keeps the first window's plan
        run.extra["plan"] = _plan_json(plan)
        run.reason = plan.reason
    elif not planned and first:
        run.reason = plan.reason


def _run_window(spec: RunSpec, decider: Decider, modes: ModeSpans, plan: RunPlan, mode: str, *,
                decide: Callable[..., RunPlan], monitor: CarbonMonitor, start_job: Callable[[dict[str, str]], JobHandle],
                now: Callable[[], datetime], log: Callable[[str], None], progress: Callable[[], float | None] | None,
                figures: Sequence[ModeFigures], pausable: bool) -> str:
    """Start (or resume) the job and follow ``plan`` until the job ends ("exit") or a planned pause ("pause")."""
    run = modes.run
    interval_s = spec.interval_s
    resuming = bool(run.windows)
    env = modes.job_env(mode)
    if resuming:
        env[RESUME_ENV] = "1"
        log(f"resuming the job (window {len(run.windows) + 1}): {RESUME_ENV}=1")
    modes.enter(mode, _segment_reason(plan, now()))
    env.update(modes.delegate_env())
    window_start, spans_before, work_before = now(), len(run.spans), decider.done_s
    measured = False
    ended, rc = "exit", None
    handle: JobHandle | None = None
    try:
        handle = start_job(env)
        last_t = last_plan_t = window_start
        while True:
            t = now()
            until = [interval_s - (t - last_plan_t).total_seconds()]
            boundary = _segment_end(plan, t)
            if boundary is not None:
                until.append((boundary - t).total_seconds())
            rc = handle.wait(timeout_s=max(min(until), _MIN_WAIT_S))
            t = now()
            fraction = progress() if progress is not None else None
            measured = measured or fraction is not None
            decider.advance(modes.mode, (t - last_t).total_seconds(), fraction)
            last_t = t
            if rc is not None:
                break
            if (t - last_plan_t).total_seconds() >= interval_s - 1e-6:
                _read(monitor, t, modes)
                plan = decide(t, modes.mode, modes.since)
                last_plan_t = t
            want = plan.mode_at(t)
            if want is None and pausable and _next_start(plan, t) is not None:
                nxt = _next_start(plan, t)
                log(f"pausing until {nxt:%H:%M} UTC: {_segment_reason(plan, nxt)}")
                handle.kill()  # SIGTERM to the job's group, SIGKILL after job.stop_grace_s
                rc = handle.wait(timeout_s=0)
                ended = "pause" if rc in STOPPED_EXIT_CODES else "exit"
                if ended == "exit":
                    log(f"the job exited with {rc} when asked to checkpoint and stop")
                break
            if want is None:
                want = modes.mode  # the plan expected the job done by now: it runs on as it is
            if want != modes.mode:
                log(f"switching {modes.mode} -> {want}: {_segment_reason(plan, t)}")
                modes.switch(want, _segment_reason(plan, t))
    finally:
        if handle is not None:
            if rc is None:
                handle.kill()
            run.tail = handle.tail
        modes.close()
        if decider.planned:  # work windows are the planner's (threshold rules count no work to report)
            work_s = max(decider.done_s - work_before, 0.0)
            if measured and not modes.backend.measured:
                run.spans[spans_before:] = _on_the_models_clock(run.spans[spans_before:], work_s,
                                                                {f.name: f for f in figures})
            spans = run.spans[spans_before:]
            run.windows.append(RunWindow(start=window_start, end=now(), ended_by=ended, exit_code=rc,
                                         energy_j=sum(s.energy_j for s in spans), carbon_g=sum(s.carbon_g for s in spans),
                                         work_s=work_s, work_measured=measured))
    if ended == "exit":
        run.exit_code = rc
    return ended


def _on_the_models_clock(spans: list[ModeSpan], work_s: float, figures: Mapping[str, ModeFigures]) -> list[ModeSpan]:
    """A modelled GPU's spans with their energy over the modelled time of the work the job reported
    (``work_s`` reference seconds, each mode at its modelled speed), not over wall time.

    A simulated GPU integrates its modelled power over wall time, and wall time grows with the host's
    load: the same job measured 1094-2373 J on a busy machine. With progress reports the work done
    is known, so the model alone sets the figure; without them wall time is the only measure of work
    and the spans stay as metered.
    """
    if any(s.mode not in figures for s in spans):
        return spans  # a mode the planner had no figures for: no modelled speed to put it on
    paced_s = sum((s.end - s.start).total_seconds() * figures[s.mode].speed for s in spans)
    if paced_s <= 0 or work_s <= 0:  # nothing reported done yet: no evidence of the work, keep the meter's
        return spans
    k = work_s / paced_s  # modelled time / wall time, the same in every span of the window
    return [replace(s, energy_j=s.energy_j * k, carbon_g=s.carbon_g * k) for s in spans]


def _plan_json(plan: RunPlan) -> dict[str, Any]:
    return {"start": plan.start.isoformat(), "finish": plan.finish.isoformat(), "feasible": plan.feasible,
            "energy_j": plan.energy_j, "carbon_g": plan.carbon_g, "reasons": list(plan.reasons),
            "rounding": plan.rounding, "max_rounding": plan.max_rounding,
            "segments": [{"mode": s.mode, "start": s.start.isoformat(), "end": s.end.isoformat(),
                          "work_s": s.work_s} for s in plan.segments],
            "label": "modelled (the plan's forecast and mode figures)"}
