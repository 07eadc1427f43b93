"""Run the job under the policy: apply a mode, meter it, re-decide every interval, record the spans.

Plain Python (no Prefect), so the control loop is testable with an injected clock. The flow in
:mod:`flows.training` calls :func:`supervise` inside one task.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Mapping

from backends.base import Backend
from backends.errors import NoPermission
from backends.types import Capabilities
from carbon.monitor import CarbonMonitor, Reading
from flows.job import JobHandle
from flows.mode_file import ModeFileChannel, mode_batch_sizes
from plans.profile_store import PowerProfile
from scheduler.auto_power import FINGERPRINT_ENV, GPU_MODEL_ENV, PROFILE_DIR_ENV, choose_power_limit
from scheduler.clock_plans import CLOCK_PLAN_ENV, ModePlan
from scheduler.decide import Decision, ModeState, decide
from scheduler.modes import resolve_settings
from scheduler.policy import Policy
from scheduler.report import ModeSpan, joules_to_grams

__all__ = ["PROGRESS_ENV", "SupervisedRun", "progress_file_reader", "supervise"]

#: the job may write its fraction done (0-1) to the file this variable names; the deadline guard uses it
PROGRESS_ENV = "GRIDSHIFT_PROGRESS_FILE"


def progress_file_reader(path: Path) -> Callable[[], float | None]:
    """A ``progress()`` for :func:`supervise`: the last number the job wrote to ``path``, or None."""

    def read() -> float | None:
        try:
            text = path.read_text(encoding="utf-8").strip().splitlines()
        except OSError:
            return None
        try:
            value = float(text[-1]) if text else None
        except ValueError:
            return None
        return None if value is None or not 0.0 <= value <= 1.0 else value

    return read


@dataclass
class SupervisedRun:
    spans: list[ModeSpan] = field(default_factory=list)
    exit_code: int | None = None
    tail: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def energy_j(self) -> float:
        return sum(s.energy_j for s in self.spans)

    @property
    def carbon_g(self) -> float:
        return sum(s.carbon_g for s in self.spans)


def supervise(
    *,
    policy: Policy,
    backend: Backend,
    caps: Capabilities,
    control: bool,
    monitor: CarbonMonitor,
    first: Decision,
    first_reading: Reading,
    start_job: Callable[[dict[str, str]], JobHandle],
    now: Callable[[], datetime],
    log: Callable[[str], None],
    deadline: datetime | None = None,
    out: SupervisedRun | None = None,
    slowdown: dict[str, float] | None = None,
    progress: Callable[[], float | None] | None = None,
    clock_plans: Mapping[str, ModePlan] | None = None,
    power_profile: PowerProfile | None = None,
    fingerprint: str = "",
    profile_dir: Path | None = None,
    mode_file: ModeFileChannel | None = None,
) -> SupervisedRun:
    """Run one job to the end. ``out`` is filled as the run goes, so a failure keeps what was measured.

    Progress is tracked in clean-mode seconds: time spent in a mode counts ``1 / slowdown[mode]``
    (default ``1 + max_slowdown``), so the deadline guard in :func:`decide` sees the work really
    left, and it keeps one control interval in hand because the next re-decision is that far away.
    When the job reports ``progress()`` (fraction done, 0-1), the work left comes from it instead,
    and each mode's slowdown is re-estimated from the progress it actually made, so a job that runs
    slower than modelled in the dirty mode is moved to the clean mode before it can miss the deadline.

    ``clock_plans`` (checked by :func:`scheduler.clock_plans.load_clock_plans`): the first mode's
    plan goes to the job in ``GRIDSHIFT_CLOCK_PLAN``, for its in-process executor. ``power_profile``:
    the stored profile that ``power_limit_select`` modes choose their limit from. ``mode_file``: the
    job's batch sizes and the mode file written at every mode change (default: the policy's batch
    sizes, no files); each span reports the batch size the job really had (:mod:`flows.mode_file`).
    """
    run = out if out is not None else SupervisedRun()
    meter = backend.meter()
    interval_s = policy.rules.interval_s
    reading = first_reading
    decision = first
    state = ModeState(mode=decision.mode, since=now())
    run.sources.append(reading.source)
    expected_s = policy.job.expected_duration_s
    factors = {m: (slowdown or {}).get(m, 1.0 + (policy.modes[m].max_slowdown or 0.0)) for m in policy.modes}
    factors[policy.rules.clean_mode] = 1.0
    guard = deadline - timedelta(seconds=interval_s) if deadline is not None else None
    done_work_s = 0.0
    last_t = now()
    last_fraction = 0.0
    observed: dict[str, list[float]] = {}  # mode -> [wall seconds, work seconds gained]

    channel = mode_file if mode_file is not None else ModeFileChannel(None, mode_batch_sizes(policy, None))
    plans = dict(clock_plans or {})
    job_plan = plans.get(decision.mode)

    def enter(mode: str, reason: str) -> tuple[str, datetime, str]:
        m = policy.modes[mode]
        # the batch size is the job's, not the hardware's: the span says what the job had (label_spans)
        settings = replace(resolve_settings(m, caps), batch_size=None)
        channel.announce(mode, reason, now())
        notes: list[str] = []
        if m.power_limit_select is not None:
            values = reading.series.values() if reading.series else []
            choice = choose_power_limit(m, caps, power_profile, reading.current.g_per_kwh,
                                        max_ci_g_per_kwh=max(values) if values else None, fingerprint=fingerprint)
            settings = replace(settings, power_limit_w=choice.power_limit_w)
            notes.append(choice.reason)
            run.extra.setdefault("power_limit_auto", {"mode": mode, "power_limit_w": choice.power_limit_w,
                                                      "reason": choice.reason, "profile_found": power_profile is not None})
            if choice.warning and choice.warning not in run.warnings:
                run.warnings.append(choice.warning)
        plan = plans.get(mode)
        if plan is not None and plan is job_plan:
            notes.append(plan.describe())
        elif plan is not None:  # the job learnt its plan at start; a subprocess's env cannot change
            notes.append(f"clock plan {plan.path.name} not applied: the job reads {CLOCK_PLAN_ENV} at start")
        elif job_plan is not None:
            notes.append(f"the job's clock plan {job_plan.path.name} (mode {job_plan.mode}) keeps running in-process")
        nonlocal control
        if control and not run.spans and not policy.backend.require_control:
            try:
                applied = backend.apply(settings)
                described = applied.describe()
            except NoPermission as exc:
                # another run claimed the GPU between the flow's probe and this first apply: nothing
                # was changed yet, so run measure-only rather than fail before the job
                control = False
                note = f"cannot change GPU settings ({exc}); running measure-only"
                log(f"warning: {note}")
                run.warnings.append(note)
                described = f"measure-only (would apply {settings.describe()})"
        elif control:
            applied = backend.apply(settings)
            described = applied.describe()
        else:
            described = f"measure-only (would apply {settings.describe()})"
        if notes:
            described += " [" + "; ".join(notes) + "]"
        log(f"mode {mode}: {described}")
        meter.begin(f"{mode}@{len(run.spans)}")
        return mode, now(), described

    def close_span(mode: str, since: datetime, described: str, reason: str) -> None:
        window = meter.end(f"{mode}@{len(run.spans)}")
        end = now()
        g = reading.series.mean_over(since, end) if end > since else reading.current.g_per_kwh
        if g is None:
            g = reading.current.g_per_kwh
        run.spans.append(ModeSpan(mode=mode, start=since, end=end, reason=reason, settings=described,
                                  energy_j=window.energy_j, g_per_kwh=g, carbon_g=joules_to_grams(window.energy_j, g)))

    mode_settings_env = {"GRIDSHIFT_MODE": decision.mode, **channel.job_env(decision.mode)}
    if job_plan is not None:
        mode_settings_env[CLOCK_PLAN_ENV] = str(job_plan.path)
        run.extra["clock_plan"] = job_plan.to_json()
    if any(m.power_limit_select is not None for m in policy.modes.values()):
        # so the job's PowerLimitCallback saves its profile exactly where the next run looks
        mode_settings_env[FINGERPRINT_ENV] = fingerprint
        mode_settings_env[GPU_MODEL_ENV] = caps.devices[0].name if caps.devices else ""
        if profile_dir is not None:
            mode_settings_env[PROFILE_DIR_ENV] = str(profile_dir)
    mode, since, described = enter(decision.mode, decision.reason)
    reason = decision.reason
    any_auto_power = any(m.power_limit_select is not None for m in policy.modes.values())
    delegate = getattr(backend, "delegate_control", None)  # backends whose journal can cover the job's changes
    if control and delegate is not None and (job_plan is not None or any_auto_power):
        # the job's in-process executor / PowerLimitCallback would otherwise find the GPU held by us
        mode_settings_env.update(delegate(power=any_auto_power, sm_clock=job_plan is not None))
    handle = start_job(mode_settings_env)
    try:
        while True:
            rc = handle.wait(timeout_s=interval_s)
            if rc is not None:
                run.exit_code = rc
                break
            t = now()
            try:
                reading = monitor.read(t)
                if reading.source not in run.sources:
                    run.sources.append(reading.source)
            except Exception as exc:
                # Keep deciding on the last good reading's series (its forecast still covers the next
                # hours): the work done must still be counted and the deadline guard must still be
                # able to force the clean mode, or an outage could make the job miss its deadline.
                run.warnings.append(f"{t:%H:%M:%S}: carbon signal unavailable ({exc}); deciding on the last reading")
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
            nxt = decide(policy, reading.series, state, now=t, remaining_work_s=remaining, deadline=guard,
                         slowdown=factors)
            if nxt.mode != mode:
                log(f"switching {mode} -> {nxt.mode}: {nxt.reason}")
                close_span(mode, since, described, reason)
                state = state.switch(nxt.mode, t)
                mode, since, described = enter(nxt.mode, nxt.reason)
                reason = nxt.reason
    finally:
        if run.exit_code is None:
            handle.kill()
        run.tail = handle.tail
        close_span(mode, since, described, reason)
        result, warning = channel.result()
        run.spans[:] = channel.label_spans(run.spans, result)
        if result is not None:
            run.extra["job_result"] = result.model_dump(mode="json", exclude_none=True)
        if warning:
            run.warnings.append(warning)
    return run
