"""Run the job under the policy: follow the planner's plan, re-plan every interval, record the spans.

Plain Python (no Prefect), so the control loop is testable with an injected clock. The flow in
:mod:`flows.training` calls :func:`supervise` inside one task.

With the planner (``rules.kind: plan``, the default) the loop is a receding horizon:

1. plan the work left from now (forecast, mode figures, objective, deadline; :mod:`scheduler.planner.inputs`);
2. run the plan's mode, until the next re-plan (every ``rules.interval_s``) or the plan's next
   mode change, whichever comes first; a span's reason is the plan's sentence for it;
3. measure the work done (the job's progress file, else wall time x mode speed) and the speed each
   mode really had (:class:`flows.job.progress.WorkTracker`), read the fresh forecast, and go to 1 with
   the mode running now (so the minimum dwell holds across re-plans).

The deadline guard is the plan's feasibility at the speeds seen. A pausable job
(``job.checkpointable``) is stopped with SIGTERM at a planned pause (``job.stop_grace_s`` to write
its checkpoint) and started again with ``GRIDSHIFT_RESUME=1`` in the next window: in this process
(a plain ``gridshift run``), or, when the caller passes ``defer_pauses_over_s`` (a deployment), by
returning with :attr:`SupervisedRun.next_window` set, so the next window is a Scheduled flow run of
its own and no worker waits through the pause. Threshold rules (``rules.kind: absolute|relative``)
keep their loop through :func:`scheduler.planner.thresholds.decide`, with the deadline guard at the modes' real
slowdowns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from backends.base import Backend
from backends.errors import NoPermission
from backends.types import Applied, Capabilities
from carbon.monitor import CarbonMonitor, Reading
from flows.job.process import JobHandle
from flows.job.mode_file import ModeFileChannel, mode_batch_sizes
from flows.job.progress import WorkTracker, progress_file_reader
from flows.job.span_settings import hardware_settings
from plans.profile_store import PowerProfile
from scheduler.settings.auto_power import FINGERPRINT_ENV, GPU_MODEL_ENV, PROFILE_DIR_ENV, choose_power_limit
from scheduler.settings.clock_plans import CLOCK_PLAN_ENV, ModePlan
from scheduler.planner.thresholds import Decision, ModeState, decide
from scheduler.settings.resolve import resolve_settings
from scheduler.planner.mode_figures import limit_modes
from scheduler.planner import ModeFigures, RunPlan
from scheduler.planner.inputs import plan_policy_job, plans_with_planner
from scheduler.policy.types import Mode, Policy
from scheduler.report import ModeSpan, RunWindow, SpanSetting, joules_to_grams, settings_phrase

__all__ = ["PROGRESS_ENV", "RESUME_ENV", "STOPPED_EXIT_CODES", "SupervisedRun", "progress_file_reader", "supervise"]

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


class _Modes:
    """Applies a mode's settings to the backend and meters each span; one per supervised run."""

    def __init__(self, *, policy: Policy, backend: Backend, caps: Capabilities, control: bool, run: SupervisedRun,
                 now: Callable[[], datetime], log: Callable[[str], None], reading: Reading,
                 clock_plans: Mapping[str, ModePlan] | None, power_profile: PowerProfile | None, fingerprint: str,
                 profile_dir: Path | None, channel: ModeFileChannel) -> None:
        self.policy, self.backend, self.caps, self.control, self.run = policy, backend, caps, control, run
        self.channel = channel
        self.table: dict[str, Mode] = dict(policy.modes)  # plus the measured limits a profile offers
        self.now, self.log, self.reading = now, log, reading
        self.plans = dict(clock_plans or {})
        self.power_profile, self.fingerprint, self.profile_dir = power_profile, fingerprint, profile_dir
        self.meter = backend.meter()
        self.applied_once = False
        self.mode = ""
        self.since = now()
        self.described = ""
        self.detail: tuple[SpanSetting, ...] = ()
        self.reason = ""

    def job_env(self, mode: str) -> dict[str, str]:
        """The environment a job started in ``mode`` gets (mode, batch size, clock plan, profiles)."""
        policy = self.policy
        job_plan = self.plans.get(mode)
        env = {"GRIDSHIFT_MODE": mode, **self.channel.job_env(mode)}
        if job_plan is not None:
            env[CLOCK_PLAN_ENV] = str(job_plan.path)
            self.run.extra["clock_plan"] = job_plan.to_json()
        any_auto_power = any(x.power_limit_select is not None for x in policy.modes.values())
        if any_auto_power:
            # so the job's PowerLimitCallback saves its profile exactly where the next run looks
            env[FINGERPRINT_ENV] = self.fingerprint
            env[GPU_MODEL_ENV] = self.caps.devices[0].name if self.caps.devices else ""
            if self.profile_dir is not None:
                env[PROFILE_DIR_ENV] = str(self.profile_dir)
        return env

    def delegate_env(self) -> dict[str, str]:
        """Hand GPU control to the job when its in-process executor or PowerLimitCallback needs it."""
        any_auto_power = any(x.power_limit_select is not None for x in self.policy.modes.values())
        delegate = getattr(self.backend, "delegate_control", None)  # backends whose journal can cover the job's changes
        # any mode's plan: the job swaps plans itself when the mode file announces a new mode
        if self.control and delegate is not None and (self.plans or any_auto_power):
            # the job's in-process executor / PowerLimitCallback would otherwise find the GPU held by us
            return dict(delegate(power=any_auto_power, sm_clock=bool(self.plans)))
        return {}

    def enter(self, mode: str, reason: str) -> None:
        m = self.table[mode]
        # the batch size is the job's, not the hardware's: the span says what the job had (label_spans)
        settings = replace(resolve_settings(m, self.caps), batch_size=None)
        self.channel.announce(mode, reason, self.now())
        notes: list[str] = []
        run, reading = self.run, self.reading
        if m.power_limit_select is not None:
            values = reading.series.values() if reading.series else []
            choice = choose_power_limit(m, self.caps, self.power_profile, reading.current.g_per_kwh,
                                        max_ci_g_per_kwh=max(values) if values else None, fingerprint=self.fingerprint)
            settings = replace(settings, power_limit_w=choice.power_limit_w)
            notes.append(choice.reason)
            run.extra.setdefault("power_limit_auto", {"mode": mode, "power_limit_w": choice.power_limit_w,
                                                      "reason": choice.reason, "profile_found": self.power_profile is not None})
            if choice.warning and choice.warning not in run.warnings:
                run.warnings.append(choice.warning)
        plan = self.plans.get(mode)
        if plan is not None:  # the job runs it (its result file confirms that, in label_spans)
            notes.append(plan.describe())
        applied: Applied | None = None
        if self.control and not self.applied_once and not self.policy.backend.require_control:
            try:
                applied = self.backend.apply(settings)
            except NoPermission as exc:
                # another run claimed the GPU between the flow's probe and this first apply: nothing
                # was changed yet, so run measure-only rather than fail before the job
                self.control = False
                note = f"cannot change GPU settings ({exc}); running measure-only"
                self.log(f"warning: {note}")
                run.warnings.append(note)
        elif self.control:
            applied = self.backend.apply(settings)
        self.applied_once = True
        self.detail = hardware_settings(settings, applied, not_applied="measure-only", measured=self.caps.measured)
        if self.detail:
            described = settings_phrase(self.detail)
        elif applied is not None:
            described = f"GPU settings as found ({applied.in_force.describe()})"
        else:
            described = "measure-only (GPU settings as found)"
        if notes:
            described += " [" + "; ".join(notes) + "]"
        self.log(f"mode {mode}: {described}")
        self.meter.begin(f"{mode}@{len(run.spans)}")
        self.mode, self.since, self.described, self.reason = mode, self.now(), described, reason

    def close(self) -> ModeSpan:
        run, reading = self.run, self.reading
        window = self.meter.end(f"{self.mode}@{len(run.spans)}")
        end = self.now()
        g = reading.series.mean_over(self.since, end) if end > self.since else reading.current.g_per_kwh
        if g is None:
            g = reading.current.g_per_kwh
        span = ModeSpan(mode=self.mode, start=self.since, end=end, reason=self.reason, settings=self.described,
                        energy_j=window.energy_j, g_per_kwh=g, carbon_g=joules_to_grams(window.energy_j, g),
                        settings_detail=self.detail)
        run.spans.append(span)
        return span

    def switch(self, mode: str, reason: str) -> None:
        self.close()
        self.enter(mode, reason)


def supervise(
    *,
    policy: Policy,
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

    ``figures``: the modes' power and speed (:func:`scheduler.planner.mode_figures.figures_for_policy`),
    needed by the planner and giving the threshold rules' deadline guard its slowdowns (``slowdown``
    overrides them, mode -> time factor vs the clean mode). ``first``: the threshold rules' first
    decision. ``progress()``: the job's fraction done (0-1) or None. ``out`` may carry the spans,
    windows and work of earlier windows (a resumed pausable job). ``pausable`` (default
    ``job.checkpointable``): whether the job may be stopped at planned pauses; ``sleep`` waits
    through a pause in this process, unless the next window is more than ``defer_pauses_over_s``
    away: then the run returns with ``next_window`` set, for the caller to schedule.

    ``clock_plans`` (checked by :func:`scheduler.settings.clock_plans.load_clock_plans`): the first mode's
    plan goes to the job in ``GRIDSHIFT_CLOCK_PLAN``, later modes' in the mode file (``mode_file``
    must be built with the same plans), for the job's :class:`plans.clock_runner.ClockPlanRunner`.
    ``power_profile``: the stored profile that ``power_limit_select`` modes choose their limit from.
    ``mode_file``: the job's batch sizes and the mode file written at every mode change (default:
    the policy's batch sizes, no files); each span says who applied each setting and whether it was
    confirmed (:mod:`flows.job.span_settings`).
    """
    run = out if out is not None else SupervisedRun()
    channel = mode_file if mode_file is not None else ModeFileChannel(
        None, mode_batch_sizes(policy, None), {m: p.path for m, p in (clock_plans or {}).items()})
    spans_before = len(run.spans)
    try:
        if first_reading.source not in run.sources:
            run.sources.append(first_reading.source)
        modes = _Modes(policy=policy, backend=backend, caps=caps, control=control, run=run, now=now, log=log,
                       reading=first_reading, clock_plans=clock_plans, power_profile=power_profile,
                       fingerprint=fingerprint, profile_dir=profile_dir, channel=channel)
        if plans_with_planner(policy):
            if not figures:
                raise ValueError("the planner needs the modes' figures (scheduler.planner.inputs.policy_figures)")
            modes.table.update({k: v for k, v in limit_modes(list(figures)).items() if k not in modes.table})
            return _follow_plans(policy, modes, monitor=monitor, start_job=start_job, now=now, log=log, deadline=deadline,
                                 progress=progress, figures=figures, sleep=sleep,
                                 pausable=policy.job.checkpointable if pausable is None else pausable,
                                 defer_pauses_over_s=defer_pauses_over_s)
        factors = dict(slowdown) if slowdown else {}
        for f in figures or ():
            factors.setdefault(f.name, 1.0 / f.speed)
        if first is None:
            first = decide(policy, first_reading.series, now=now(), start_at=now(),
                           remaining_work_s=policy.job.expected_duration_s, deadline=deadline, slowdown=factors or None)
        return _follow_thresholds(policy, modes, monitor=monitor, first=first, start_job=start_job, now=now, log=log,
                                  deadline=deadline, slowdown=factors, progress=progress)
    finally:
        # only this call's spans: a resumed window's earlier spans were labelled by their own call
        result, warning = channel.result()
        run.spans[spans_before:] = channel.label_spans(run.spans[spans_before:], result)
        if result is not None:
            run.extra["job_result"] = result.model_dump(mode="json", exclude_none=True)
        if warning:
            run.warnings.append(warning)


def _read(monitor: CarbonMonitor, t: datetime, modes: _Modes) -> None:
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


def _follow_plans(policy: Policy, modes: _Modes, *, monitor: CarbonMonitor, start_job: Callable[[dict[str, str]], JobHandle],
                  now: Callable[[], datetime], log: Callable[[str], None], deadline: datetime | None,
                  progress: Callable[[], float | None] | None, figures: Sequence[ModeFigures],
                  sleep: Callable[[float], None], pausable: bool, defer_pauses_over_s: float | None) -> SupervisedRun:
    run = modes.run
    interval_s = policy.rules.interval_s
    order = [f.name for f in figures]
    tracker = WorkTracker(total_s=policy.job.expected_duration_s, figures={f.name: f for f in figures},
                          done_s=run.work_done_s, min_watch_s=interval_s)
    run.extra["mode_figures"] = [{"mode": f.name, "power_w": f.power_w, "speed": f.speed, "source": f.source,
                                  "measured": f.measured} for f in figures]
    replans = 0

    def replan(t: datetime, running: str | None = None, since: datetime | None = None) -> RunPlan:
        nonlocal replans
        replans += 1
        # the flow run's start has come (deploy/serve chose it, or the user ran it now): a job that
        # cannot pause starts at once, and the plan chooses its modes
        start_now = not run.windows and not pausable
        # a pace reserve in place of the margin holds only for a run that measures its pace: a job
        # that said it reports progress and has not within an interval keeps the margin as time
        measured = tracker.reported or tracker.watched_s < interval_s
        if policy.job.reports_progress and not measured and not any("no progress" in w for w in run.warnings):
            note = (f"{t:%H:%M}: job.reports_progress is set but the job has reported no progress in "
                    f"{tracker.watched_s:.0f} s; the deadline margin is kept as time from now on")
            log(f"warning: {note}")
            run.warnings.append(note)
        plan = plan_policy_job(policy, modes.reading.series, tracker.planning_figures(order), now=t,
                               work_s=tracker.left_s, not_before=t, deadline=deadline, pausable=pausable,
                               running_mode=running, running_since=since, start_now=start_now,
                               resuming=bool(run.windows) and running is None, pace_measured=measured)
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
        if "plan" not in run.extra:
            run.extra["plan"] = _plan_json(plan)
            run.reason = plan.reason
        return plan

    while True:  # one pass per run window
        t = now()
        if run.windows or replans:
            _read(monitor, t, modes)
        plan = replan(t)
        mode = plan.mode_at(t)
        if mode is None:
            nxt = _next_start(plan, t)
            if nxt is not None:
                wait_s = (nxt - t).total_seconds()
                if defer_pauses_over_s is not None and wait_s > defer_pauses_over_s:
                    log(f"next window at {nxt:%Y-%m-%d %H:%M} UTC: handing it to a scheduled run")
                    run.next_window = nxt
                    run.work_done_s = tracker.done_s
                    return run
                log(f"waiting {wait_s:.0f} s for the planned window at {nxt:%H:%M} UTC")
                sleep(max(min(wait_s, interval_s), _MIN_WAIT_S))
                continue
            mode = plan.segments[0].mode if plan.segments else policy.rules.clean_mode  # nothing later: run now
        resuming = bool(run.windows)
        if resuming:
            tracker.resumed(policy.job.resume_overhead_s)
        ended = _run_window(policy, modes, plan, mode, resuming=resuming, tracker=tracker, replan=replan,
                            monitor=monitor, start_job=start_job, now=now, log=log, progress=progress, pausable=pausable)
        run.work_done_s = tracker.done_s
        if ended == "exit":
            run.extra["replans"] = replans
            return run


def _run_window(policy: Policy, modes: _Modes, plan: RunPlan, mode: str, *, resuming: bool, tracker: WorkTracker,
                replan: Callable[..., RunPlan], monitor: CarbonMonitor, start_job: Callable[[dict[str, str]], JobHandle],
                now: Callable[[], datetime], log: Callable[[str], None],
                progress: Callable[[], float | None] | None, pausable: bool) -> str:
    """Start (or resume) the job and follow ``plan`` until the job ends ("exit") or a planned pause ("pause")."""
    run = modes.run
    interval_s = policy.rules.interval_s
    env = modes.job_env(mode)
    if resuming:
        env[RESUME_ENV] = "1"
        log(f"resuming the job (window {len(run.windows) + 1}): {RESUME_ENV}=1")
    modes.enter(mode, _segment_reason(plan, now()))
    env.update(modes.delegate_env())
    window_start, spans_before, work_before = now(), len(run.spans), tracker.done_s
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
            tracker.advance(modes.mode, (t - last_t).total_seconds(), fraction)
            last_t = t
            if rc is not None:
                break
            if (t - last_plan_t).total_seconds() >= interval_s - 1e-6:
                _read(monitor, t, modes)
                plan = replan(t, modes.mode, modes.since)
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
        work_s = max(tracker.done_s - work_before, 0.0)
        if measured and not modes.backend.measured:
            run.spans[spans_before:] = _on_the_models_clock(run.spans[spans_before:], work_s, tracker.figures)
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


def _follow_thresholds(policy: Policy, modes: _Modes, *, monitor: CarbonMonitor, first: Decision,
                       start_job: Callable[[dict[str, str]], JobHandle], now: Callable[[], datetime],
                       log: Callable[[str], None], deadline: datetime | None, slowdown: dict[str, float],
                       progress: Callable[[], float | None] | None) -> SupervisedRun:
    """The threshold rules' loop: re-decide every interval with :func:`scheduler.planner.thresholds.decide`.

    Progress is tracked in clean-mode seconds: time spent in a mode counts ``1 / slowdown[mode]``
    (default: the mode figures' speed, else ``1 + max_slowdown``), so the deadline guard in
    :func:`decide` sees the work really left, and it keeps one control interval in hand because the
    next re-decision is that far away. When the job reports ``progress()`` (fraction done, 0-1), the
    work left comes from it instead, and each mode's slowdown is re-estimated from the progress it
    actually made, so a job that runs slower than modelled in the dirty mode is moved to the clean
    mode before it can miss the deadline.
    """
    run = modes.run
    interval_s = policy.rules.interval_s
    decision = first
    state = ModeState(mode=decision.mode, since=now())
    expected_s = policy.job.expected_duration_s
    factors = {m: slowdown.get(m, 1.0 + (policy.modes[m].max_slowdown or 0.0)) for m in policy.modes}
    factors[policy.rules.clean_mode] = 1.0
    guard = deadline - timedelta(seconds=interval_s) if deadline is not None else None
    done_work_s = 0.0
    last_t = now()
    last_fraction = 0.0
    observed: dict[str, list[float]] = {}  # mode -> [wall seconds, work seconds gained]
    run.reason = decision.reason

    env = modes.job_env(decision.mode)
    modes.enter(decision.mode, decision.reason)
    env.update(modes.delegate_env())
    handle = start_job(env)
    try:
        while True:
            rc = handle.wait(timeout_s=interval_s)
            if rc is not None:
                run.exit_code = rc
                break
            t = now()
            _read(monitor, t, modes)
            mode = modes.mode
            step_s = (t - last_t).total_seconds()
            done_work_s += step_s / factors.get(mode, 1.0)
            last_t = t
            remaining = max(expected_s - done_work_s, 0.0)
            fraction = progress() if progress is not None else None
            if fraction is not None:
                gained_s = (fraction - last_fraction) * expected_s
                seen = observed.setdefault(mode, [0.0, 0.0])
                seen[0] += step_s
                seen[1] += max(gained_s, 0.0)
                last_fraction = fraction
                clean_rate = observed.get(policy.rules.clean_mode, [0.0, 0.0])
                # the clean mode's observed wall seconds per expected second (1.0 until it has been seen)
                base = clean_rate[0] / clean_rate[1] if clean_rate[1] > 0 and clean_rate[0] >= interval_s else 1.0
                # the work left in clean-mode seconds at the pace actually seen, the same unit as the
                # factors below (which are relative to that pace), so a job slower than expected_s
                # everywhere is not taken for one with time to spare
                remaining = max(expected_s * (1.0 - fraction), 0.0) * base
                for m, (wall_s, work_s) in observed.items():
                    if m != policy.rules.clean_mode and wall_s >= interval_s and work_s > 0:
                        factors[m] = max(wall_s / work_s / base, 1.0)
            nxt = decide(policy, modes.reading.series, state, now=t, remaining_work_s=remaining, deadline=guard,
                         slowdown=factors)
            if nxt.mode != mode:
                log(f"switching {mode} -> {nxt.mode}: {nxt.reason}")
                state = state.switch(nxt.mode, t)
                modes.switch(nxt.mode, nxt.reason)
    finally:
        if run.exit_code is None:
            handle.kill()
        run.tail = handle.tail
        modes.close()
    return run
