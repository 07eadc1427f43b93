"""The Prefect flow that runs one training job under a policy. Wiring only.

Tasks: wait until start -> read intensity -> decide -> apply mode & run job (re-deciding every
interval, metering each mode span) -> restore settings (always) -> record the report (ledger +
artifact). A failed job fails the flow run, after its report is recorded.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from backends.base import Backend
from backends.errors import NoPermission
from backends.safety import install_restore_handlers
from backends.registry import create_backend
from carbon.monitor import CarbonMonitor, Reading
from carbon.series import as_utc
from flows.report.human import took
from flows.run.artifacts import artifact_key, report_markdown
from flows.run_outcome import run_report
from flows.deployments.flow_parameters import JsonParametersFlow
from flows.job.process import JobFailed, JobHandle, start_callable, start_command
from flows.job.mode_file import ModeFileChannel
from flows.run.run_ids import new_run_id
from flows.sources import forecast_choice, monitor_for
from flows.cap_watch import cap_watch_for
from flows.supervise import PROGRESS_ENV, SupervisedRun, progress_file_reader, run_job
from flows.job.trials import CostWatchedJob, begin_trial
from flows.job.windows import CHECKPOINT_DIR_ENV, DEFER_MIN_S, checkpoint_dir, flow_run_deployment, resumed_run
from plans.errors import BadProfile
from plans.profile_store import PowerProfile, ProfileStore
from scheduler.loop.gate import ForecastChoice
from scheduler.settings.auto_power import profiles_dir
from scheduler.settings.clock_plans import ModePlan, load_plan_files
from scheduler.planner.deciders import first_decision
from scheduler.planner.thresholds import Decision
from scheduler.errors import LedgerError
from scheduler.store.ledger import Ledger
from scheduler.planner import ModeFigures
from scheduler.policy.types import AbsoluteRule, Mode, PlanRule, RelativeRule
from scheduler.policy.loader import load_policy
from scheduler.run_spec import RunSpec, resolve_run

__all__ = ["carbon_aware_training", "new_run_id", "quiet_domain_tracebacks"]


class _DropDomainTracebacks(logging.Filter):
    """Prefect logs every flow/task exception with its traceback. For expected failures (a job that
    exits non-zero, a provider outage, a missing privilege) the one-line message says it all."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and _is_domain_error(record.exc_info[1]):
            record.exc_info = None
            record.exc_text = None
        return True


def _is_domain_error(exc: BaseException) -> bool:
    from backends.errors import BackendError
    from carbon.errors import CarbonError
    from scheduler.errors import SchedulerError

    return isinstance(exc, (JobFailed, BackendError, CarbonError, SchedulerError))


def quiet_domain_tracebacks() -> None:
    """Install the filter on Prefect's run loggers (idempotent)."""
    for name in ("prefect.flow_runs", "prefect.task_runs", "prefect.engine"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropDomainTracebacks) for f in logger.filters):
            logger.addFilter(_DropDomainTracebacks())


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@task(name="read intensity", cache_policy=NO_CACHE)
def read_intensity(monitor: CarbonMonitor, now: datetime) -> Reading:
    return monitor.read(now)


@task(name="decide", cache_policy=NO_CACHE)
def decide_mode(rule: AbsoluteRule | RelativeRule, modes: Mapping[str, Mode], expected_s: float, reading: Reading,
                now: datetime, deadline: datetime | None) -> Decision:
    return first_decision(rule, modes, reading.series, expected_s=expected_s, now=now, deadline=deadline)


@task(name="wait until start", cache_policy=NO_CACHE)
def wait_until(start_at: datetime, now: Callable[[], datetime] = _utcnow, sleep: Callable[[float], None] = time.sleep) -> float:
    logger = get_run_logger()
    waited = 0.0
    while (left := (start_at - now()).total_seconds()) > 0:
        logger.info("waiting for the start at %s UTC: %s left", f"{start_at:%Y-%m-%d %H:%M}", took(left))
        step = min(left, 60.0)
        sleep(step)
        waited += step
    return waited


@task(name="run job under policy", cache_policy=NO_CACHE)
def run_supervised(spec: RunSpec, backend: Backend, control: bool, monitor: CarbonMonitor, decision: Decision | None,
                   reading: Reading, deadline: datetime | None, out: SupervisedRun, prepared: "_Prepared", run_id: str,
                   defer_pauses_over_s: float | None, ledger_path: str | None, nominal: datetime,
                   placement: dict[str, Any] | None = None) -> SupervisedRun:
    logger = get_run_logger()
    choice = _forecast_choice(spec, monitor, prepared.figures, reading, nominal)
    caps = backend.capabilities()
    job = spec.job
    progress_path = Path(tempfile.mkdtemp(prefix="gridshift-")) / "progress"
    trial = begin_trial(job, caps, auto_batch_size=spec.auto_batch_size, ledger_path=ledger_path, run_id=run_id,
                        measured=backend.measured)
    if trial is not None:
        logger.info("batch size %d (%s): %s", trial.proposal.batch_size, trial.proposal.phase, trial.proposal.reason)
    channel = ModeFileChannel(progress_path.parent, spec.batch_sizes(trial.proposal.batch_size if trial else None),
                              {m: p.path for m, p in prepared.clock_plans.items()})
    watched: list[CostWatchedJob] = []
    # a checkpointable job gets its grace period to write the checkpoint; others the usual one
    grace = {"kill_grace_s": job.stop_grace_s} if job.pausable else {}

    def start_job(env: dict[str, str]) -> JobHandle | CostWatchedJob:
        job_env = {**job.env, **env, PROGRESS_ENV: str(progress_path)}
        if job.pausable:
            job_env[CHECKPOINT_DIR_ENV] = str(checkpoint_dir(run_id))
        if not job.argv:
            assert job.callable is not None
            if trial is not None and trial.beta is not None:
                out.warnings.append("batch-size early stop needs a command job: a callable cannot be stopped")
            return start_callable(job.callable, env=job_env, on_line=logger.info)
        handle = start_command(list(job.argv), on_line=logger.info, env=job_env, cwd=job.cwd, **grace)
        if trial is None:
            return handle
        watched.append(trial.watch(handle, backend.energy_mj))
        return watched[-1]

    # the saving's baseline needs the modes' figures also when threshold rules decide (the planner records its own)
    out.extra.setdefault("mode_figures", [{"mode": f.name, "power_w": f.power_w, "speed": f.speed, "source": f.source,
                                           "measured": f.measured} for f in prepared.figures])
    progress = progress_file_reader(progress_path)
    watch = cap_watch_for(spec, run_id, placement)
    cap_figures = spec.cap_figures(backend=backend, profile=prepared.power_profile) if spec.planned else []
    try:
        run = run_job(spec=spec, backend=backend, caps=caps, control=control, monitor=monitor, first=decision,
                      first_reading=reading, start_job=start_job, now=_utcnow, log=logger.info, deadline=deadline,
                      out=out, progress=progress, clock_plans=prepared.clock_plans,
                      power_profile=prepared.power_profile, fingerprint=job.fingerprint, profile_dir=profiles_dir(),
                      figures=prepared.figures, pausable=job.pausable, defer_pauses_over_s=defer_pauses_over_s,
                      mode_file=channel, choice=choice, cap_watch=watch, cap_figures=cap_figures)
    finally:
        watch.close()
        if (seen := progress.summary()) is not None:  # the job's progress reached the decisions
            out.extra["job_progress"] = seen
        if trial is not None:  # recorded whatever happened, so a pending trial never lingers
            result, _ = channel.result()
            try:
                out.extra["batch_size_trial"] = trial.finish(watched[0] if watched else None, result, out.exit_code,
                                                             channel.batch_sizes_used(result))
            except LedgerError as exc:  # the run's own outcome (and its report) matter more
                out.warnings.append(f"batch-size trial not recorded: {exc}")
        shutil.rmtree(progress_path.parent, ignore_errors=True)
    if run.exit_code not in (0, None):  # the task fails with the job, not only the flow (``out`` keeps the figures)
        raise JobFailed(run.exit_code, run.tail)
    return run


def _forecast_choice(spec: RunSpec, monitor: CarbonMonitor, figures: list[ModeFigures], reading: Reading,
                     nominal: datetime) -> ForecastChoice:
    """The do-no-harm gate for this run (:func:`flows.sources.forecast_choice`); the static plan if its record cannot be read."""
    try:
        return forecast_choice(monitor, spec, figures, reading, nominal=nominal, now=_utcnow())
    except Exception as exc:  # the archive is a record, not the run: a broken one costs the forecast, not the job
        return ForecastChoice(None, f"the forecast archive could not be read ({type(exc).__name__}: {exc}): the static plan")


@task(name="restore settings", cache_policy=NO_CACHE)
def restore_settings(backend: Backend) -> None:
    backend.restore()


def write_ledger(report: dict[str, Any], ledger_path: str | None) -> None:
    """The ledger is plain SQLite, written outside Prefect's task machinery on purpose: a run must be
    recorded even when the Prefect API has gone (a SIGTERM sent to the whole process group also stops
    the temporary server)."""
    with Ledger(ledger_path) as ledger:
        ledger.record(report)


@task(name="record report", cache_policy=NO_CACHE)
def publish_artifact(report: dict[str, Any], log: Callable[[str], None] = lambda _line: None) -> None:
    """The run's artifact; a deployment run whose server is away waits for it to come back (flows.run.api_outage)."""
    from flows.run.api_outage import API_RETURN_WAIT_S, through_outage

    through_outage(lambda: create_markdown_artifact(key=artifact_key(report["run_id"]), markdown=report_markdown(report),
                                                    description=f"gridshift run {report['run_id']} of {report['job']}"),
                   what="run artifact", log=log, wait_s=API_RETURN_WAIT_S if flow_run_deployment() is not None else 0.0)


@dataclass
class _Control:
    allowed: bool
    warning: str = ""


def _probe_control(backend: Backend, require_control: bool = False) -> _Control:
    """Decide before the job starts whether settings may change; NoPermission if required but not allowed."""
    caps = backend.capabilities()
    if caps.can_control:
        return _Control(True)
    if require_control:  # the flow restores, closes and records the run
        raise NoPermission(f"cannot change GPU settings ({caps.control_note or 'no permission'}) "
                           "and the policy sets backend.require_control: true", action="probe control")
    return _Control(False, f"cannot change GPU settings ({caps.control_note or 'no permission'}); running measure-only")


def _stored_power_profile(auto_power: bool, backend: Backend, fingerprint: str) -> tuple[PowerProfile | None, str]:
    """The stored power-limit profile for this GPU model and job, when a mode selects its limit."""
    if not auto_power:
        return None, ""
    caps = backend.capabilities()
    if not caps.devices:
        return None, ""
    try:
        return ProfileStore(profiles_dir()).load(caps.devices[0].name, fingerprint), ""
    except BadProfile as exc:  # a damaged profile costs the auto choice, not the run
        return None, f"power-limit profile unusable, ignored: {exc}"


@dataclass
class _Prepared:
    """What the device says before the job starts (see :func:`_prepare`)."""

    control: bool
    clock_plans: dict[str, ModePlan]
    power_profile: PowerProfile | None
    figures: list[ModeFigures]


def _prepare(spec: RunSpec, backend: Backend, warnings: list[str], logger: Any) -> _Prepared:
    """Before the job, against the device: may settings change (else measure-only, with a warning),
    its clock plans, the stored power profile, the modes' figures. Warnings go to ``warnings`` too."""
    control = _probe_control(backend, spec.require_control)
    # now against the device: its clock table and (on real hardware) its GPU model
    clock_plans = load_plan_files(spec.clock_plan_paths, backend.capabilities())
    power_profile, profile_warning = _stored_power_profile(spec.auto_power, backend, spec.job.fingerprint)
    for line in getattr(backend, "recovered", ()):  # journals of killed runs, replayed on open
        logger.warning("restored settings left by a killed run: %s", line)
    notes = [profile_warning, control.warning]
    if not backend.measured:  # in the report too: --json readers see no stderr
        notes.append(f"backend {backend.name!r} is simulated: energy and carbon figures are modelled, not measured")
    for note in filter(None, notes):
        logger.warning(note)
        warnings.append(note)
    figures = spec.mode_figures(backend=backend, profile=power_profile)
    return _Prepared(control.allowed, clock_plans, power_profile, figures)


def _restore_and_close(backend: Backend, monitor: CarbonMonitor, uninstall_signal_restore: Callable[[], None],
                       errors: list[BaseException], warnings: list[str], logger: Any) -> BaseException | None:
    """Restore the settings found, then close the backend and the monitor; each step on its own, so
    one failing skips neither the others nor the report. Returns the restore's error, if any."""
    restore_error: BaseException | None = None
    try:
        try:
            restore_settings(backend)
        except (KeyboardInterrupt, SystemExit) as exc:  # a second signal, inside Prefect's task machinery
            errors.append(exc)
            backend.restore()  # plainly (the signal handler has restored already; this says whether it held)
        finally:
            uninstall_signal_restore()
    except BaseException as exc:
        restore_error = exc
        errors.append(exc)
        note = f"settings may not be restored: run `gridshift gpu restore` ({type(exc).__name__}: {exc})"
        logger.warning(note)
        warnings.append(note)
    for close in (backend.close, monitor.close):
        try:
            close()
        except BaseException as exc:
            errors.append(exc)
            logger.warning("cleanup failed: %s: %s", type(exc).__name__, exc)
    return restore_error


def _utc(iso: str | None) -> datetime | None:
    # naive timestamps are UTC, as everywhere in gridshift (carbon.series.as_utc)
    return as_utc(datetime.fromisoformat(iso)) if iso else None


@partial(JsonParametersFlow, name="carbon_aware_training", log_prints=True, validate_parameters=False)
def carbon_aware_training(
    policy_path: str,
    run_id: str | None = None,
    command: list[str] | None = None,
    backend_name: str | None = None,
    ledger_path: str | None = None,
    nominal_start: str | None = None,
    planned_start: str | None = None,
    resume: dict[str, Any] | None = None,
    start_now: bool = False,
    report_extra: dict[str, Any] | None = None,
    site: str | None = None,
) -> dict[str, Any]:
    """Run the policy's job (or ``command``) under the policy; returns the report dict.

    A pausable job (``job.checkpointable``) under a deployment ends this flow run at a long planned
    pause with status ``paused``, after scheduling its next window as a flow run of the same
    deployment; ``resume`` (from :mod:`flows.job.windows`) carries the windows, spans and work done so far
    into that run, so its report covers them all. Outside a deployment the flow waits through pauses.

    ``nominal_start`` (ISO-8601) is the occurrence's nominal time (default: now): the deadline and
    the reported deferral count from it, and the job may start from ``nominal + earliest_start_s``
    (before it when negative). ``planned_start`` (ISO-8601, from a planner) is when to start; default
    now. ``start_now``: the caller's own scheduled time has come (a deployment run that Prefect
    started, perhaps moved earlier by hand), so nothing is waited for. The mode is decided at the
    real start time, on the intensity read then. ``report_extra`` goes into the report's ``extra``
    (the caller's context, e.g. the site and the GPUs the run holds). ``site``: one of the policy's
    sites; the run reads that site's grid.
    """
    logger = get_run_logger()
    spec = resolve_run(load_policy(policy_path), policy_path=policy_path, site=site, command=command,
                       backend_name=backend_name)
    load_plan_files(spec.clock_plan_paths)  # bad plan files are bad input: fail before any waiting
    run_id = run_id or new_run_id()
    nominal = _utc(nominal_start) or _utcnow()
    deadline = spec.job.deadline(nominal)
    monitor = monitor_for(spec.carbon)  # a bad carbon source is bad input: fail before any waiting
    try:
        if not start_now:  # a waiting run must be a Scheduled flow run in Prefect, not a sleeping worker
            wait_until(max(_utc(planned_start) or _utcnow(), spec.job.earliest(nominal)))
        now = _utcnow()  # read and decide for the moment the job really starts, not the nominal time
        reading = read_intensity(monitor, now)
        for failure in reading.failures:
            logger.warning("carbon source failed over: %s", failure)
        decision = None
        if not isinstance(spec.rules, PlanRule):  # threshold rules open here; the planner plans inside the run
            decision = decide_mode(spec.rules, spec.modes, spec.job.expected_duration_s, reading, now, deadline)
            logger.info("decision: %s mode — %s", decision.mode, decision.reason)
        backend = create_backend(spec.backend_name, **spec.backend_options)
    except BaseException:
        monitor.close()
        raise
    # From here on every path restores, closes and records a report (status failed on any error).
    started = _utcnow()
    run = resumed_run(resume)
    warnings = [f"carbon: {f}" for f in reading.failures]
    errors: list[BaseException] = []
    uninstall_signal_restore: Callable[[], None] = lambda: None
    try:
        prepared = _prepare(spec, backend, warnings, logger)
        started = run.windows[0].start if run.windows else _utcnow()
        # under a deployment a long pause is a Scheduled flow run, not a worker sleeping through it
        defer_over_s = DEFER_MIN_S if flow_run_deployment() is not None else None
        # SIGINT/SIGTERM restore at once from here until the settings are restored below, so that a
        # second signal while the job is stopped or the report is written cannot leave them changed
        uninstall_signal_restore = install_restore_handlers(backend, log=logger.warning)
        run_supervised(spec, backend, prepared.control, monitor, decision, reading, deadline, run, prepared, run_id,
                       defer_over_s, ledger_path, nominal, (report_extra or {}).get("placement"))
    except BaseException as exc:  # the report is still written, then the flow fails
        errors.append(exc)
    ended = _utcnow()
    restore_error = _restore_and_close(backend, monitor, uninstall_signal_restore, errors, warnings, logger)
    report, raised = run_report(spec, run, reading=reading, decision=decision, backend=backend, run_id=run_id,
                             nominal=nominal, started=started, ended=ended, deadline=deadline, errors=errors,
                             restore_error=restore_error, warnings=warnings, report_extra=report_extra, logger=logger)
    try:
        write_ledger(report, ledger_path)
    except BaseException as exc:
        if raised is None:
            raise
        logger.warning("run not recorded: %s: %s", type(exc).__name__, exc)
    try:
        publish_artifact(report, log=logger.warning)
    except Exception as exc:  # the ledger has the report; a missing artifact must not fail the run
        logger.warning("Prefect artifact not written: %s: %s", type(exc).__name__, exc)
    if raised is not None:
        raise raised
    return report

