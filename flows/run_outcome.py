"""What a run came to: its status, its error in words, and its report (:class:`scheduler.report.RunReport`).

The flow (:mod:`flows.training`) calls :func:`run_report` after the settings were restored and
everything was closed, whatever happened before; the report is then recorded (ledger, artifact)
and the error it returns is raised, so the flow run fails after its report is kept.
"""

from __future__ import annotations

import signal
from datetime import datetime, timedelta
from typing import Any

from prefect.exceptions import TerminationSignal

from backends.base import Backend
from carbon.monitor import Reading
from carbon.series import IntensitySeries
from flows.job.process import JobFailed
from flows.supervise import SupervisedRun
from flows.job.windows import defer_next_window
from scheduler.planner.thresholds import Decision
from scheduler.report import RunReport, deadline_miss
from scheduler.run_spec import RunSpec
from scheduler.saving import run_saving

__all__ = ["describe_error", "intensity_at_start", "run_report"]

#: the series read at the start is kept this far around the run's hours (the chart's margins)
_KEEP_AROUND = timedelta(hours=1)
#: at most this many points of it (a 5-minute series over a day's window)
_MAX_POINTS = 400


def intensity_at_start(series: IntensitySeries, start: datetime, end: datetime) -> dict[str, Any]:
    """The series the run read at its start (the provider's history, then its forecast) over ``[start, end)``
    and an hour each side: what the first plan stood on, for the report's chart and the saving's baseline.
    Points are ``[start, duration s, g/kWh, forecast?]``."""
    points = series.window(start - _KEEP_AROUND, end + _KEEP_AROUND).points[:_MAX_POINTS]
    return {"points": [[p.start.isoformat(), p.duration.total_seconds(), p.g_per_kwh, p.forecast] for p in points],
            "kind": series.kind if points else "", "zone": series.zone}


def describe_error(exc: BaseException) -> str:
    """The run's error in one clause: a signal by name, a job's failure in its own words."""
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code > 128:  # from a signal handler
        try:
            return f"terminated by {signal.Signals(exc.code - 128).name}"
        except ValueError:
            pass
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT (Ctrl-C)"
    if isinstance(exc, TerminationSignal):  # Prefect's SIGTERM handler, active while a flow runs
        return f"terminated by {signal.Signals(exc.signal).name}"
    if isinstance(exc, JobFailed):  # its message says what happened
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def run_report(spec: RunSpec, run: SupervisedRun, *, reading: Reading, decision: Decision | None, backend: Backend,
            run_id: str, nominal: datetime, started: datetime, ended: datetime, deadline: datetime | None,
            errors: list[BaseException], restore_error: BaseException | None, warnings: list[str],
            report_extra: dict[str, Any] | None, logger: Any) -> tuple[dict[str, Any], BaseException | None]:
    """The run's report (status, error, figures, windows) and the error the flow raises after
    recording it (None: the run completed or paused)."""
    parts: list[str] = []
    # the job's own non-zero exit (re-raised by its task) is described below, with the trial's note first
    job_exit = bool(errors) and isinstance(errors[0], JobFailed) and run.exit_code not in (0, None)
    if errors and errors[0] is not restore_error and not job_exit:  # the run's own error (or a close's) comes first
        parts.append(describe_error(errors[0]))
    elif run.extra.get("batch_size_trial", {}).get("outcome") == "stopped":
        parts.append(run.extra["batch_size_trial"]["note"])
    elif run.exit_code not in (0, None):
        parts.append(str(JobFailed(run.exit_code, run.tail)))
    if restore_error is not None:
        parts.append(f"settings may not be restored: run `gridshift gpu restore` "
                     f"({type(restore_error).__name__}: {restore_error})")
    error = "; ".join(parts)
    paused = run.next_window is not None and not error
    status = "paused" if paused else "completed" if (run.exit_code == 0 and not error) else "failed"
    raised: BaseException | None = errors[0] if errors else None
    if raised is None and status not in ("completed", "paused"):
        raised = JobFailed(run.exit_code if run.exit_code is not None else 1, run.tail)
    warnings.extend(run.warnings)
    late_s, late_warning = deadline_miss(ended, deadline)
    if late_warning:
        logger.warning(late_warning)
        warnings.append(late_warning)
    energy_j = run.energy_j
    extra = {**(report_extra or {}), **run.extra}
    extra["reference_mode"] = spec.clean_mode
    if deadline is not None:
        extra["deadline"] = deadline.isoformat()
    horizon = [t for t in (ended, deadline, *(s.end for s in run.spans)) if t is not None]
    extra["intensity_at_start"] = intensity_at_start(reading.series, min(nominal, started), max(horizon))
    fused = [n for n in reading.notes if n.startswith("forecast:fused")]
    if fused:  # the forecast the plans stood on, and its record, in one sentence
        extra["forecast"] = fused[0]
    if raised is not None:  # so the CLI can map e.g. a GPU lost mid-run to its exit code
        extra["error_type"] = f"{type(raised).__module__}:{type(raised).__qualname__}"
    if paused:
        assert run.next_window is not None
        try:
            extra["next_window"] = defer_next_window(run, run_id=run_id, nominal=nominal)
            logger.info("paused: the next window is flow run %s, scheduled for %s UTC",
                        extra["next_window"]["flow_run_id"], f"{run.next_window:%Y-%m-%d %H:%M}")
        except Exception as exc:  # recorded as a failed run, so the work done so far is not lost silently
            status, error = "failed", f"could not schedule the next window: {type(exc).__name__}: {exc}"
            raised = exc
    report = RunReport(
        run_id=run_id, policy=str(spec.policy_path), job=spec.job.name, status=status, backend=backend.name,
        measured=backend.measured, nominal_start=nominal, started_at=started, ended_at=ended,
        deferred_s=(started - nominal).total_seconds(), duration_s=(ended - started).total_seconds(),
        energy_j=energy_j, carbon_g=run.carbon_g,
        intensity_g_per_kwh=(run.carbon_g / energy_j * 3.6e6) if energy_j > 0 else reading.current.g_per_kwh,
        intensity_kind=reading.current.kind, intensity_source=reading.current.source or reading.source,
        modes=tuple(run.spans), decision_reason=run.reason or (decision.reason if decision else ""),
        exit_code=run.exit_code, error=error, warnings=tuple(warnings), carbon_sources=tuple(run.sources), extra=extra,
        windows=tuple(run.windows), late_s=late_s,
    ).to_json()
    report["saving"] = run_saving(report).to_json()
    return report, raised
