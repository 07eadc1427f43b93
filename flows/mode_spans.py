"""A run's modes as spans: apply a mode's settings, announce it to the job, meter it until the next.

One :class:`ModeSpans` per supervised run (:func:`flows.supervise.run_job`), filling its
:class:`SupervisedRun` (the run record, here so that the spans and the loop share it without a circle): ``enter(mode, reason)``
applies the mode's settings through the backend (measure-only when control was refused), tells
the job through the mode file, and starts a metering window; ``close()`` ends it as a
:class:`scheduler.report.ModeSpan` with its energy and carbon; ``switch`` is both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

from backends.base import Backend
from backends.errors import NoPermission
from backends.types import Applied, Capabilities
from carbon.monitor import Reading
from flows.job.mode_file import ModeFileChannel
from flows.job.span_settings import hardware_settings
from plans.profile_store import PowerProfile
from scheduler.settings.auto_power import FINGERPRINT_ENV, GPU_MODEL_ENV, PROFILE_DIR_ENV, choose_power_limit
from scheduler.settings.clock_plans import CLOCK_PLAN_ENV, ModePlan
from scheduler.settings.resolve import resolve_settings
from scheduler.policy.types import Mode
from scheduler.report import ModeSpan, RunWindow, SpanSetting, joules_to_grams, settings_phrase
from scheduler.run_spec import RunSpec

__all__ = ["ModeSpans", "SupervisedRun"]


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


class ModeSpans:
    """Applies a mode's settings to the backend and meters each span; one per supervised run."""

    def __init__(self, *, spec: RunSpec, backend: Backend, caps: Capabilities, control: bool, run: SupervisedRun,
                 now: Callable[[], datetime], log: Callable[[str], None], reading: Reading,
                 clock_plans: Mapping[str, ModePlan] | None, power_profile: PowerProfile | None, fingerprint: str,
                 profile_dir: Path | None, channel: ModeFileChannel) -> None:
        self.spec, self.backend, self.caps, self.control, self.run = spec, backend, caps, control, run
        self.channel = channel
        self.table: dict[str, Mode] = dict(spec.modes)  # plus the measured limits a profile offers
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
        # the run's power headroom at a time (flows.cap_watch), recorded on each span; None: no cap
        self.cap_at: Callable[[datetime], float] | None = None
        self.cap_w: float | None = None

    def job_env(self, mode: str) -> dict[str, str]:
        """The environment a job started in ``mode`` gets (mode, batch size, clock plan, profiles)."""
        job_plan = self.plans.get(mode)
        env = {"GRIDSHIFT_MODE": mode, **self.channel.job_env(mode)}
        if job_plan is not None:
            env[CLOCK_PLAN_ENV] = str(job_plan.path)
            self.run.extra["clock_plan"] = job_plan.to_json()
        if self.spec.auto_power:
            # so the job's PowerLimitCallback saves its profile exactly where the next run looks
            env[FINGERPRINT_ENV] = self.fingerprint
            env[GPU_MODEL_ENV] = self.caps.devices[0].name if self.caps.devices else ""
            if self.profile_dir is not None:
                env[PROFILE_DIR_ENV] = str(self.profile_dir)
        return env

    def delegate_env(self) -> dict[str, str]:
        """Hand GPU control to the job when its in-process executor or PowerLimitCallback needs it."""
        any_auto_power = self.spec.auto_power
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
        if self.control and not self.applied_once and not self.spec.require_control:
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
        room = self.cap_at(self.since) if self.cap_at is not None else float("inf")
        self.cap_w = room if room != float("inf") else None

    def close(self) -> ModeSpan:
        run, reading = self.run, self.reading
        window = self.meter.end(f"{self.mode}@{len(run.spans)}")
        end = self.now()
        g = reading.series.mean_over(self.since, end) if end > self.since else reading.current.g_per_kwh
        if g is None:
            g = reading.current.g_per_kwh
        span = ModeSpan(mode=self.mode, start=self.since, end=end, reason=self.reason, settings=self.described,
                        energy_j=window.energy_j, g_per_kwh=g, carbon_g=joules_to_grams(window.energy_j, g),
                        settings_detail=self.detail, cap_w=self.cap_w,
                        power_w=window.energy_j / max((end - self.since).total_seconds(), 1e-9))
        run.spans.append(span)
        return span

    def switch(self, mode: str, reason: str) -> None:
        self.close()
        self.enter(mode, reason)
