"""Run the job under its run specification: the product's side of the one run loop.

Plain Python (no Prefect), so the loop is testable with an injected clock. The flow in
:mod:`flows.training` calls :func:`run_job` inside one task. The loop itself, which decides,
re-plans, paces and pauses, is :func:`scheduler.loop.loop.run_loop` (the simulator runs the same
one on a trace); this module is its :class:`scheduler.loop.loop.RunDriver` for a real job:

1. the signal is the carbon monitor's reading, with the prices published by then when the policy has a
   price source (a failed read keeps the last one);
2. the decider (:mod:`scheduler.planner.deciders`) answers "which mode now, and until when?" as a
   :class:`scheduler.planner.RunPlan`, for the planner and threshold rules alike, on the forecast the
   do-no-harm gate chose (``choice``);
3. a mode is applied through the backend and told to the job (:class:`flows.mode_spans.ModeSpans`);
4. the job runs in its process until the next re-decision (every ``rules.interval_s``) or the plan's
   next mode change; its progress comes from its progress file, else wall time x mode speed, and
   each span's energy from the meter;
5. at a planned pause a pausable job gets SIGTERM (``job.stop_grace_s`` to write its checkpoint) and
   starts again with ``GRIDSHIFT_RESUME=1`` in the next window: in this process (a plain ``gridshift
   run``), or, when the caller passes ``defer_pauses_over_s`` (a deployment), by returning with
   :attr:`SupervisedRun.next_window` set, so the next window is a Scheduled flow run of its own and no
   worker waits through the pause.

A planner's plans are reported (the first plan, the work windows, the replans); a threshold
decision predicts nothing and only its reasons are. With a price source the report says what the
run's energy cost at the prices of its hours (``extra.cost``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from backends.base import Backend
from backends.types import Capabilities
from carbon.monitor import CarbonMonitor, Reading
from carbon.prices import PriceReader
from flows.cap_watch import CapWatch, cap_summary
from flows.job.process import JobHandle
from flows.job.mode_file import ModeFileChannel
from flows.mode_spans import ModeSpans, SupervisedRun
from flows.job.progress import progress_file_reader
from plans.profile_store import PowerProfile
from scheduler.loop.gate import ForecastChoice
from scheduler.loop.loop import STOPPED_EXIT_CODES, SignalReading, run_loop
from flows.sources import price_reader_for, read_price_signal, run_cost, signal_reading
from scheduler.settings.clock_plans import ModePlan
from scheduler.planner.deciders import make_decider
from scheduler.planner.thresholds import Decision
from scheduler.planner.mode_figures import limit_modes
from scheduler.planner import ModeFigures, RunPlan
from scheduler.planner.power_cap import PowerCap
from scheduler.policy.types import Policy
from scheduler.report import ModeSpan, RunWindow
from scheduler.run_spec import RunSpec, resolve_run

__all__ = ["PROGRESS_ENV", "RESUME_ENV", "STOPPED_EXIT_CODES", "SupervisedRun", "progress_file_reader", "run_job",
           "supervise"]

#: the job may write its fraction done (0-1) to the file this variable names; re-planning uses it
PROGRESS_ENV = "GRIDSHIFT_PROGRESS_FILE"
#: set to "1" when a pausable job is started again after a planned pause: resume from the checkpoint
RESUME_ENV = "GRIDSHIFT_RESUME"


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
    choice: ForecastChoice = ForecastChoice(),
    prices: PriceReader | None = None,
    cap_watch: CapWatch | None = None,
    cap_figures: Sequence[ModeFigures] = (),
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
    and whether it was confirmed (:mod:`flows.job.span_settings`). ``choice``: the forecast the
    planner plans on (:func:`scheduler.loop.gate.choose_forecast`; default: the monitor's own).
    ``prices``: the price chain (default: the spec's price source, read and closed here).
    ``cap_watch``: the run's power cap and the grid events it hears (:mod:`flows.cap_watch`): a change
    re-plans at once, within the watch's poll; ``cap_figures``: the power limits the planner may set
    under a cap (:meth:`scheduler.run_spec.RunSpec.cap_figures`).
    """
    run = out if out is not None else SupervisedRun()
    channel = mode_file if mode_file is not None else ModeFileChannel(
        None, spec.batch_sizes(None), {m: p.path for m, p in (clock_plans or {}).items()})
    spans_before, windows_before = len(run.spans), len(run.windows)
    pausable = spec.job.checkpointable if pausable is None else pausable
    own_prices = prices is None
    prices = price_reader_for(spec.price) if prices is None else prices
    try:
        if first_reading.source not in run.sources:
            run.sources.append(first_reading.source)
        modes = ModeSpans(spec=spec, backend=backend, caps=caps, control=control, run=run, now=now, log=log,
                          reading=first_reading, clock_plans=clock_plans, power_profile=power_profile,
                          fingerprint=fingerprint, profile_dir=profile_dir, channel=channel)
        decider = make_decider(spec, list(figures or ()), deadline=deadline, pausable=pausable,
                               done_s=run.work_done_s, first=first, slowdown=slowdown, cap_figures=cap_figures)
        if decider.planned:  # the profile's measured limits and the cap's power limits are candidate modes
            modes.table.update({k: v for k, v in limit_modes([*(figures or ()), *cap_figures]).items()
                                if k not in modes.table})
            run.extra["mode_figures"] = [{"mode": f.name, "power_w": f.power_w, "speed": f.speed, "source": f.source,
                                          "measured": f.measured} for f in figures or ()]
        if choice.reason and decider.planned:
            run.extra["forecast_choice"] = {"label": choice.label, "reason": choice.reason}
            log(f"forecast: {choice.reason}")
        driver = _JobDriver(spec, modes, monitor=monitor, start_job=start_job, now=now, log=log, sleep=sleep,
                            progress=progress, figures=[*(figures or ()), *cap_figures], deadline=deadline,
                            planned=decider.planned, first_read=not run.windows, prices=prices, watch=cap_watch)
        outcome = run_loop(decider, driver, interval_s=spec.interval_s, pausable=pausable,
                           defer_pauses_over_s=defer_pauses_over_s, choice=choice, windows_before=len(run.windows),
                           clean_mode=spec.clean_mode)
        if decider.planned:
            run.work_done_s = outcome.work_done_s
        if outcome.ended == "deferred":
            run.next_window = outcome.next_window
        else:
            run.exit_code = outcome.exit_code
            if decider.planned:
                run.extra["replans"] = outcome.decisions
        return run
    finally:
        # only this call's spans: a resumed window's earlier spans were labelled by their own call
        result, warning = channel.result()
        run.spans[spans_before:] = channel.label_spans(run.spans[spans_before:], result)
        run.windows[windows_before:] = channel.label_windows(run.windows[windows_before:], result)
        if result is not None:
            run.extra["job_result"] = result.model_dump(mode="json", exclude_none=True)
        if warning:
            run.warnings.append(warning)
        if prices is not None:
            cost = run_cost(run.spans, prices, now(), currency=spec.objective.currency, measured=backend.measured)
            if cost is not None:
                run.extra["cost"] = cost
            if own_prices:
                prices.close()
        if (capped := cap_summary(run.spans, cap_watch)) is not None:
            run.extra["power_cap"] = capped


def supervise(*, policy: Policy, **kwargs: Any) -> SupervisedRun:
    """:func:`run_job` for a caller holding a policy rather than a run specification (tests, scripts)."""
    return run_job(spec=resolve_run(policy), **kwargs)


class _JobDriver:
    """The run loop's :class:`scheduler.loop.loop.RunDriver` for a real job: process, backend, meter, monitor."""

    def __init__(self, spec: RunSpec, modes: ModeSpans, *, monitor: CarbonMonitor,
                 start_job: Callable[[dict[str, str]], JobHandle], now: Callable[[], datetime], log: Callable[[str], None],
                 sleep: Callable[[float], None], progress: Callable[[], float | None] | None,
                 figures: Sequence[ModeFigures], deadline: datetime | None, planned: bool, first_read: bool,
                 prices: PriceReader | None = None, watch: CapWatch | None = None) -> None:
        self.spec, self.modes, self.run, self.monitor = spec, modes, modes.run, monitor
        self.prices, self._price, self._prices_down = prices, None, False
        self._start_job, self.now, self.log, self.sleep, self._progress = start_job, now, log, sleep, progress
        self.figures, self.deadline, self.planned = {f.name: f for f in figures}, deadline, planned
        self._unread = first_read  # the flow read the signal just before the first decision: use that reading
        self.handle: JobHandle | None = None
        self._entered = False
        self._window_start = now()
        self._spans_before = 0
        self.watch = watch
        if watch is not None:
            watch.power_now = lambda: self.figures[self.modes.mode].power_w if self.modes.mode in self.figures else 0.0
            watch.warn = self.warn
            modes.cap_at = lambda t: watch.cap(t).at(t)

    def read(self, t: datetime) -> SignalReading | None:
        if self._unread:
            self._unread = False
            return replace(signal_reading(self.modes.reading), price=self._read_prices(t))
        try:
            self.modes.reading = self.monitor.read(t)
        except Exception as exc:
            # Keep deciding on the last good reading's series (its forecast still covers the next
            # hours): the work done must still be counted and the deadline must still hold, or an
            # outage could make the job miss its deadline.
            self.run.warnings.append(f"{t:%H:%M:%S}: carbon signal unavailable ({exc}); deciding on the last reading")
            return None
        if self.modes.reading.source not in self.run.sources:
            self.run.sources.append(self.modes.reading.source)
        return replace(signal_reading(self.modes.reading), price=self._read_prices(t))

    def _read_prices(self, t: datetime) -> Any:
        """The prices published by ``t`` (a failed read keeps the last ones read, and says so once per outage)."""
        if self.prices is None:
            return None
        try:
            self._price, _, failures = read_price_signal(self.prices, t)
        except Exception as exc:  # CarbonError, or a source that cannot be built: prices must not fail the run
            if not self._prices_down:
                self.run.warnings.append(f"{t:%H:%M:%S}: prices unavailable ({exc}); deciding on the last prices read")
            self._prices_down = True
            return self._price
        self._prices_down = False
        for failure in failures:
            if f"price: {failure}" not in self.run.warnings:
                self.run.warnings.append(f"price: {failure}")
        return self._price

    def start(self, mode: str, reason: str, *, resuming: bool) -> None:
        env = self.modes.job_env(mode)
        if resuming:
            env[RESUME_ENV] = "1"
            self.log(f"resuming the job (window {len(self.run.windows) + 1}): {RESUME_ENV}=1")
        self._window_start, self._spans_before = self.now(), len(self.run.spans)
        self.modes.enter(mode, reason)
        self._entered = True
        env.update(self.modes.delegate_env())
        self.handle = self._start_job(env)

    def switch(self, mode: str, reason: str) -> None:
        self.modes.switch(mode, reason)

    def wait(self, timeout_s: float) -> int | None:
        assert self.handle is not None
        if self.watch is None:
            return self.handle.wait(timeout_s=timeout_s)
        # in steps of the watch's poll, so a grid event wakes the loop within one
        end = self.now().timestamp() + timeout_s
        while True:
            left = end - self.now().timestamp()
            rc = self.handle.wait(timeout_s=max(min(self.watch.poll_s, left), 0.0))
            if rc is not None or left <= self.watch.poll_s or self.watch.poll():
                return rc

    def power_cap(self, t: datetime) -> PowerCap:
        return self.watch.cap(t) if self.watch is not None else PowerCap()

    def progress(self) -> float | None:
        return self._progress() if self._progress is not None else None

    def stop(self) -> int | None:
        assert self.handle is not None
        self.handle.kill()  # SIGTERM to the job's group, SIGKILL after job.stop_grace_s
        return self.handle.wait(timeout_s=0)

    def window_ended(self, *, ended_by: str, exit_code: int | None, work_s: float, measured: bool) -> None:
        run = self.run
        if self.handle is not None:
            if exit_code is None:
                self.handle.kill()
            run.tail = self.handle.tail
            self.handle = None
        if not self._entered:
            return
        self._entered = False
        self.modes.close()
        if self.planned:  # work windows are the planner's (threshold rules count no work to report)
            before = self._spans_before
            if measured and not self.modes.backend.measured:
                run.spans[before:] = _on_the_models_clock(run.spans[before:], work_s, self.figures)
            spans = run.spans[before:]
            run.windows.append(RunWindow(start=self._window_start, end=self.now(), ended_by=ended_by,  # type: ignore[arg-type]
                                         exit_code=exit_code, energy_j=sum(s.energy_j for s in spans),
                                         carbon_g=sum(s.carbon_g for s in spans), work_s=work_s, work_measured=measured))

    def decided(self, plan: RunPlan, t: datetime, *, first: bool) -> None:
        _note_plan(plan, self.run, t=t, deadline=self.deadline, log=self.log, first=first, planned=self.planned)

    def warn(self, note: str) -> None:
        self.log(f"warning: {note}")
        self.run.warnings.append(note)


def _note_plan(plan: RunPlan, run: SupervisedRun, *, t: datetime, deadline: datetime | None,
               log: Callable[[str], None], first: bool, planned: bool) -> None:
    """Warnings a plan calls for (once each), and the run's first plan and reason for the report."""
    capped = next((r for r in plan.reasons if r.startswith("power cap: ")), None)
    if not plan.feasible and capped is not None and deadline is not None:
        cap = capped.removeprefix("power cap: ").split("; no slot")[0]
        note = (f"{t:%H:%M}: the deadline {deadline:%Y-%m-%d %H:%M} UTC cannot be met under the power cap ({cap}); "
                f"running the fastest plan the cap allows (planned end {plan.finish:%H:%M} UTC, "
                f"{max((plan.finish - deadline).total_seconds(), 0) / 60:.0f} min late)")
        if not any("cannot be met under the power cap" in w for w in run.warnings):
            log(f"warning: {note}")
            run.warnings.append(note)
    elif not plan.feasible:
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
